"""INT4 weights for the MoE-SpeQ self-draft: symmetric, one scale per group of 128 input features (papers/README.md).

Layout (shared with triton/int4_gemm.py, which must read it identically):
- a weight `w [..., N, K]` (nn.Linear order: out features, in features) is split along K into groups of `group_size`;
- `scale = max|w_group| / 7` and `q = clamp(round(w / scale), -7, 7)`: symmetric, so -8 is never produced;
- `packed [..., N, K/2] uint8` holds `q + 8` per nibble: byte j has column 2j in its low nibble, column 2j+1 in its high one;
- `scales [..., N, K/group_size]` float32. An all-zero group gets scale 0 and dequantises to exact zeros.
Round-to-nearest bounds the error per element by scale/2.
"""

from __future__ import annotations

import torch

GROUP_SIZE = 128  # input features per scale (MoE-SpeQ: group 128)
QMAX = 7  # largest magnitude of a symmetric 4-bit code
ZERO_POINT = 8  # stored nibble = code + 8, so codes -7..7 become 1..15


def quantize_int4(w: torch.Tensor, group_size: int = GROUP_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """`w [..., N, K]` → `(packed [..., N, K/2] uint8, scales [..., N, K/group_size] float32)`."""
    _check_group(w.shape[-1], group_size)
    groups = w.float().reshape(*w.shape[:-1], -1, group_size)  # [..., N, G, group]
    scales = groups.abs().amax(dim=-1) / QMAX  # [..., N, G]
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))
    codes = torch.clamp(torch.round(groups / safe[..., None]), -QMAX, QMAX).to(torch.int16)
    nibbles = (codes + ZERO_POINT).to(torch.uint8).reshape(*w.shape[:-1], -1, 2)  # [..., N, K/2, 2]
    packed = nibbles[..., 0] | (nibbles[..., 1] << 4)  # [..., N, K/2]
    return packed, scales


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """`packed [..., N, K/2] uint8` → signed codes `[..., N, K]` int8 in [-8, 7], column order restored."""
    if packed.dtype != torch.uint8:
        raise ValueError(f"packed INT4 weights must be uint8, got {packed.dtype}")
    low = (packed & 0x0F).to(torch.int8) - ZERO_POINT
    high = (packed >> 4).to(torch.int8) - ZERO_POINT
    return torch.stack((low, high), dim=-1).reshape(*packed.shape[:-1], -1)


def dequantize_int4(
    packed: torch.Tensor, scales: torch.Tensor, group_size: int = GROUP_SIZE, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Inverse of `quantize_int4` up to rounding: `[..., N, K]` in `dtype`."""
    check_int4_shapes(packed, scales, group_size)
    codes = unpack_int4(packed).float()  # [..., N, K]
    grouped = codes.reshape(*codes.shape[:-1], -1, group_size) * scales.float()[..., None]  # [..., N, G, group]
    return grouped.reshape(codes.shape).to(dtype)


def int4_matmul_ref(
    x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, group_size: int = GROUP_SIZE
) -> torch.Tensor:
    """`x [M, K] @ dequant(packed, scales).T` → `[M, N]` in x's dtype, fp32 accumulation; the oracle for int4_gemm."""
    check_int4_matmul_shapes(x, packed, scales, group_size)
    weight = dequantize_int4(packed, scales, group_size)  # [N, K]
    return (x.float() @ weight.T).to(x.dtype)


def check_int4_shapes(packed: torch.Tensor, scales: torch.Tensor, group_size: int) -> None:
    """Raise ValueError unless `packed [..., N, K/2]` uint8 and `scales [..., N, K/group_size]` agree."""
    if packed.dtype != torch.uint8:
        raise ValueError(f"packed INT4 weights must be uint8, got {packed.dtype}")
    in_features = packed.shape[-1] * 2
    _check_group(in_features, group_size)
    expected = (*packed.shape[:-1], in_features // group_size)
    if tuple(scales.shape) != expected:
        raise ValueError(f"scales must be {expected} for packed {tuple(packed.shape)}, got {tuple(scales.shape)}")


def check_int4_matmul_shapes(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, group_size: int) -> None:
    """Raise ValueError unless `x [M, K]` can multiply the 2-D INT4 weight `packed [N, K/2]` with its `scales`."""
    check_int4_shapes(packed, scales, group_size)
    if x.dim() != 2 or packed.dim() != 2 or x.shape[1] != packed.shape[1] * 2:
        raise ValueError(
            f"x must be [M, K={packed.shape[-1] * 2}] and packed [N, K/2], got {tuple(x.shape)}, {tuple(packed.shape)}"
        )


def _check_group(in_features: int, group_size: int) -> None:
    if group_size <= 0 or group_size % 2:
        raise ValueError(f"group_size must be a positive even number, got {group_size}")
    if in_features % group_size:
        raise ValueError(f"in features ({in_features}) must be a multiple of group_size ({group_size})")
