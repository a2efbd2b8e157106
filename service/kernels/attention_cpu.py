"""Paged attention over SGLang's KV pool in plain torch: the extend (prefill / verify / draft-extend) and decode ops.

Keys of a request live in the pool rows req_to_token[req_pool_indices[b], :seq_len]; a query at position t sees key j
when the mask allows it: the prefix is always visible, the extend part is causal (or follows the QLEN-only tree mask
of speculative verify: row i = draft token i, columns = the draft tokens it may see), and a sliding window w > 0 keeps
only |t - j| < w. Scores are q.k * sm_scale, soft-capped to logit_cap * tanh(s / logit_cap) when logit_cap > 0;
per-head sink logits join the softmax denominator with a zero value vector (as in SGLang's Triton kernels).
GQA shares each KV head among num_heads / num_kv_heads query heads without copying it.
"""

import torch

from service.kernels._checks import require

# Upper bound on the fp32 score elements materialised at once (~64 MiB); long prefills are cut into query blocks.
_SCORE_BUDGET = 1 << 24


def attend(
    q: torch.Tensor,  # [M, H, D]
    k: torch.Tensor,  # [N, Hkv, D]
    v: torch.Tensor,  # [N, Hkv, Dv]
    visible: torch.Tensor,  # [M, N] bool
    sm_scale: float,
    logit_cap: float,
    sinks: torch.Tensor | None,  # [H]
) -> torch.Tensor:
    """softmax(mask(cap(q k^T * sm_scale))) v per head, in fp32; rows that see nothing get zeros.  -> [M, H, Dv]"""
    m_total, heads, dim = q.shape
    n, kv_heads, dim_v = v.shape
    groups = heads // kv_heads
    out = torch.zeros(m_total, heads, dim_v, dtype=torch.float32, device=q.device)
    if n == 0 or m_total == 0:
        return out
    qf = q.float().reshape(m_total, kv_heads, groups, dim).permute(1, 2, 0, 3)  # [Hkv, G, M, D]
    kf = k.float().permute(1, 2, 0)[:, None]  # [Hkv, 1, D, N]
    vf = v.float().permute(1, 0, 2)[:, None]  # [Hkv, 1, N, Dv]
    sink = sinks.float().reshape(kv_heads, groups, 1, 1) if sinks is not None else None
    block = max(1, _SCORE_BUDGET // (heads * n))
    for m0 in range(0, m_total, block):
        m1 = min(m_total, m0 + block)
        scores = torch.matmul(qf[:, :, m0:m1], kf) * sm_scale  # [Hkv, G, m, N]
        if logit_cap > 0:
            scores = logit_cap * torch.tanh(scores / logit_cap)
        scores = scores.masked_fill(~visible[m0:m1], float("-inf"))
        if sink is not None:
            scores = torch.cat([scores, sink.expand(-1, -1, m1 - m0, 1)], -1)
        probs = torch.softmax(scores, -1).nan_to_num(0.0)[..., :n]  # fully masked rows give NaN -> 0
        out[m0:m1] = torch.matmul(probs, vf).permute(2, 0, 1, 3).reshape(m1 - m0, heads, dim_v)
    return out


def _cache_rows(buffer: torch.Tensor, slots: torch.Tensor, scale: float) -> torch.Tensor:
    rows = buffer[slots].float()  # [N, Hkv, D]
    return rows * scale if scale != 1.0 else rows


def _window(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int) -> torch.Tensor:
    # q_pos: [M], k_pos: [N] -> [M, N]
    return (q_pos[:, None] - k_pos[None, :]).abs() < window


def _check_heads(op: str, num_heads: int, num_kv_heads: int) -> None:
    require(num_kv_heads > 0 and num_heads % num_kv_heads == 0, op, f"{num_heads} heads over {num_kv_heads} KV heads")


def extend_attention_cpu(
    q_extend: torch.Tensor,  # [T, H, D]
    k_extend: torch.Tensor | None,  # [T, Hkv, D], new keys (also already in the cache); None = read the cache
    v_extend: torch.Tensor | None,  # [T, Hkv, Dv]
    o_extend: torch.Tensor,  # [T, H, Dv], written
    k_buffer: torch.Tensor,  # [pool_size, Hkv, D]
    v_buffer: torch.Tensor,  # [pool_size, Hkv, Dv]
    k_scale: float,
    v_scale: float,
    req_to_token: torch.Tensor,  # [max_reqs, max_context]
    req_pool_indices: torch.Tensor,  # [bs]
    seq_lens: torch.Tensor,  # [bs] prefix + extend
    extend_seq_lens: torch.Tensor,  # [bs]
    extend_start_loc: torch.Tensor,  # [bs] first row of each request in q/k/v_extend
    max_len_extend: int | None,
    sm_scale: float,
    logit_cap: float | None,
    is_cross_attn: bool,
    sliding_window_size: int,  # SGLang passes layer.sliding_window_size + 1; <= 0 = no window
    encoder_lens: torch.Tensor | None,  # [bs]
    sinks: torch.Tensor | None,  # [H]
    tree_mask: torch.Tensor | None,  # [sum(extend_len^2)] bool, QLEN-only rows per request
    is_causal: bool,
) -> None:
    del max_len_extend  # a blocking hint for the compiled kernel
    op = "extend_attention_cpu"
    require(q_extend.dim() == 3 and o_extend.dim() == 3, op, "q_extend and o_extend must be [tokens, heads, dim]")
    _check_heads(op, q_extend.shape[1], k_buffer.shape[1])
    require((k_extend is None) == (v_extend is None), op, "k_extend and v_extend come together")
    cap = float(logit_cap or 0.0)
    lens, ext_lens, starts = seq_lens.tolist(), extend_seq_lens.tolist(), extend_start_loc.tolist()
    pools = req_pool_indices.tolist()
    enc = encoder_lens.tolist() if encoder_lens is not None else None
    tree = tree_mask.reshape(-1).bool() if tree_mask is not None else None
    if tree is not None:
        expected = sum(e * e for e in ext_lens)
        require(
            tree.numel() == expected, op, f"tree_mask has {tree.numel()} entries, expected sum(extend^2)={expected}"
        )
    tree_offset = 0
    for b, (seq_len, ext, start) in enumerate(zip(lens, ext_lens, starts, strict=True)):
        prefix = seq_len - ext
        require(prefix >= 0, op, f"request {b}: extend length {ext} exceeds seq_len {seq_len}")
        row = req_to_token[pools[b]].long()
        q = q_extend[start : start + ext]
        if is_cross_attn:
            slots = row[: enc[b] if enc is not None else seq_len]
            k, v = _cache_rows(k_buffer, slots, k_scale), _cache_rows(v_buffer, slots, v_scale)
            visible = torch.ones(ext, slots.numel(), dtype=torch.bool, device=q.device)
        else:
            off = enc[b] if enc is not None else 0
            prefix_slots = row[off : off + prefix]
            if k_extend is not None:
                k_new, v_new = k_extend[start : start + ext].float(), v_extend[start : start + ext].float()
            else:
                new_slots = row[off + prefix : off + seq_len]
                k_new, v_new = _cache_rows(k_buffer, new_slots, k_scale), _cache_rows(v_buffer, new_slots, v_scale)
            k = torch.cat([_cache_rows(k_buffer, prefix_slots, k_scale), k_new])
            v = torch.cat([_cache_rows(v_buffer, prefix_slots, v_scale), v_new])
            if tree is not None:
                inner = tree[tree_offset : tree_offset + ext * ext].view(ext, ext)
            elif is_causal:
                inner = torch.ones(ext, ext, dtype=torch.bool, device=q.device).tril()
            else:
                inner = torch.ones(ext, ext, dtype=torch.bool, device=q.device)
            visible = torch.cat([torch.ones(ext, prefix, dtype=torch.bool, device=q.device), inner], 1)
            if sliding_window_size > 0:
                positions = torch.arange(seq_len, device=q.device)
                visible &= _window(positions[prefix:], positions, sliding_window_size)
        tree_offset += ext * ext
        o_extend[start : start + ext] = attend(q, k, v, visible, sm_scale, cap, sinks).to(o_extend.dtype)


def decode_attention_cpu(
    query: torch.Tensor,  # [bs, H, D]
    k_buffer: torch.Tensor,  # [pool_size, Hkv, D], written at loc when key is given
    v_buffer: torch.Tensor,  # [pool_size, Hkv, Dv], written at loc when value is given
    k_scale: float,
    v_scale: float,
    output: torch.Tensor,  # [bs, H, Dv], written
    key: torch.Tensor | None,  # [bs, Hkv, D] the new token's key
    value: torch.Tensor | None,  # [bs, Hkv, Dv]
    loc: torch.Tensor | None,  # [bs] pool slot of the new token
    attn_logits: torch.Tensor,  # [bs, H, splits, Dv + 1] scratch of the compiled kernel, unused
    req_to_token: torch.Tensor,  # [max_reqs, max_context]
    req_pool_indices: torch.Tensor,  # [bs]
    seq_lens: torch.Tensor,  # [bs], the new token included
    sm_scale: float,
    logit_cap: float | None,
    is_cross_attn: bool,
    sliding_window_size: int,
    encoder_lens: torch.Tensor | None,  # [bs]
    sinks: torch.Tensor | None,  # [H]
) -> None:
    """One query per request; like the compiled kernel, first stores the new token's K/V at loc when given."""
    del attn_logits
    op = "decode_attention_cpu"
    _check_heads(op, query.shape[1], k_buffer.shape[1])
    if key is not None:
        require(value is not None and loc is not None, op, "key needs value and loc")
        slots = loc.long()
        k_buffer[slots] = (key.float() / k_scale if k_scale != 1.0 else key).to(k_buffer.dtype)
        v_buffer[slots] = (value.float() / v_scale if v_scale != 1.0 else value).to(v_buffer.dtype)
    cap = float(logit_cap or 0.0)
    lens, pools = seq_lens.tolist(), req_pool_indices.tolist()
    enc = encoder_lens.tolist() if encoder_lens is not None else None
    for b, seq_len in enumerate(lens):
        row = req_to_token[pools[b]].long()
        if is_cross_attn:
            slots = row[: enc[b] if enc is not None else seq_len]
        else:
            off = enc[b] if enc is not None else 0
            slots = row[off : off + seq_len]
        n = slots.numel()
        visible = torch.ones(1, n, dtype=torch.bool, device=query.device)
        if sliding_window_size > 0 and not is_cross_attn:
            positions = torch.arange(n, device=query.device)
            visible &= _window(positions[n - 1 :], positions, sliding_window_size)
        k, v = _cache_rows(k_buffer, slots, k_scale), _cache_rows(v_buffer, slots, v_scale)
        output[b] = attend(query[b : b + 1], k, v, visible, sm_scale, cap, sinks)[0].to(output.dtype)
