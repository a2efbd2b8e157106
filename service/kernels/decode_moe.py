"""A decode step's MoE sublayer (RMSNorm, router product, softmax top-k routing, the experts, residual) in one call of
the C++ library of stream_gemm.py (csrc/decode_moe.cpp), and the torch ops it replaces, which are its reference.

Why: at a decode's few rows the sublayer around the expert products is tens of microseconds of arithmetic spelled as
a dozen Python-dispatched ops and calls per layer (README, issue 15). The router product takes the form the engine's
dense plan chose for the row count (`kinds_router`), the experts' products the MoE plan's (`kinds13`, `kinds2`:
small_gemm.GemmPlan.kinds; empty: torch's F.linear). Routing is SGLang's `fused_topk_torch_native` for softmax
scoring without a correction bias: softmax in float32, the top_k largest in decreasing order, renormalized as
w / (sum + renorm_eps) where the model's router is. It returns the routing too, for what SGLang and the engine's
expert counts record of it. Used by the target's decode and verify forwards (moe_sglang/target_forward.py): any
number of rows, the products beyond the plans' row counts as F.linear (what the torch path's products do there).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from service.kernels import stream_gemm
from service.kernels.moe_ref import moe_forward, route_topk


def available() -> bool:
    """Whether the C++ op is built and loaded here (stream_gemm.load)."""
    return stream_gemm.available()


def decode_moe(
    h: torch.Tensor,  # [T, hidden] the residual stream
    norm_w: torch.Tensor,  # [hidden] the layer's post-attention RMSNorm
    eps: float,
    router_w: torch.Tensor,  # [experts, hidden]
    top_k: int,
    renormalize: bool,
    renorm_eps: float,  # added to the kept weights' sum before dividing (SGLang's _RENORMALIZE_SUM_EPSILON)
    w13: torch.Tensor,  # [experts, 2 * inter, hidden] gate and up
    w2: torch.Tensor,  # [experts, hidden, inter] down
    kinds_router: Sequence[int] = (),
    kinds13: Sequence[int] = (),
    kinds2: Sequence[int] = (),
    isa: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(h + the MoE sublayer's output [T, hidden], routing weights [T, top_k] float32, expert ids [T, top_k] int64);
    the op checks its inputs and says what is wrong."""
    return torch.ops.moe_serve.decode_moe.default(
        h, norm_w, eps, router_w, top_k, renormalize, renorm_eps, w13, w2, isa or stream_gemm.best_isa(),
        list(kinds_router), list(kinds13), list(kinds2),
    )  # fmt: skip


def decode_moe_reference(
    h, norm_w, eps, router_w, top_k, renormalize, renorm_eps, w13, w2, mm=F.linear
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same in torch ops (arguments as decode_moe; `mm(x, w)` = x @ w.T)."""
    x = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * norm_w
    ids, weights = route_topk(mm(x, router_w), top_k, renormalize=False)
    if renormalize:  # SGLang's renormalization: the epsilon added to the sum (route_topk's has none)
        weights = weights / (weights.sum(dim=-1, keepdim=True, dtype=torch.float32) + renorm_eps)
    return h + moe_forward(x, w13, w2, ids, weights), weights, ids
