"""Draft-model input rewrite for multi-layer EAGLE: shift each extend segment left by one, append the new token."""

import torch

from service.kernels._checks import require_dtype
from service.kernels.cache_locs import segment_coordinates


def rotate_input_ids_cpu(
    input_ids: torch.Tensor,  # [num_extend_tokens] int64, rewritten in place
    extend_start_loc: torch.Tensor,  # [bs]
    extend_seq_lens: torch.Tensor,  # [bs]
    topk_index: torch.Tensor,  # [bs] int64, new token per request
    select_index: torch.Tensor | None,  # [bs] int64 flat slot for the new token, or None = segment end
) -> None:
    op = "rotate_input_ids_cpu"
    require_dtype(input_ids, (torch.int64,), op, "input_ids")
    start = extend_start_loc.long()
    lens = extend_seq_lens.long()
    seg, col = segment_coordinates(start, start + (lens - 1).clamp_min(0))  # every slot but the last one
    input_ids[col] = input_ids[col + 1].clone()
    has_tokens = lens > 0
    slot = select_index.long() if select_index is not None else start + lens - 1
    input_ids[slot[has_tokens]] = topk_index.long()[has_tokens]
