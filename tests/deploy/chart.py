"""Render the Helm chart offline with Helm's own Go library (PyPI `helm-python-sdk`; no helm binary, no cluster)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.usage import REPO

CHART = REPO / "deploy" / "helm" / "moe-serve"
GPU_VALUES = CHART / "values-gpu.yaml"
RELEASE, NAMESPACE = "prod", "serving"


def helm():
    return pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (pip install '.[deploy]')")


def gpu_values() -> dict[str, Any]:
    return yaml.safe_load(GPU_VALUES.read_text())


def render(values: dict[str, Any] | None = None) -> dict[str, str]:
    """Template path -> rendered text, as `helm template` would print them."""
    return helm().Chart.load(CHART).render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)


def manifests(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every Kubernetes object the chart renders (NOTES.txt left out)."""
    objects = []
    for path, text in render(values).items():
        if Path(path).suffix in (".yaml", ".yml"):
            objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] == kind}


def container(objects: list[dict[str, Any]], deployment: str) -> dict[str, Any]:
    return by_kind(objects, "Deployment")[deployment]["spec"]["template"]["spec"]["containers"][0]
