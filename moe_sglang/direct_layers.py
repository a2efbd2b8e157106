"""The pieces the direct forwards (draft_forward.py, target_forward.py) share: SGLang's RMSNorm in float32 and the
attention sublayer of a decoder layer over SGLang's KV pool (fused QKV product, NeoX rope, the new K/V written to
their slots, attention, output product).

One copy, so that the draft's and the target's forwards cannot drift apart: both reproduce SGLang's layers, and a
fix to one (a rope or slot-writing detail) must reach the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from service.kernels.attention_fused import extend_attention_fused
from service.kernels.rope import rotate_neox


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """SGLang's RMSNorm.forward_native in float32, op for op."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


@dataclass(frozen=True)
class AttentionDims:
    heads: int  # query heads
    kv_heads: int
    head_dim: int  # elements per head

    @property
    def q_size(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def scale(self) -> float:
        return self.head_dim**-0.5


@dataclass(frozen=True)
class RaggedBatch:
    """Where the rows of a ragged forward go: request b's ext_lens[b] rows start at starts[b] and see its committed
    slots [0, seq_lens[b] - ext_lens[b]) first."""

    out_cache_loc: torch.Tensor  # [T] int64, the pool slot each row's K/V is written to
    req_to_token: torch.Tensor  # [pool rows, max context] int32, the slots of each request's positions
    pool_rows: torch.Tensor  # [B] the requests' rows of req_to_token
    seq_lens: torch.Tensor  # [B] int64, committed + new tokens
    ext_lens: torch.Tensor  # [B] int64, the request's rows in this forward
    starts: torch.Tensor  # [B] int64, its first row
    max_ext: int  # max(ext_lens)
    mask: torch.Tensor | None  # [sum ext_b^2] bool, request b's [ext_b, ext_b] block (row i sees row j); None: causal


def qkv_rope(
    x: torch.Tensor,  # [T, hidden], normed
    qkv: torch.Tensor,  # [q_size + 2 kv_size, hidden]
    dims: AttentionDims,
    cos: torch.Tensor,  # [T, 1, head_dim] (service/kernels/rope.neox_tables)
    sin: torch.Tensor,  # [T, 1, head_dim]
    mm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q [T, heads, D], k and v [T, kv_heads, D], q and k rotated."""
    q, k, v = mm(x, qkv).split([dims.q_size, dims.kv_size, dims.kv_size], dim=-1)
    q = rotate_neox(q, dims.head_dim, cos, sin).view(-1, dims.heads, dims.head_dim)
    k = rotate_neox(k, dims.head_dim, cos, sin).view(-1, dims.kv_heads, dims.head_dim)
    return q, k, v.reshape(-1, dims.kv_heads, dims.head_dim)


def ragged_attention(
    x: torch.Tensor,  # [T, hidden], normed
    qkv: torch.Tensor,  # [q_size + 2 kv_size, hidden]
    o_proj: torch.Tensor,  # [hidden, q_size]
    layer_id: int,  # the layer's index in the KV pool
    pool,  # get_key_buffer / get_value_buffer(layer_id) -> [slots, kv_heads, D]
    rows: RaggedBatch,
    dims: AttentionDims,
    cos: torch.Tensor,
    sin: torch.Tensor,
    mm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """The attention sublayer's output [T, hidden] over the rows of a ragged forward (the attention op SGLang's CPU
    backend calls for an extend, with the same layout); the rows' K/V are written to their slots first."""
    q, k, v = qkv_rope(x, qkv, dims, cos, sin, mm)
    k_buffer = pool.get_key_buffer(layer_id)
    v_buffer = pool.get_value_buffer(layer_id)
    k_buffer[rows.out_cache_loc] = k
    v_buffer[rows.out_cache_loc] = v
    o = torch.empty_like(q)
    extend_attention_fused(
        q, k, v, o, k_buffer, v_buffer, 1.0, 1.0, rows.req_to_token, rows.pool_rows, rows.seq_lens, rows.ext_lens,
        rows.starts, rows.max_ext, dims.scale, 0.0, False, 0, None, None, rows.mask, True,
    )  # fmt: skip
    return mm(o.view(-1, dims.q_size), o_proj)
