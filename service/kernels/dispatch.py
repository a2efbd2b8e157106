"""The one place that picks a kernel backend for the MoE ops (STYLE §5, issue 10 part 4).

Rule: `auto` → Triton when the tensors are on CUDA and triton is installed, else the torch reference. `torch` forces the
reference anywhere. `triton` forces Triton and fails loudly where it cannot run (CPU without TRITON_INTERPRET=1, or triton
missing) rather than silently falling back: a silently disabled path is the failure MoE-Spec's SGLang attempt hit.
The choice comes from the `backend` argument, else the MOE_SERVE_KERNELS environment variable, else `auto`.
triton is imported only when the Triton path is taken, so CPU-only callers never pay for (or need) it.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Literal

import torch

from service.kernels import int4, moe_ref

Backend = Literal["torch", "triton"]
BACKEND_ENV = "MOE_SERVE_KERNELS"  # auto | torch | triton
CHOICES = ("auto", "torch", "triton")


def resolve_backend(device: torch.device | str, requested: str | None = None) -> Backend:
    """Backend for tensors on `device`; `requested` (else $MOE_SERVE_KERNELS, else "auto") is one of CHOICES."""
    choice = (requested or os.environ.get(BACKEND_ENV) or "auto").strip().lower()
    if choice not in CHOICES:
        raise ValueError(f"kernel backend must be one of {CHOICES}, got {choice!r} (argument or ${BACKEND_ENV})")
    on_cuda = torch.device(device).type == "cuda"
    has_triton = importlib.util.find_spec("triton") is not None
    if choice == "torch":
        return "torch"
    if choice == "auto":
        return "triton" if on_cuda and has_triton else "torch"
    if not has_triton:
        raise RuntimeError("kernel backend 'triton' requested but triton is not installed")
    if not on_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError(
            "kernel backend 'triton' on CPU tensors needs TRITON_INTERPRET=1 set before triton is imported"
        )
    return "triton"


def moe_forward(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    expert_mask: torch.Tensor | None = None,
    *,
    backend: str | None = None,
) -> torch.Tensor:
    """MoE expert forward with an optional budget mask; see moe_ref.moe_forward for shapes and semantics."""
    if resolve_backend(x.device, backend) == "triton":
        from service.kernels.triton.fused_moe_masked import fused_moe_masked

        return fused_moe_masked(x, w13, w2, topk_ids, topk_weights, expert_mask)
    return moe_ref.moe_forward(x, w13, w2, topk_ids, topk_weights, expert_mask)


def int4_matmul(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales: torch.Tensor,
    group_size: int = int4.GROUP_SIZE,
    *,
    backend: str | None = None,
) -> torch.Tensor:
    """`x [M, K] @ dequant(packed [N, K/2], scales [N, K/G]).T` → [M, N]; see int4.int4_matmul_ref."""
    if resolve_backend(x.device, backend) == "triton":
        from service.kernels.triton.int4_gemm import int4_gemm

        return int4_gemm(x, packed, scales, group_size)
    return int4.int4_matmul_ref(x, packed, scales, group_size)
