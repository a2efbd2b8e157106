"""Fused MoE expert forward in Triton, honouring a per-layer expert mask (MoE-Spec budget, issue 10 part 4).

Two grouped GEMMs over token slots sorted by expert (expert_blocks.py), one expert per block of `block_m` slots:
1. `_gate_up_act`: act[s] = silu(x[t] @ w13[e, :I].T) * (x[t] @ w13[e, I:].T), gate and up tiles in one program;
2. `_down_weighted`: y[s] = w[s] · act[s] @ w2[e].T, written per slot and summed over a token's k slots afterwards (no
   atomics, so the result does not depend on scheduling order).
Masked experts get no block, so their weights are never loaded. Same semantics as moe_ref.moe_forward, which is the oracle.
Nothing waits on the device (see expert_blocks.py), so a caller may capture the call in a CUDA graph with a mask tensor it
rewrites between replays.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from service.kernels.moe_ref import check_moe_shapes
from service.kernels.triton.align_blocks import expert_blocks

SUM_BLOCK_H = 512  # hidden columns per program of the final per-token sum


@triton.jit
def _gate_up_act(
    x_ptr, w13_ptr, act_ptr, slot_ptr, block_expert_ptr,
    num_slots, top_k, hidden, inter,
    stride_xt, stride_xh, stride_we, stride_wn, stride_wh, stride_as, stride_ai,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    if expert < 0:  # a worst-case block no expert needed (expert_blocks.max_blocks)
        return
    slots = tl.load(slot_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))  # [BM]; padding == num_slots
    valid_m = slots < num_slots
    tokens = (slots // top_k).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    valid_n = offs_n < inter
    w_base = w13_ptr + expert * stride_we
    acc_gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, hidden, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        valid_k = offs_k < hidden
        a = tl.load(
            x_ptr + tokens[:, None] * stride_xt + offs_k[None, :] * stride_xh,
            mask=valid_m[:, None] & valid_k[None, :],
            other=0.0,
        )  # [BM, BK]
        w_mask = valid_k[:, None] & valid_n[None, :]
        w_gate = tl.load(w_base + offs_n[None, :] * stride_wn + offs_k[:, None] * stride_wh, mask=w_mask, other=0.0)
        w_up = tl.load(
            w_base + (offs_n[None, :] + inter) * stride_wn + offs_k[:, None] * stride_wh, mask=w_mask, other=0.0
        )
        acc_gate += tl.dot(a, w_gate)  # [BM, BN]
        acc_up += tl.dot(a, w_up)
    act = acc_gate * tl.sigmoid(acc_gate) * acc_up
    tl.store(
        act_ptr + slots[:, None].to(tl.int64) * stride_as + offs_n[None, :] * stride_ai,
        act,
        mask=valid_m[:, None] & valid_n[None, :],
    )


@triton.jit
def _down_weighted(
    act_ptr, w2_ptr, weight_ptr, out_ptr, slot_ptr, block_expert_ptr,
    num_slots, hidden, inter,
    stride_as, stride_ai, stride_we, stride_wh, stride_wi, stride_os, stride_oh,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    if expert < 0:  # a worst-case block no expert needed (expert_blocks.max_blocks)
        return
    slots = tl.load(slot_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    valid_m = slots < num_slots
    slots64 = slots.to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    valid_n = offs_n < hidden
    w_base = w2_ptr + expert * stride_we
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, inter, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        valid_k = offs_k < inter
        a = tl.load(
            act_ptr + slots64[:, None] * stride_as + offs_k[None, :] * stride_ai,
            mask=valid_m[:, None] & valid_k[None, :],
            other=0.0,
        )
        w = tl.load(
            w_base + offs_n[None, :] * stride_wh + offs_k[:, None] * stride_wi,
            mask=valid_k[:, None] & valid_n[None, :],
            other=0.0,
        )  # [BK, BN]
        acc += tl.dot(a, w)
    routing = tl.load(weight_ptr + slots64, mask=valid_m, other=0.0).to(tl.float32)  # [BM]
    acc = acc * routing[:, None]
    tl.store(
        out_ptr + slots64[:, None] * stride_os + offs_n[None, :] * stride_oh,
        acc,
        mask=valid_m[:, None] & valid_n[None, :],
    )


@triton.jit
def _sum_kept_slots(
    slots_ptr, ids_ptr, mask_ptr, out_ptr,
    top_k, hidden, num_experts,
    stride_ss, stride_sh, stride_ot, stride_oh,
    HAS_MASK: tl.constexpr, BLOCK_H: tl.constexpr,
):  # fmt: skip
    """out[t] = Σ_j y[t*k + j] over the token's slots on kept experts, in out's dtype: the slots of masked experts
    were never written (their rows hold whatever the allocation did) and are not read."""
    token = tl.program_id(0).to(tl.int64)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    valid_h = offs_h < hidden
    acc = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for j in range(top_k):
        slot = token * top_k + j
        y = tl.load(slots_ptr + slot * stride_ss + offs_h * stride_sh, mask=valid_h, other=0.0)  # [BH]
        if HAS_MASK:  # an unwritten row may hold NaN: selected away, never added
            y = tl.where(tl.load(mask_ptr + tl.load(ids_ptr + slot)) != 0, y, 0.0)
        acc += y
    tl.store(out_ptr + token * stride_ot + offs_h * stride_oh, acc, mask=valid_h)


def fused_moe_masked(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    expert_mask: torch.Tensor | None = None,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Triton twin of `moe_ref.moe_forward`: x [T, H], w13 [E, 2I, H], w2 [E, H, I], topk [T, k] → [T, H] in x's dtype.

    Block sizes default to `default_blocks`; pass them (and Triton's num_warps / num_stages) to tune.
    """
    # Checking id values reads them on the host, which a CUDA graph capture forbids; shapes are still checked there.
    capturing = x.device.type == "cuda" and torch.cuda.is_current_stream_capturing()
    check_moe_shapes(x, w13, w2, topk_ids, topk_weights, expert_mask, check_values=not capturing)
    if not (x.dtype == w13.dtype == w2.dtype):
        raise ValueError(f"x, w13 and w2 must share a dtype, got {x.dtype}, {w13.dtype}, {w2.dtype}")
    num_experts, two_inter, hidden = w13.shape
    inter = two_inter // 2
    num_tokens, top_k = topk_ids.shape
    if expert_mask is not None:
        expert_mask = expert_mask.to(x.device)  # [E] bool, read by the layout and by the final sum
    auto_m, auto_n, auto_k = default_blocks(num_tokens * top_k, num_experts, x.device, w13.element_size())
    block_m, block_n, block_k = block_m or auto_m, block_n or auto_n, block_k or auto_k
    blocks = expert_blocks(topk_ids, num_experts, block_m, expert_mask)  # expert_blocks.py's layout
    num_blocks = blocks.block_expert.numel()
    if blocks.num_slots == 0:
        return torch.zeros_like(x)
    # Per-slot outputs: slots of masked experts are never written, and the final sum skips them (no zero-fill: on an
    # H200 the fill, the sum and the cast were three launches, ~9 us of a ~59 us 1-token OLMoE-shaped call).
    out_slots = torch.empty((blocks.num_slots, hidden), dtype=torch.float32, device=x.device)  # [T*k, H]
    act = torch.empty((blocks.num_slots, inter), dtype=w2.dtype, device=x.device)  # [T*k, I]
    weights = topk_weights.reshape(-1).contiguous()  # [T*k]
    launch = {name: value for name, value in (("num_warps", num_warps), ("num_stages", num_stages)) if value}

    _gate_up_act[(num_blocks, triton.cdiv(inter, block_n))](
        x, w13, act, blocks.slot_ids, blocks.block_expert,
        blocks.num_slots, top_k, hidden, inter,
        x.stride(0), x.stride(1), w13.stride(0), w13.stride(1), w13.stride(2), act.stride(0), act.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, **launch,
    )  # fmt: skip
    _down_weighted[(num_blocks, triton.cdiv(hidden, block_n))](
        act, w2, weights, out_slots, blocks.slot_ids, blocks.block_expert,
        blocks.num_slots, hidden, inter,
        act.stride(0), act.stride(1), w2.stride(0), w2.stride(1), w2.stride(2), out_slots.stride(0), out_slots.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, **launch,
    )  # fmt: skip
    out = torch.empty_like(x)  # [T, H]
    ids = topk_ids.reshape(-1).contiguous()  # [T*k]
    _sum_kept_slots[(num_tokens, triton.cdiv(hidden, SUM_BLOCK_H))](
        out_slots, ids, expert_mask if expert_mask is not None else ids, out,
        top_k, hidden, num_experts,
        out_slots.stride(0), out_slots.stride(1), out.stride(0), out.stride(1),
        HAS_MASK=expert_mask is not None, BLOCK_H=SUM_BLOCK_H,
    )  # fmt: skip
    return out


def default_blocks(num_slots: int, num_experts: int, device: torch.device, itemsize: int = 2) -> tuple[int, int, int]:
    """(block_m, block_n, block_k): small tiles for the interpreter; on CUDA block_m follows slots per expert, because a
    verify batch of a few tokens leaves most of a 64-row tile as padding.

    block_k at block_m 16 (verify sizes), from bench/gpu_evidence.py's sweep on an H200 (OLMoE- and Mixtral-shaped
    layers, 1-64 tokens, CUDA-graph replays; `cost.sweep` in bench/results/gpu_evidence/gpu_evidence.json): 256-deep K
    tiles ran at 1.01x of the best config per case (geometric mean; worst 1.05x), 128 at 1.03x (worst 1.14x), 64 at
    1.09x (worst 1.34x, Mixtral at 2 tokens). A 256-deep
    tile of 2-byte weights takes ~216 KB of shared memory over Triton's 3 stages: only Hopper and datacenter Blackwell
    (sm_90, sm_100) have that much, elsewhere 128; 4-byte weights (fp32) and larger block_m keep the untuned 64 (a
    256-deep fp32 tile ran out of shared memory on the H200)."""
    if device.type != "cuda":
        return 16, 32, 32
    per_expert = num_slots / max(num_experts, 1)
    block_m = 16 if per_expert <= 16 else 32 if per_expert <= 64 else 64
    if block_m > 16 or itemsize > 2:
        return block_m, 64, 64
    return block_m, 64, 256 if torch.cuda.get_device_capability(device)[0] in (9, 10) else 128
