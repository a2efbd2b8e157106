"""The kernel dispatch: which backend each device/request gets, loud failures, and no triton import on the CPU path.

The Triton side of the dispatch (backend="triton" on CPU under the interpreter) is compared with the reference in
triton_cases.py (`dispatch_forced_triton`).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from service.kernels import dispatch, int4, moe_ref
from tests.kernels.test_moe_ref import make_inputs

REPO_ROOT = Path(__file__).resolve().parents[2]
REAL_FIND_SPEC = importlib.util.find_spec


@pytest.fixture
def world(monkeypatch):
    """Set whether triton is installed and whether the interpreter is on, without touching the real install."""

    def set_world(*, has_triton: bool, interpret: bool = False, env_backend: str | None = None):
        def find_spec(name, *args):
            if name == "triton":
                return REAL_FIND_SPEC("json") if has_triton else None
            return REAL_FIND_SPEC(name, *args)

        monkeypatch.setattr(dispatch.importlib.util, "find_spec", find_spec)
        if interpret:
            monkeypatch.setenv("TRITON_INTERPRET", "1")
        else:
            monkeypatch.delenv("TRITON_INTERPRET", raising=False)
        if env_backend is None:
            monkeypatch.delenv(dispatch.BACKEND_ENV, raising=False)
        else:
            monkeypatch.setenv(dispatch.BACKEND_ENV, env_backend)

    return set_world


@pytest.mark.parametrize(
    ("device", "requested", "env_backend", "has_triton", "interpret", "expected"),
    [
        ("cpu", None, None, True, False, "torch"),
        ("cuda", None, None, True, False, "triton"),
        ("cuda", None, None, False, False, "torch"),
        ("cuda", "auto", None, True, False, "triton"),
        ("cuda", "torch", None, True, False, "torch"),
        ("cuda", None, "torch", True, False, "torch"),
        ("cuda", "auto", "torch", True, False, "triton"),  # the argument wins over the environment
        ("cpu", "triton", None, True, True, "triton"),
        ("cpu", None, "TRITON", True, True, "triton"),
        ("cpu", "auto", None, True, True, "torch"),  # the interpreter is for tests, never chosen by itself
    ],
)
def test_resolve_backend(world, device, requested, env_backend, has_triton, interpret, expected):
    world(has_triton=has_triton, interpret=interpret, env_backend=env_backend)
    assert dispatch.resolve_backend(device, requested) == expected


@pytest.mark.parametrize(
    ("device", "requested", "has_triton", "interpret", "error", "message"),
    [
        ("cpu", "cuda", True, False, ValueError, "one of"),
        ("cpu", "triton", True, False, RuntimeError, "TRITON_INTERPRET=1"),
        ("cuda", "triton", False, False, RuntimeError, "not installed"),
    ],
)
def test_impossible_requests_fail_loudly(world, device, requested, has_triton, interpret, error, message):
    world(has_triton=has_triton, interpret=interpret)
    with pytest.raises(error, match=message):
        dispatch.resolve_backend(device, requested)


def test_unknown_backend_in_the_environment_is_rejected(world):
    world(has_triton=True, env_backend="cutlass")
    with pytest.raises(ValueError, match="MOE_SERVE_KERNELS"):
        dispatch.resolve_backend("cpu")


def test_cpu_ops_are_the_reference(world):
    world(has_triton=True)
    x, w13, w2, ids, weights = make_inputs(5, 16, 8, 4, 2)
    mask = torch.tensor([True, False, True, True])
    assert torch.equal(
        dispatch.moe_forward(x, w13, w2, ids, weights, mask), moe_ref.moe_forward(x, w13, w2, ids, weights, mask)
    )
    packed, scales = int4.quantize_int4(torch.randn(6, 128))
    xq = torch.randn(3, 128)
    assert torch.equal(dispatch.int4_matmul(xq, packed, scales), int4.int4_matmul_ref(xq, packed, scales))


def test_cpu_path_never_imports_triton():
    script = (
        "import sys, torch\n"
        "from service.kernels import dispatch, int4\n"
        "from tests.kernels.test_moe_ref import make_inputs\n"
        "dispatch.moe_forward(*make_inputs(3, 8, 4, 4, 2))\n"
        "dispatch.int4_matmul(torch.randn(2, 128), *int4.quantize_int4(torch.randn(3, 128)))\n"
        "assert 'triton' not in sys.modules, 'triton was imported on the CPU path'\n"
    )
    env_free = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, env=env_free, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
