"""INT4 dequant-GEMM in Triton: `x [M, K] @ dequant(packed [N, K/2], scales [N, K/G]).T` for the MoE-SpeQ draft's experts.

Reads the layout of service/kernels/int4.py (low nibble = even column, stored code + 8, symmetric group scales). Rather than
interleave nibbles in registers, x is loaded as its even and odd columns and each meets its own nibble plane:
`x @ W.T = x[:, 0::2] @ W_low.T + x[:, 1::2] @ W_high.T`. A K tile never straddles a scale group (BLOCK_K divides G), so
one scale per output row covers the tile. int4.int4_matmul_ref is the oracle.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from service.kernels.int4 import GROUP_SIZE, ZERO_POINT, check_int4_matmul_shapes


@triton.jit
def _int4_gemm(
    x_ptr, packed_ptr, scales_ptr, out_ptr,
    rows, cols, in_features,
    stride_xm, stride_xk, stride_pn, stride_pk, stride_sn, stride_sg, stride_om, stride_on,
    GROUP: tl.constexpr, ZERO: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    valid_m = offs_m < rows
    valid_n = offs_n < cols
    offs_j = tl.arange(0, BLOCK_K // 2)  # packed bytes in one K tile
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, in_features, BLOCK_K):
        even_cols = k0 + 2 * offs_j
        x_rows = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm
        x_even = tl.load(x_rows + even_cols[None, :] * stride_xk, mask=valid_m[:, None], other=0.0)  # [BM, BK/2]
        x_odd = tl.load(x_rows + (even_cols[None, :] + 1) * stride_xk, mask=valid_m[:, None], other=0.0)
        packed = tl.load(
            packed_ptr + offs_n[None, :].to(tl.int64) * stride_pn + (k0 // 2 + offs_j)[:, None] * stride_pk,
            mask=valid_n[None, :],
            other=0,
        )  # [BK/2, BN] uint8
        scale = tl.load(scales_ptr + offs_n * stride_sn + (k0 // GROUP) * stride_sg, mask=valid_n, other=0.0)  # [BN]
        low = ((packed & 0x0F).to(tl.int32) - ZERO).to(tl.float32) * scale[None, :]
        high = ((packed >> 4).to(tl.int32) - ZERO).to(tl.float32) * scale[None, :]
        acc += tl.dot(x_even, low.to(x_even.dtype))
        acc += tl.dot(x_odd, high.to(x_odd.dtype))
    tl.store(
        out_ptr + offs_m[:, None].to(tl.int64) * stride_om + offs_n[None, :] * stride_on,
        acc,
        mask=valid_m[:, None] & valid_n[None, :],
    )


def int4_gemm(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales: torch.Tensor,
    group_size: int = GROUP_SIZE,
    *,
    block_m: int = 16,  # decode/verify batches are a few rows
    block_n: int = 32,
    block_k: int = 64,  # unpacked columns per tile; capped at group_size
) -> torch.Tensor:
    """Triton twin of `int4.int4_matmul_ref`: x [M, K], packed [N, K/2] uint8, scales [N, K/G] → [M, N] in x's dtype."""
    check_int4_matmul_shapes(x, packed, scales, group_size)
    block_k = min(block_k, group_size)
    if group_size % block_k or block_k % 2:
        raise ValueError(f"block_k ({block_k}) must be even and divide group_size ({group_size})")
    rows, in_features = x.shape
    cols = packed.shape[0]
    out = torch.empty((rows, cols), dtype=torch.float32, device=x.device)  # [M, N]
    grid = (triton.cdiv(rows, block_m), triton.cdiv(cols, block_n))
    _int4_gemm[grid](
        x, packed, scales, out,
        rows, cols, in_features,
        x.stride(0), x.stride(1), packed.stride(0), packed.stride(1), scales.stride(0), scales.stride(1),
        out.stride(0), out.stride(1),
        GROUP=group_size, ZERO=ZERO_POINT,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
    )  # fmt: skip
    return out.to(x.dtype)
