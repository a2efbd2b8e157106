"""INT4 weights of MoE-SpeQ's self-draft (issue 3), in the one format the kernels use (service/kernels/int4.py):
symmetric codes -7..7, one scale per group of `group_size` input features, error at most scale/2 per element.

These views (plain int8 codes, a round trip in the weight's dtype) are what the checkpoint tools need; packing,
unpacking and the scale rule live only in the kernels module.
"""

from __future__ import annotations

import torch

from service.kernels.int4 import QMAX, dequantize_int4, quantize_int4, unpack_int4

__all__ = ["QMAX", "dequantize", "fake_quantize", "quantize"]


def quantize(weight: torch.Tensor, group_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """weight [..., rows, cols] -> (codes int8 [..., rows, cols], scales float32 [..., rows, cols // group_size])."""
    if weight.ndim < 2:
        raise ValueError(f"expected a matrix (or stack of matrices), got shape {tuple(weight.shape)}")
    packed, scales = quantize_int4(weight, group_size)
    return unpack_int4(packed), scales


def dequantize(codes: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Inverse of quantize: codes [..., R, C], scales [..., R, G] -> weight [..., R, C] in dtype."""
    groups, cols = scales.shape[-1], codes.shape[-1]
    if cols % groups:
        raise ValueError(f"codes width {cols} is not a multiple of the {groups} scale groups")
    grouped = codes.float().reshape(*codes.shape[:-1], groups, cols // groups)  # [..., R, G, g]
    return (grouped * scales.unsqueeze(-1)).reshape(codes.shape).to(dtype)


def fake_quantize(weight: torch.Tensor, group_size: int = 128) -> torch.Tensor:
    """The INT4 round trip of weight, in weight's dtype."""
    packed, scales = quantize_int4(weight, group_size)
    return dequantize_int4(packed, scales, group_size, weight.dtype)
