"""External validators the deploy tests run, and how to skip clearly where one is missing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

# apt lines CI must run for these tests not to skip (see test docstrings for why each tool).
APT_HINT = {"promtool": "apt-get install -y prometheus"}


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (Debian: {APT_HINT.get(name, 'apt-get install -y ' + name)})")
    return path


def run(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result
