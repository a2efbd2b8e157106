"""Copy KV rows between pool slots in every layer buffer at once, addressed by raw data pointers.

SGLang's KV pool hands the op the data_ptr() of each per-layer buffer (uint64) and its row size in bytes, the layout
its Triton kernel reads (kernels/ops/kvcache/cache_move.py); so the rows are reached through the pointer here too.
All source rows are read before any target row is written, so overlapping moves are safe.
"""

import ctypes

import torch

from service.kernels._checks import require


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor,  # [num_buffers] uint64/int64 data_ptr() of each layer's K or V buffer
    strides: torch.Tensor,  # [num_buffers] bytes per pool row
    tgt_loc: torch.Tensor,  # [N] target slots
    src_loc: torch.Tensor,  # [N] source slots
) -> None:
    op = "copy_all_layer_kv_cache_cpu"
    require(data_ptrs.numel() == strides.numel(), op, "one stride per data pointer")
    require(tgt_loc.numel() == src_loc.numel(), op, "tgt_loc and src_loc differ in length")
    if tgt_loc.numel() == 0:
        return
    tgt, src = tgt_loc.long(), src_loc.long()
    require(bool((tgt >= 0).all() and (src >= 0).all()), op, "slots must be non-negative")
    rows_needed = int(torch.maximum(tgt.max(), src.max())) + 1
    for ptr, row_bytes in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        raw = (ctypes.c_uint8 * (rows_needed * row_bytes)).from_address(ptr)
        rows = torch.frombuffer(raw, dtype=torch.uint8).view(rows_needed, row_bytes)
        rows[tgt] = rows[src]  # the gather materialises first: sources are read before targets are written
