"""KV-slot bookkeeping between `req_to_token` (request -> slot table) and flat `out_cache_loc` vectors.

Every op works on segments `[start[i], end[i])` of request rows; segments are laid out back to back in the flat
vector in request order (the contract of the sgl_kernel CPU ops of the same names).
"""

import torch

from service.kernels._checks import INDEX_DTYPES, require, require_dtype


def segment_coordinates(start: torch.Tensor, end: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For back-to-back segments [start[i], end[i]): the segment id and the column of every flat element."""
    # start, end: [bs]
    lengths = (end.long() - start.long()).clamp_min(0)  # [bs]
    seg = torch.repeat_interleave(torch.arange(lengths.numel(), device=start.device), lengths)  # [total]
    first_flat = torch.cumsum(lengths, 0) - lengths  # [bs] flat offset of each segment
    col = start.long()[seg] + torch.arange(seg.numel(), device=start.device) - first_flat[seg]  # [total]
    return seg, col


SMALL_BATCH = 8  # up to this many segments a slice per segment beats the vectorised index arithmetic (~10 ops)


def small_segments(
    req_pool_indices: torch.Tensor, start: torch.Tensor, end: torch.Tensor
) -> list[tuple[int, int, int, int]] | None:
    """(row, start, end, flat offset) of every non-empty segment when there are few of them (a decode step of a
    small batch), else None: the caller takes the vectorised path."""
    if req_pool_indices.numel() > SMALL_BATCH:
        return None
    out, flat = [], 0
    for row, lo, hi in zip(req_pool_indices.tolist(), start.tolist(), end.tolist(), strict=True):
        if hi > lo:
            out.append((row, lo, hi, flat))
            flat += hi - lo
    return out


def _host_views(table: torch.Tensor, out_cache_loc: torch.Tensor):
    """NumPy views of the two CPU tensors (same memory): a slice copy there costs ~0.5 us where torch's indexing
    dispatch costs ~3-4 us, which at batch 8 was ~30 us of every decode step's slot bookkeeping."""
    return table.numpy(), out_cache_loc.numpy()


def _rows(req_to_token: torch.Tensor, pool_len: int, op: str) -> torch.Tensor:
    require_dtype(req_to_token, (torch.int32,), op, "req_to_token")
    require(req_to_token.is_contiguous(), op, "req_to_token must be contiguous")
    require(req_to_token.numel() % pool_len == 0, op, f"req_to_token size is not a multiple of pool_len={pool_len}")
    return req_to_token.view(-1, pool_len)  # [max_reqs, pool_len]


def _require_slots(out_cache_loc: torch.Tensor, needed: int, op: str) -> None:
    require(out_cache_loc.numel() >= needed, op, f"out_cache_loc has {out_cache_loc.numel()} < {needed} slots")


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,  # [bs]
    req_to_token: torch.Tensor,  # [max_reqs, pool_len] int32, written
    start_offset: torch.Tensor,  # [bs]
    end_offset: torch.Tensor,  # [bs]
    out_cache_loc: torch.Tensor,  # [sum(end - start)] int64
    pool_len: int,
) -> None:
    """req_to_token[rpi[i], start[i]:end[i]] = the i-th segment of out_cache_loc."""
    op = "assign_req_to_token_pool_cpu"
    table = _rows(req_to_token, pool_len, op)
    require_dtype(req_pool_indices, INDEX_DTYPES, op, "req_pool_indices")
    few = small_segments(req_pool_indices, start_offset, end_offset)
    if few is not None:
        _require_slots(out_cache_loc, sum(hi - lo for _, lo, hi, _ in few), op)
        rows, flat_loc = _host_views(table, out_cache_loc)
        for row, lo, hi, flat in few:
            rows[row, lo:hi] = flat_loc[flat : flat + hi - lo]  # int64 -> int32, as torch's copy_ casts
        return
    seg, col = segment_coordinates(start_offset, end_offset)
    _require_slots(out_cache_loc, seg.numel(), op)
    table[req_pool_indices.long()[seg], col] = out_cache_loc[: seg.numel()].to(torch.int32)


def assign_extend_cache_locs_cpu(
    req_pool_indices: torch.Tensor,  # [bs]
    req_to_token: torch.Tensor,  # [max_reqs, pool_len] int32
    start_offset: torch.Tensor,  # [bs]
    end_offset: torch.Tensor,  # [bs]
    out_cache_loc: torch.Tensor,  # [sum(end - start)] int64, written
    pool_len: int,
) -> None:
    """The inverse gather: segment i of out_cache_loc = req_to_token[rpi[i], start[i]:end[i]]."""
    op = "assign_extend_cache_locs_cpu"
    table = _rows(req_to_token, pool_len, op)
    require_dtype(out_cache_loc, (torch.int64,), op, "out_cache_loc")
    few = small_segments(req_pool_indices, start_offset, end_offset)
    if few is not None:
        _require_slots(out_cache_loc, sum(hi - lo for _, lo, hi, _ in few), op)
        rows, flat_loc = _host_views(table, out_cache_loc)
        for row, lo, hi, flat in few:
            flat_loc[flat : flat + hi - lo] = rows[row, lo:hi]
        return
    seg, col = segment_coordinates(start_offset, end_offset)
    _require_slots(out_cache_loc, seg.numel(), op)
    out_cache_loc[: seg.numel()] = table[req_pool_indices.long()[seg], col].long()


def assign_draft_cache_locs_contiguous_cpu(
    req_pool_indices: torch.Tensor,  # [bs]
    req_to_token: torch.Tensor,  # [max_reqs, pool_len] int32
    seq_lens: torch.Tensor,  # [bs]
    out_cache_loc: torch.Tensor,  # [bs * topk * num_steps] int64, written
    pool_len: int,
    topk: int,
    num_steps: int,
) -> None:
    """Row i of out_cache_loc.view(bs, -1) = req_to_token[rpi[i], seq_lens[i] : seq_lens[i] + topk * num_steps]."""
    op = "assign_draft_cache_locs_contiguous_cpu"
    width = topk * num_steps
    require(out_cache_loc.numel() == req_pool_indices.numel() * width, op, "out_cache_loc must hold bs*topk*num_steps")
    require_dtype(out_cache_loc, (torch.int64,), op, "out_cache_loc")
    table = _rows(req_to_token, pool_len, op)
    cols = seq_lens.long()[:, None] + torch.arange(width, device=seq_lens.device)  # [bs, width]
    out_cache_loc.view(-1, width)[:] = table[req_pool_indices.long()[:, None], cols].long()


def build_draft_decode_metadata_cpu(
    req_to_token: torch.Tensor,  # [max_reqs, pool_len] int32
    req_pool_indices: torch.Tensor,  # [bs]
    seq_lens: torch.Tensor,  # [bs]
    topk: int,
    num_steps: int,
    pool_len: int,
) -> torch.Tensor:
    """[bs * topk, pool_len] int32: row b*topk+k = request b's prefix, then candidate k's draft slots.

    The draft slots of candidate k sit at seq_len + k*num_steps (assign_draft_cache_locs_contiguous' layout); only the
    first seq_len + num_steps columns of each row are meaningful.
    """
    op = "build_draft_decode_metadata_cpu"
    table = _rows(req_to_token, pool_len, op)
    lens = seq_lens.long()  # [bs]
    require(bool((lens + topk * num_steps <= pool_len).all()), op, "draft slots run past pool_len")
    rows = table[req_pool_indices.long()]  # [bs, pool_len]
    out = rows.repeat_interleave(topk, dim=0).view(-1, topk, pool_len)  # [bs, topk, pool_len]
    step_cols = lens[:, None] + torch.arange(num_steps, device=lens.device)  # [bs, num_steps]
    k_shift = torch.arange(topk, device=lens.device)[None, :, None] * num_steps  # [1, topk, 1]
    src_cols = step_cols[:, None, :] + k_shift  # [bs, topk, num_steps]
    out.scatter_(
        2, step_cols[:, None, :].expand(-1, topk, -1), torch.gather(rows[:, None, :].expand(-1, topk, -1), 2, src_cols)
    )
    return out.view(-1, pool_len)


def fill_accept_out_cache_loc_cpu(
    accept_index: torch.Tensor,  # [bs, num_spec_steps] (any shape, read flat), -1 = rejected
    out_cache_loc: torch.Tensor,  # [bs * num_draft_tokens] int64
    accept_out_cache_loc: torch.Tensor,  # [num_accepted] int64, written
) -> None:
    """Compact the slots of the accepted tokens: out_cache_loc at every accept_index >= 0, in order."""
    op = "fill_accept_out_cache_loc_cpu"
    require_dtype(accept_out_cache_loc, (torch.int64,), op, "accept_out_cache_loc")
    flat = accept_index.reshape(-1).long()
    kept = flat[flat >= 0]
    require(accept_out_cache_loc.numel() >= kept.numel(), op, "accept_out_cache_loc is shorter than the accepted count")
    accept_out_cache_loc[: kept.numel()] = out_cache_loc[kept]
