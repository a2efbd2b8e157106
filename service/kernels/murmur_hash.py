"""Seeded per-(request, position, vocab entry) hash used by SGLang's seeded sampling (plain and speculative).

MurmurHash3 (32-bit) over four 4-byte blocks: seed low word, seed high word, position, column; then length 16
and the final mix. The values must equal SGLang's Triton kernel bit for bit, so a seeded request samples the same
tokens on every device. uint32 arithmetic is done in int64 and masked, since torch has few uint32 ops.
"""

from __future__ import annotations

import torch

_MASK = 0xFFFFFFFF


def _rotl(x: torch.Tensor, r: int) -> torch.Tensor:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _mix(h: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    k = (k * 0xCC9E2D51) & _MASK
    k = _rotl(k, 15)
    k = (k * 0x1B873593) & _MASK
    h = _rotl(h ^ k, 13)
    return (h * 5 + 0xE6546B64) & _MASK


def _fmix(h: torch.Tensor) -> torch.Tensor:
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & _MASK
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & _MASK
    return h ^ (h >> 16)


def murmur_hash32_cpu(seed: torch.Tensor, positions: torch.Tensor, col_indices: torch.Tensor) -> torch.Tensor:
    # seed [n] int64, positions [n], col_indices [m] -> [n, m] uint32
    seed = seed.to(torch.int64)
    lo, hi = (seed & _MASK)[:, None], ((seed >> 32) & _MASK)[:, None]  # [n, 1]
    pos = (positions.to(torch.int64) & _MASK)[:, None]  # [n, 1]
    col = (col_indices.to(torch.int64) & _MASK)[None, :]  # [1, m]
    h = torch.zeros(seed.shape[0], 1, dtype=torch.int64)
    for block in (lo, hi, pos):
        h = _mix(h, block)
    h = _mix(h.expand(-1, col.shape[1]), col)  # [n, m]
    return _fmix(h ^ 16).to(torch.uint32)
