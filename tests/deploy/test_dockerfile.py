"""Static checks of the Dockerfile (no Docker engine here): both targets exist, run non-root with a healthcheck,
copy only what exists, bake in no secret, and build on the official SGLang image of the release we pin."""

from __future__ import annotations

import re

import pytest

from tests.deploy.usage import REPO

DOCKERFILE = (REPO / "Dockerfile").read_text()


def _stages() -> dict[str, str]:
    """Stage name -> its instructions (line continuations joined)."""
    text = re.sub(r"\\\n", " ", DOCKERFILE)
    stages, name = {}, None
    for line in text.splitlines():
        match = re.match(r"FROM\s+\S+\s+AS\s+(\S+)", line, re.I)
        if match:
            name = match.group(1)
            stages[name] = ""
        elif name:
            stages[name] += line + "\n"
    return stages


def test_sglang_base_matches_the_pinned_release():
    pinned = re.search(r"SGLANG_VERSION=(\S+)", (REPO / "scripts/setup.sh").read_text()).group(1)
    assert f"ARG SGLANG_IMAGE=lmsysorg/sglang:v{pinned}-cu130" in DOCKERFILE


# ids must not be "gpu": tests/conftest.py skips items with that keyword where CUDA is absent
@pytest.mark.parametrize("target", ["gpu", "cpu"], ids=["gpu-target", "cpu-target"])
def test_runtime_targets_run_non_root_with_a_healthcheck(target):
    stage = _stages()[target]
    user = re.findall(r"^USER\s+(\S+)", stage, re.M)
    assert user and not user[-1].startswith(("root", "0")), user
    assert re.search(r"^HEALTHCHECK .*CMD", stage, re.M)
    assert re.search(r'^ENTRYPOINT \["moe-serve"\]', stage, re.M)


def test_cpu_target_is_the_default_and_built_by_the_setup_script():
    assert list(_stages())[-1] == "cpu"
    assert "scripts/setup.sh" in _stages()["cpu-build"]


def test_copied_paths_exist():
    copies = [line.split()[1:-1] for line in DOCKERFILE.splitlines() if line.startswith("COPY ")]
    sources = [path for paths in copies if not paths[0].startswith("--from") for path in paths]
    assert "service" in sources and "moe_sglang" in sources
    for path in sources:
        assert (REPO / path).exists(), path


def test_no_secret_is_baked_in():
    for line in re.findall(r"^(?:ENV|ARG)\s.*$", re.sub(r"\\\n", " ", DOCKERFILE), re.M):
        assert not re.search(r"(KEY|TOKEN|PASSWORD|SECRET)\w*=", line, re.I), line


def test_dockerignore_keeps_the_venv_and_git_out():
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".git", ".venv", "tests"} <= set(ignored)
