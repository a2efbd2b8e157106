"""Paged attention over SGLang's KV pool in plain torch: the extend (prefill / verify / draft-extend) and decode ops.

Keys of a request live in the pool rows req_to_token[req_pool_indices[b], :seq_len]; a query at position t sees key j
when the mask allows it: the prefix is always visible, the extend part is causal (or follows the QLEN-only tree mask
of speculative verify: row i = draft token i, columns = the draft tokens it may see), and a sliding window w > 0 keeps
only |t - j| < w. Scores are q.k * sm_scale, soft-capped to logit_cap * tanh(s / logit_cap) when logit_cap > 0;
per-head sink logits join the softmax denominator with a zero value vector (as in SGLang's Triton kernels).
GQA shares each KV head among num_heads / num_kv_heads query heads without copying it.

Two implementations of each op: `*_loop` attends request by request (the reference, and the path for cross attention
and encoder offsets); `extend_attention_cpu` / `decode_attention_cpu` (registered with the setting
`cpu_attention=batched`; the default registers attention_fused.py's, which fall back to these) pad the batch's requests to
its longest and attend all of them in one batched product per layer (a per-request Python loop was the largest fixed
cost of a CPU step, growing with the batch). A single request takes the loop (nothing to batch; padding and the
gathered mask only add work: measured ~1.2-1.6x slower batched at batch 1). Extend falls back to the loop for long extends (prefill,
BATCHED_EXTEND_MAX), both when the padded scores would not fit the score budget, and for cross attention / encoder
offsets.
"""

import torch

from service.kernels._checks import require

# Upper bound on the fp32 score elements materialised at once (~64 MiB); long prefills are cut into query blocks.
_SCORE_BUDGET = 1 << 24
# Longest extend the batched extend op pads to: verify, draft-extend and short prefills. A long prefill has enough work
# per request that the loop's Python cost is small, while padding and the gathered mask cost more (measured: a
# 96-token prefill took ~1.3-1.9x longer batched than looped; a 4-token verify of 8 requests ~0.3-0.7x).
BATCHED_EXTEND_MAX = 16


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


def extend_attention_loop(
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
    """Per-request loop: the reference of the batched op, and its path for cross attention and encoder offsets."""
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


def _store_new_kv(
    op: str,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    key: torch.Tensor,  # [bs, H_kv, D]
    value: torch.Tensor | None,
    loc: torch.Tensor | None,  # [bs]
    k_scale: float,
    v_scale: float,
) -> None:
    """Store the step's new K/V at their cache slots first, as the compiled decode kernel does."""
    require(value is not None and loc is not None, op, "key needs value and loc")
    slots = loc.long()
    k_buffer[slots] = (key.float() / k_scale if k_scale != 1.0 else key).to(k_buffer.dtype)
    v_buffer[slots] = (value.float() / v_scale if v_scale != 1.0 else value).to(v_buffer.dtype)


def decode_attention_loop(
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
        _store_new_kv(op, k_buffer, v_buffer, key, value, loc, k_scale, v_scale)
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


# --- batched over the requests of a step -----------------------------------------------------------------------------


def attend_batched(
    q: torch.Tensor,  # [B, M, H, D]
    k: torch.Tensor,  # [B, N, Hkv, D] fp32
    v: torch.Tensor,  # [B, N, Hkv, Dv] fp32
    visible: torch.Tensor,  # [B, M, N] bool
    sm_scale: float,
    logit_cap: float,
    sinks: torch.Tensor | None,  # [H]
) -> torch.Tensor:
    """`attend` for B padded requests at once (rows that see nothing get zeros).  -> [B, M, H, Dv] fp32"""
    bs, m, heads, dim = q.shape
    n, kv_heads, dim_v = k.shape[1], k.shape[2], v.shape[3]
    groups = heads // kv_heads
    # one 3-D product per (request, KV head): the G query heads of a KV head and the M queries fold into its rows
    qf = q.float().reshape(bs, m, kv_heads, groups, dim).permute(0, 2, 3, 1, 4).reshape(bs * kv_heads, groups * m, dim)
    # head-major copies: bmm over odd strides falls off the BLAS path (several times slower than the copy)
    kf = k.permute(0, 2, 1, 3).contiguous().view(bs * kv_heads, n, dim)
    vf = v.permute(0, 2, 1, 3).contiguous().view(bs * kv_heads, n, dim_v)
    scores = torch.bmm(qf, kf.transpose(1, 2)).view(bs, kv_heads, groups, m, n)
    scores.mul_(sm_scale)
    if logit_cap > 0:
        scores = logit_cap * torch.tanh(scores / logit_cap)
    scores.masked_fill_(~visible[:, None, None], float("-inf"))
    if sinks is not None:
        sink = sinks.float().reshape(1, kv_heads, groups, 1, 1).expand(bs, -1, -1, m, 1)
        scores = torch.cat([scores, sink], -1)
    probs = torch.softmax(scores, -1).nan_to_num_(0.0)[..., :n]  # fully masked rows give NaN -> 0
    out = torch.bmm(probs.reshape(bs * kv_heads, groups * m, n), vf)  # [B*Hkv, G*M, Dv]
    return out.view(bs, kv_heads, groups, m, dim_v).permute(0, 3, 1, 2, 4).reshape(bs, m, heads, dim_v)


def _padded_slots(
    req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, lengths: torch.Tensor, width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pool slots of each request's first `lengths[b]` tokens, padded to `width` with slot 0.  -> [B, W] long, valid"""
    cols = torch.arange(width, device=req_to_token.device)
    valid = cols[None, :] < lengths[:, None]
    rows = req_to_token[req_pool_indices.long()][:, :width].long()  # [B, W]
    return torch.where(valid, rows, torch.zeros_like(rows)), valid


def _gathered(buffer: torch.Tensor, slots: torch.Tensor, scale: float) -> torch.Tensor:
    """buffer rows at slots [B, W] -> [B, W, Hkv, D] fp32 (index_select: several times faster than indexing here)."""
    rows = torch.index_select(buffer, 0, slots.reshape(-1)).view(*slots.shape, *buffer.shape[1:]).float()
    return rows * scale if scale != 1.0 else rows


def extend_attention_cpu(
    q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, k_scale, v_scale, req_to_token, req_pool_indices,
    seq_lens, extend_seq_lens, extend_start_loc, max_len_extend, sm_scale, logit_cap, is_cross_attn,
    sliding_window_size, encoder_lens, sinks, tree_mask, is_causal,
) -> None:  # fmt: skip
    """Extend attention (arguments as extend_attention_loop) over the whole batch in one padded product."""
    op = "extend_attention_cpu"
    bs = seq_lens.shape[0]
    if is_cross_attn or encoder_lens is not None or bs <= 1:
        return extend_attention_loop(
            q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, k_scale, v_scale, req_to_token,
            req_pool_indices, seq_lens, extend_seq_lens, extend_start_loc, max_len_extend, sm_scale, logit_cap,
            is_cross_attn, sliding_window_size, encoder_lens, sinks, tree_mask, is_causal,
        )  # fmt: skip
    require(q_extend.dim() == 3 and o_extend.dim() == 3, op, "q_extend and o_extend must be [tokens, heads, dim]")
    _check_heads(op, q_extend.shape[1], k_buffer.shape[1])
    require((k_extend is None) == (v_extend is None), op, "k_extend and v_extend come together")
    lens, ext = seq_lens.long(), extend_seq_lens.long()
    prefix = lens - ext
    # the one host read of the op: the padded shape
    m_max, n_max, min_prefix, ext_sq = (int(x) for x in torch.stack(
        [ext.max(), lens.max(), prefix.min(), (ext * ext).sum()]
    ).tolist())  # fmt: skip
    require(min_prefix >= 0, op, "an extend length exceeds its seq_len")
    tree = tree_mask.reshape(-1).bool() if tree_mask is not None else None
    if tree is not None:
        require(tree.numel() == ext_sq, op, f"tree_mask has {tree.numel()} entries, expected sum(extend^2)={ext_sq}")
    if m_max > BATCHED_EXTEND_MAX or bs * q_extend.shape[1] * m_max * n_max > _SCORE_BUDGET:
        return extend_attention_loop(
            q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, k_scale, v_scale, req_to_token,
            req_pool_indices, seq_lens, extend_seq_lens, extend_start_loc, max_len_extend, sm_scale, logit_cap,
            is_cross_attn, sliding_window_size, encoder_lens, sinks, tree_mask, is_causal,
        )  # fmt: skip
    q, k, v, visible, q_rows, row_valid = padded_extend(
        q_extend, k_extend, v_extend, k_buffer, v_buffer, k_scale, v_scale, req_to_token, req_pool_indices, lens, ext,
        extend_start_loc, m_max, n_max, sliding_window_size, tree, is_causal,
    )  # fmt: skip
    out = attend_batched(q, k, v, visible, sm_scale, float(logit_cap or 0.0), sinks)
    o_extend[q_rows[row_valid]] = out[row_valid].to(o_extend.dtype)


def padded_extend(
    q_extend, k_extend, v_extend, k_buffer, v_buffer, k_scale, v_scale, req_to_token, req_pool_indices, lens, ext,
    extend_start_loc, m_max, n_max, sliding_window_size, tree, is_causal,
):  # fmt: skip
    """The step's extend padded to its longest request: queries [B, M, H, D], keys / values [B, N, Hkv, D] fp32 (the
    new tokens' own K/V where given), the mask `visible` [B, M, N], and where each query row lives in q_extend
    (`q_rows` [B, M], valid where `row_valid` [B, M]). `lens` / `ext`: [B] long seq and extend lengths."""
    bs, device = lens.shape[0], q_extend.device
    prefix = lens - ext
    rows_i = torch.arange(m_max, device=device)
    row_valid = rows_i[None, :] < ext[:, None]  # [B, M]
    q_rows = torch.where(row_valid, extend_start_loc.long()[:, None] + rows_i[None, :], 0)  # [B, M]
    slots, key_valid = _padded_slots(req_to_token, req_pool_indices, lens, n_max)
    k = _gathered(k_buffer, slots, k_scale)
    v = _gathered(v_buffer, slots, v_scale)
    if k_extend is not None:  # the new tokens' own K/V as given (the pool may hold them rounded or scaled)
        b_idx = torch.arange(bs, device=device)[:, None].expand(-1, m_max)[row_valid]
        cols = (prefix[:, None] + rows_i[None, :])[row_valid]
        src = q_rows[row_valid]
        k[b_idx, cols] = k_extend[src].float()
        v[b_idx, cols] = v_extend[src].float()
    cols_j = torch.arange(n_max, device=device)
    rel = cols_j[None, None, :] - prefix[:, None, None]  # [B, 1, N]: key position inside the extend block
    in_prefix = rel < 0
    in_block = (rel >= 0) & (rel < ext[:, None, None])
    if tree is not None:
        offsets = torch.cumsum(ext * ext, 0) - ext * ext  # [B]
        i = rows_i[None, :, None]
        jj = rel.clamp(min=0)
        flat = offsets[:, None, None] + i * ext[:, None, None] + jj  # [B, M, N]
        inside = in_block & row_valid[:, :, None]
        inner = torch.zeros(inside.shape, dtype=torch.bool, device=device)
        inner[inside] = tree[flat[inside]]
    elif is_causal:
        inner = in_block & (rel <= rows_i[None, :, None])
    else:
        inner = in_block.expand(-1, m_max, -1)
    visible = (in_prefix | inner) & key_valid[:, None, :] & row_valid[:, :, None]
    if sliding_window_size > 0:
        q_pos = prefix[:, None, None] + rows_i[None, :, None]
        visible &= (q_pos - cols_j[None, None, :]).abs() < sliding_window_size
    return q_extend[q_rows], k, v, visible, q_rows, row_valid


def decode_attention_cpu(
    query, k_buffer, v_buffer, k_scale, v_scale, output, key, value, loc, attn_logits, req_to_token,
    req_pool_indices, seq_lens, sm_scale, logit_cap, is_cross_attn, sliding_window_size, encoder_lens, sinks,
) -> None:  # fmt: skip
    """Decode attention (arguments as decode_attention_loop) over the whole batch in one padded product."""
    bs = query.shape[0]
    if is_cross_attn or encoder_lens is not None or bs <= 1:
        return decode_attention_loop(
            query, k_buffer, v_buffer, k_scale, v_scale, output, key, value, loc, attn_logits, req_to_token,
            req_pool_indices, seq_lens, sm_scale, logit_cap, is_cross_attn, sliding_window_size, encoder_lens, sinks,
        )  # fmt: skip
    k, v, visible = padded_decode(
        query, k_buffer, v_buffer, k_scale, v_scale, key, value, loc, req_to_token, req_pool_indices, seq_lens,
        sliding_window_size,
    )  # fmt: skip
    out = attend_batched(query[:, None], k, v, visible, sm_scale, float(logit_cap or 0.0), sinks)
    output.copy_(out[:, 0].to(output.dtype))


def padded_decode(
    query, k_buffer, v_buffer, k_scale, v_scale, key, value, loc, req_to_token, req_pool_indices, seq_lens,
    sliding_window_size,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:  # fmt: skip
    """A decode step's keys: stores the new tokens' K/V at `loc` (when given), then each request's keys and values
    padded to the longest, k / v [B, N, Hkv, D] fp32, and the mask `visible` [B, 1, N]; a single request is not
    padded and sees every key of its own (visible None, unless a sliding window cuts them)."""
    op = "decode_attention_cpu"
    _check_heads(op, query.shape[1], k_buffer.shape[1])
    if key is not None:
        _store_new_kv(op, k_buffer, v_buffer, key, value, loc, k_scale, v_scale)
    if query.shape[0] == 1:
        n = int(seq_lens[0])
        slots = req_to_token[int(req_pool_indices[0]), :n][None]  # [1, N]
        visible = None
    else:
        lens = seq_lens.long()
        n = int(lens.max())  # the one host read: the padded width
        slots, valid = _padded_slots(req_to_token, req_pool_indices, lens, n)
        visible = valid[:, None, :]  # [B, 1, N]
    if sliding_window_size > 0:
        cols = torch.arange(n, device=query.device)
        in_window = (seq_lens.long()[:, None, None] - 1 - cols[None, None, :]) < sliding_window_size
        visible = in_window if visible is None else visible & in_window
    return _gathered(k_buffer, slots, k_scale), _gathered(v_buffer, slots, v_scale), visible
