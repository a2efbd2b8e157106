"""A decode step's attention sublayer (RMSNorm, QKV product, NeoX rope, K/V written to the pool, attention over each
request's slots, output product, residual) in one call of the C++ library of stream_gemm.py
(csrc/decode_attention.cpp), and the torch ops it replaces, which are its reference; `chain_attention` the same over
several rows per request that form a chain (causal inside each request's block).

Why: at a decode's few rows the sublayer is a few tens of microseconds of arithmetic spelled as a dozen torch ops per
layer, each dispatched from Python; on a plain batch-1 moe-fine step those lines of the direct forward took ~38 % of
the step's py-spy samples (README, issue 15). The products take the forms the engine's dense plan chose for the row
count (`kinds_*`: small_gemm.GemmPlan.kinds; empty: torch's F.linear). Measured in the engine (bench.decode_peer,
README, issue 15): ~20 % off a batch-1 moe-fine decode, nothing beyond the spread on the memory-bound copy.

Layouts are SGLang's: K/V pools [slots, kv_heads, head_dim] float32, `req_to_token` [rows, context] int32 with request
b's slots of its committed positions 0..seq_lens[b]-2 in row pool_rows[b] (the new token's is `loc[b]`, whatever the
table holds there; chain_attention: each row's slot is its `loc`, the committed ones the table's), and the rope table
`cos_sin_cache` [positions, head_dim] of cosines then sines (its RotaryEmbedding's). Used by the target's decode
forward (moe_sglang/target_forward.py) and the STANDALONE draft's forwards (moe_sglang/draft_forward.py: one token per
request, and chains of several).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from service.kernels import stream_gemm
from service.kernels.attention_fused import sdpa
from service.kernels.rope import neox_tables, rotate_neox


def available() -> bool:
    """Whether the C++ op is built and loaded here (stream_gemm.load)."""
    return stream_gemm.available()


def decode_attention(
    h: torch.Tensor,  # [B, hidden] the residual stream
    norm_w: torch.Tensor,  # [hidden] the layer's input RMSNorm
    eps: float,
    qkv_w: torch.Tensor,  # [(heads + 2 kv_heads) * D, hidden]
    o_w: torch.Tensor,  # [hidden, heads * D]
    cos_sin_cache: torch.Tensor,  # [positions, D]
    positions: torch.Tensor,  # [B] int
    k_buffer: torch.Tensor,  # [slots, kv_heads, D], written at loc
    v_buffer: torch.Tensor,
    loc: torch.Tensor,  # [B] int, the slot of each request's new token
    req_to_token: torch.Tensor,  # [rows, context] int32
    pool_rows: torch.Tensor,  # [B] int
    seq_lens: torch.Tensor,  # [B] int, including the new token
    heads: int,
    kv_heads: int,
    scale: float,
    kinds_qkv: Sequence[int] = (),
    kinds_o: Sequence[int] = (),
    isa: str | None = None,
) -> torch.Tensor:
    """h + the attention sublayer's output [B, hidden] (the op checks its inputs and says what is wrong)."""
    return torch.ops.moe_serve.decode_attention.default(
        h, norm_w, eps, qkv_w, o_w, cos_sin_cache, positions, k_buffer, v_buffer, loc, req_to_token, pool_rows,
        seq_lens, heads, kv_heads, scale, isa or stream_gemm.best_isa(), list(kinds_qkv), list(kinds_o),
    )  # fmt: skip


def chain_attention(
    h: torch.Tensor,  # [T, hidden] the residual stream, the requests' rows laid end to end
    norm_w: torch.Tensor,
    eps: float,
    qkv_w: torch.Tensor,
    o_w: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    positions: torch.Tensor,  # [T] int
    k_buffer: torch.Tensor,  # [slots, kv_heads, D], written at loc
    v_buffer: torch.Tensor,
    loc: torch.Tensor,  # [T] int, each row's slot
    req_to_token: torch.Tensor,  # [rows, context] int32
    pool_rows: torch.Tensor,  # [B] int
    prefix_lens: torch.Tensor,  # [B] int, committed tokens: request b's slots 0..prefix-1 in its table row
    ext_lens: torch.Tensor,  # [B] int, request b's rows in h (a chain: row j sees the committed keys and rows 0..j)
    heads: int,
    kv_heads: int,
    scale: float,
    kinds_qkv: Sequence[int] = (),
    kinds_o: Sequence[int] = (),
    isa: str | None = None,
) -> torch.Tensor:
    """decode_attention over several rows per request that form a chain (a chain's verify, a draft model's
    catch-up): h + the attention sublayer's output [T, hidden], causal inside each request's block."""
    return torch.ops.moe_serve.chain_attention.default(
        h, norm_w, eps, qkv_w, o_w, cos_sin_cache, positions, k_buffer, v_buffer, loc, req_to_token, pool_rows,
        prefix_lens, ext_lens, heads, kv_heads, scale, isa or stream_gemm.best_isa(), list(kinds_qkv), list(kinds_o),
    )  # fmt: skip


def chain_attention_reference(
    h, norm_w, eps, qkv_w, o_w, cos_sin_cache, positions, k_buffer, v_buffer, loc, req_to_token, pool_rows,
    prefix_lens, ext_lens, heads, kv_heads, scale, mm=F.linear,
) -> torch.Tensor:  # fmt: skip
    """chain_attention in torch ops, request by request (arguments as chain_attention)."""
    dim = cos_sin_cache.shape[1]
    x = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * norm_w
    q, k, v = mm(x, qkv_w).split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    cos, sin = neox_tables(cos_sin_cache, positions.long())
    q = rotate_neox(q, dim, cos, sin).view(-1, heads, dim)
    k_buffer[loc.long()] = rotate_neox(k, dim, cos, sin).view(-1, kv_heads, dim)
    v_buffer[loc.long()] = v.reshape(-1, kv_heads, dim)
    out, start = [], 0
    for b, (prefix, ext) in enumerate(zip(prefix_lens.tolist(), ext_lens.tolist(), strict=True)):
        slots = torch.cat([req_to_token[int(pool_rows[b]), :prefix].long(), loc[start : start + ext].long()])
        visible = torch.ones(ext, prefix + ext, dtype=torch.bool).tril_(prefix)  # row j: keys 0..prefix + j
        o = sdpa(q[None, start : start + ext], k_buffer[slots][None], v_buffer[slots][None], visible[None], scale)
        out.append(o.reshape(ext, heads * dim))
        start += ext
    return h + mm(torch.cat(out), o_w)


def decode_attention_reference(
    h, norm_w, eps, qkv_w, o_w, cos_sin_cache, positions, k_buffer, v_buffer, loc, req_to_token, pool_rows, seq_lens,
    heads, kv_heads, scale, mm=F.linear,
) -> torch.Tensor:  # fmt: skip
    """The same in torch ops, request by request (arguments as decode_attention; `mm(x, w)` = x @ w.T)."""
    dim = cos_sin_cache.shape[1]
    x = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * norm_w
    q, k, v = mm(x, qkv_w).split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
    cos, sin = neox_tables(cos_sin_cache, positions.long())
    q = rotate_neox(q, dim, cos, sin).view(-1, 1, heads, dim)
    k_buffer[loc.long()] = rotate_neox(k, dim, cos, sin).view(-1, kv_heads, dim)
    v_buffer[loc.long()] = v.reshape(-1, kv_heads, dim)
    out = []
    for b, n in enumerate(seq_lens.tolist()):
        slots = torch.cat([req_to_token[int(pool_rows[b]), : n - 1].long(), loc[b : b + 1].long()])
        keys, values = k_buffer[slots][None], v_buffer[slots][None]
        out.append(sdpa(q[b : b + 1], keys, values, None, scale).reshape(1, heads * dim))
    return h + mm(torch.cat(out), o_w)
