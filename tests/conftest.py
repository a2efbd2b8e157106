"""Test-session wiring shared by every test package.

Markers: `sglang` tests need the real SGLang engine (installed by scripts/setup.sh); `gpu` tests need CUDA and are
skipped where there is none.
"""

import pytest


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _has_cuda():
        return
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
