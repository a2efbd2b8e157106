"""INT4 weight quantization, group-wise symmetric, for MoE-SpeQ's self-draft (issue 3).

For a weight W [rows, cols] and group size g (cols % g == 0), each row is cut into cols/g groups along the input
dimension; group j of row r gets scale s = max|W[r, jg:(j+1)g]| / 7 and codes q = round(W / s) in [-7, 7].
Dequantization is q * s, so every element's error is at most s / 2.
"""

from __future__ import annotations

import torch

QMAX = 7  # symmetric INT4: codes -7..7 (-8 unused so that +x and -x quantize alike)


def quantize(weight: torch.Tensor, group_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """weight [..., rows, cols] -> (codes int8 [..., rows, cols], scales float32 [..., rows, cols // group_size])."""
    if weight.ndim < 2:
        raise ValueError(f"expected a matrix (or stack of matrices), got shape {tuple(weight.shape)}")
    cols = weight.shape[-1]
    if group_size <= 0 or cols % group_size:
        raise ValueError(f"input dimension {cols} is not a multiple of group_size {group_size}")
    grouped = weight.float().reshape(*weight.shape[:-1], cols // group_size, group_size)  # [..., R, G, g]
    scales = grouped.abs().amax(dim=-1) / QMAX  # [..., R, G]
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))  # all-zero groups (inflated units) stay zero
    codes = torch.clamp(torch.round(grouped / safe.unsqueeze(-1)), -QMAX, QMAX).to(torch.int8)
    return codes.reshape(weight.shape), scales


def dequantize(codes: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Inverse of quantize: codes [..., R, C], scales [..., R, G] -> weight [..., R, C] in dtype."""
    groups = scales.shape[-1]
    cols = codes.shape[-1]
    if cols % groups:
        raise ValueError(f"codes width {cols} is not a multiple of the {groups} scale groups")
    grouped = codes.float().reshape(*codes.shape[:-1], groups, cols // groups)
    return (grouped * scales.unsqueeze(-1)).reshape(codes.shape).to(dtype)


def fake_quantize(weight: torch.Tensor, group_size: int = 128) -> torch.Tensor:
    """The INT4 round trip of weight, in weight's dtype."""
    codes, scales = quantize(weight, group_size)
    return dequantize(codes, scales, weight.dtype)
