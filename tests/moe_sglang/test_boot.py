"""The import hook lets SGLang's engine module import on CPU torch (sgl_kernel without compiled ops, CUDA-linked
torchvision) and registers nothing by itself."""

import subprocess
import sys

import pytest

from moe_sglang import boot

pytestmark = pytest.mark.sglang


def run_python(code: str, **env) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )


def test_engine_module_imports_with_the_hook():
    code = (
        "import sglang.srt.entrypoints.engine, torchvision, sgl_kernel\n"
        "from moe_sglang.boot import installed_finder\n"
        "print(sorted(set(installed_finder().applied)))"
    )
    result = run_python(code, SGLANG_USE_CPU_ENGINE="1")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "['sgl_kernel.load_utils', 'torchvision']" in result.stdout


def test_without_the_hook_the_import_fails_as_documented():
    # Guards the reason the hook exists: if this ever passes, a newer torchvision/sgl_kernel made it unnecessary.
    result = run_python("import sglang.srt.entrypoints.engine", SGLANG_USE_CPU_ENGINE="1", MOE_SERVE_NO_BOOT="1")
    assert result.returncode != 0
    assert "torchvision::nms" in result.stderr or "common_ops" in result.stderr


def test_install_is_idempotent():
    boot.install()
    boot.install()
    assert sum(isinstance(f, boot._BootFinder) for f in sys.meta_path) == 1
