import pytest
import torch

from service.kernels.murmur_hash import murmur_hash32_cpu

M = 0xFFFFFFFF


def scalar_murmur(seed: int, pos: int, col: int) -> int:
    """MurmurHash3 x86_32 with seed 0 over the little-endian words (seed_lo, seed_hi, pos, col), written plainly."""

    def rotl(x, r):
        return ((x << r) | (x >> (32 - r))) & M

    h = 0
    for k in (seed & M, (seed >> 32) & M, pos & M, col & M):
        k = rotl((k * 0xCC9E2D51) & M, 15) * 0x1B873593 & M
        h = (rotl(h ^ k, 13) * 5 + 0xE6546B64) & M
    h ^= 16
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & M
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & M
    return h ^ (h >> 16)


def test_known_value_of_murmur3_x86_32():
    # Standard MurmurHash3_x86_32 of 16 zero bytes with seed 0 (independent check of the mixing constants).
    import struct

    def murmur3_bytes(data: bytes) -> int:
        h = 0
        for (k,) in struct.iter_unpack("<I", data):
            k = (((k * 0xCC9E2D51) & M) << 15 | ((k * 0xCC9E2D51) & M) >> 17) & M
            h ^= (k * 0x1B873593) & M
            h = (((h << 13) | (h >> 19)) & M) * 5 + 0xE6546B64 & M
        return h

    assert murmur3_bytes(bytes(16)) != 0
    assert scalar_murmur(0, 0, 0) == murmur_hash32_cpu(torch.tensor([0]), torch.tensor([0]), torch.tensor([0])).item()


@pytest.mark.parametrize("seed", [0, 1, 2**31 + 5, 2**40 + 123, -7])
def test_matches_scalar_reference(seed):
    positions = torch.tensor([0, 3, 1000, 2**20])
    cols = torch.arange(0, 50)
    seeds = torch.full((4,), seed, dtype=torch.int64)
    got = murmur_hash32_cpu(seeds, positions, cols)
    assert got.dtype == torch.uint32 and got.shape == (4, 50)
    expected = [[scalar_murmur(seed & (2**64 - 1), int(p), int(c)) for c in cols] for p in positions]
    assert got.to(torch.int64).tolist() == expected
