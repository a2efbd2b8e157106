"""The attention ops through torch's fused CPU attention kernel (`scaled_dot_product_attention`), the CPU engine's
default: same arguments and results as the ops of attention_cpu.py, which stay the reference (`*_loop`) and the path
for what the fused kernel cannot do (soft-capped logits, attention sinks, cross attention, encoder offsets).

Why: the torch-op versions spend most of a layer's attention in a dozen small ops (scores, scale, mask, softmax,
NaN guard, the value product, the permutes between them), each a few microseconds of dispatch on a 2-core CPU; the
fused kernel is one call that never materialises the scores. Measured by `python -m bench.attention_ops` (the
engine's shapes): see the README's attention table. Rows that see no key come out as zeros, as in the reference
(torch's CPU kernel returns zeros for a fully masked row; tested).

Several requests attend as one padded batch (every request's keys to the longest, a [B, M, N] mask: the batched
op's, attention_cpu.padded_extend). A single request attends without padding, and so does each request of a prefill
longer than BATCHED_EXTEND_MAX (one long prompt does not pad the others; a causal prefill without a cached prefix
needs no mask at all).
"""

import torch
import torch.nn.functional as F

from service.kernels._checks import require
from service.kernels.attention_cpu import (
    BATCHED_EXTEND_MAX,
    _check_heads,
    _gathered,
    decode_attention_cpu,
    extend_attention_cpu,
    padded_decode,
    padded_extend,
)


def sdpa(
    q: torch.Tensor,  # [B, M, H, D]
    k: torch.Tensor,  # [B, N, Hkv, D] fp32
    v: torch.Tensor,  # [B, N, Hkv, Dv] fp32
    visible: torch.Tensor | None,  # [B, M, N] bool; None = every key (or causal)
    sm_scale: float,
    causal: bool = False,  # query i sees keys 0..i (M == N, no mask)
) -> torch.Tensor:
    """softmax(q k^T * sm_scale, masked) v per head in fp32, GQA without copying K/V.  -> [B, M, H, Dv] (a view)"""
    out = F.scaled_dot_product_attention(
        q.float().transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        attn_mask=None if visible is None else visible[:, None],
        is_causal=causal,
        scale=sm_scale,
        enable_gqa=q.shape[2] != k.shape[2],
    )
    return out.transpose(1, 2)


def _unfused(logit_cap, is_cross_attn: bool, encoder_lens, sinks) -> bool:
    """What the fused kernel has no argument for: a logit soft cap, sink logits; cross attention and encoder
    offsets keep the reference's per-request path."""
    return bool(logit_cap) or sinks is not None or is_cross_attn or encoder_lens is not None


def decode_attention_fused(
    query, k_buffer, v_buffer, k_scale, v_scale, output, key, value, loc, attn_logits, req_to_token,
    req_pool_indices, seq_lens, sm_scale, logit_cap, is_cross_attn, sliding_window_size, encoder_lens, sinks,
) -> None:  # fmt: skip
    """Decode attention (arguments as attention_cpu.decode_attention_loop) in one fused call per layer."""
    if _unfused(logit_cap, is_cross_attn, encoder_lens, sinks):
        return decode_attention_cpu(
            query, k_buffer, v_buffer, k_scale, v_scale, output, key, value, loc, attn_logits, req_to_token,
            req_pool_indices, seq_lens, sm_scale, logit_cap, is_cross_attn, sliding_window_size, encoder_lens, sinks,
        )  # fmt: skip
    k, v, visible = padded_decode(
        query, k_buffer, v_buffer, k_scale, v_scale, key, value, loc, req_to_token, req_pool_indices, seq_lens,
        sliding_window_size,
    )  # fmt: skip
    output.copy_(sdpa(query[:, None], k, v, visible, sm_scale)[:, 0])


def extend_attention_fused(
    q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, k_scale, v_scale, req_to_token, req_pool_indices,
    seq_lens, extend_seq_lens, extend_start_loc, max_len_extend, sm_scale, logit_cap, is_cross_attn,
    sliding_window_size, encoder_lens, sinks, tree_mask, is_causal,
) -> None:  # fmt: skip
    """Extend attention (arguments as attention_cpu.extend_attention_loop) in one fused call per layer, or one per
    request for a prefill."""
    if _unfused(logit_cap, is_cross_attn, encoder_lens, sinks):
        return extend_attention_cpu(
            q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, k_scale, v_scale, req_to_token,
            req_pool_indices, seq_lens, extend_seq_lens, extend_start_loc, max_len_extend, sm_scale, logit_cap,
            is_cross_attn, sliding_window_size, encoder_lens, sinks, tree_mask, is_causal,
        )  # fmt: skip
    op = "extend_attention_cpu"
    require(q_extend.dim() == 3 and o_extend.dim() == 3, op, "q_extend and o_extend must be [tokens, heads, dim]")
    _check_heads(op, q_extend.shape[1], k_buffer.shape[1])
    require((k_extend is None) == (v_extend is None), op, "k_extend and v_extend come together")
    lens, ext = seq_lens.long(), extend_seq_lens.long()
    # the one host read of the op: every request's lengths, start row and pool row
    lens_h, ext_h, starts_h, pools_h = torch.stack(
        [lens, ext, extend_start_loc.long(), req_pool_indices.long()]
    ).tolist()
    for b, (n, e) in enumerate(zip(lens_h, ext_h, strict=True)):
        require(n >= e, op, f"request {b}: extend length {e} exceeds seq_len {n}")
    tree = tree_mask.reshape(-1).bool() if tree_mask is not None else None
    sizes = [e * e for e in ext_h]
    if tree is not None:
        require(
            tree.numel() == sum(sizes), op, f"tree_mask has {tree.numel()} entries, expected sum(extend^2)={sum(sizes)}"
        )
    if len(lens_h) > 1 and max(ext_h) <= BATCHED_EXTEND_MAX:
        q, k, v, visible, q_rows, row_valid = padded_extend(
            q_extend, k_extend, v_extend, k_buffer, v_buffer, k_scale, v_scale, req_to_token, req_pool_indices,
            lens, ext, extend_start_loc, max(ext_h), max(lens_h), sliding_window_size, tree, is_causal,
        )  # fmt: skip
        out = sdpa(q, k, v, visible, sm_scale)  # [B, M, H, Dv]
        o_extend[q_rows[row_valid]] = out[row_valid].to(o_extend.dtype)
        return
    offset = 0
    for n, e, start, pool in zip(lens_h, ext_h, starts_h, pools_h, strict=True):
        block = None if tree is None else tree[offset : offset + e * e].view(e, e)
        rows = slice(start, start + e)
        new_kv = None if k_extend is None else (k_extend[rows], v_extend[rows])
        out = _extend_request(
            q_extend[rows], new_kv, k_buffer, v_buffer, k_scale, v_scale, req_to_token[pool], n, block, is_causal,
            sliding_window_size, sm_scale,
        )  # fmt: skip
        o_extend[rows] = out.to(o_extend.dtype)
        offset += e * e


def _extend_request(
    q: torch.Tensor,  # [E, H, D] the request's queries
    new_kv: tuple[torch.Tensor, torch.Tensor] | None,  # its new keys / values [E, Hkv, D] as given; None: the pool's
    k_buffer, v_buffer, k_scale: float, v_scale: float,
    row: torch.Tensor,  # [max_context] its pool slots
    n: int,  # keys: cached prefix + the E new tokens
    tree: torch.Tensor | None,  # [E, E] bool, row i = the extend tokens query i sees
    is_causal: bool, window: int, sm_scale: float,
) -> torch.Tensor:  # fmt: skip
    """One request's extend attention, unpadded.  -> [E, H, Dv] fp32"""
    e = q.shape[0]
    prefix = n - e
    if new_kv is None:
        k, v = _gathered(k_buffer, row[:n], k_scale), _gathered(v_buffer, row[:n], v_scale)
    else:
        k = torch.cat([_gathered(k_buffer, row[:prefix], k_scale), new_kv[0].float()])
        v = torch.cat([_gathered(v_buffer, row[:prefix], v_scale), new_kv[1].float()])
    causal = is_causal and tree is None and prefix == 0 and window <= 0  # the kernel's own causal mask, no tensor
    visible = None
    if tree is not None:
        visible = torch.cat([torch.ones(e, prefix, dtype=torch.bool, device=q.device), tree], 1)
    elif is_causal and not causal:
        visible = torch.ones(e, n, dtype=torch.bool, device=q.device).tril_(prefix)  # key j <= prefix + i
    if window > 0:
        q_pos = torch.arange(prefix, n, device=q.device)
        k_pos = torch.arange(n, device=q.device)
        in_window = (q_pos[:, None] - k_pos[None, :]).abs() < window
        visible = in_window if visible is None else visible & in_window
    return sdpa(q[None], k[None], v[None], None if visible is None else visible[None], sm_scale, causal)[0]
