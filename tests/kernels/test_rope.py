"""NeoX rope with per-step tables vs the textbook rotation (x1 cos - x2 sin | x2 cos + x1 sin): bit-identical."""

import pytest
import torch

from service.kernels.rope import neox_tables, rotate_neox


def _reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, D]; cos / sin [T, D / 2]."""
    x1, x2 = x.chunk(2, dim=-1)
    cos, sin = cos[:, None], sin[:, None]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotation_is_bit_identical_to_the_textbook_one_on_strided_views(dtype):
    g = torch.Generator().manual_seed(0)
    tokens, heads, kv_heads, dim = 5, 4, 2, 16
    cache = torch.randn(64, dim, generator=g).to(dtype)
    positions = torch.tensor([3, 0, 63, 17, 17])
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, generator=g).to(dtype)
    q, k, _ = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)  # views, as a model's qkv split
    cos_table, sin_table = neox_tables(cache, positions)
    cos, sin = cache[positions].chunk(2, dim=-1)
    for x, h in ((q, heads), (k, kv_heads)):
        out = rotate_neox(x, dim, cos_table, sin_table)
        assert out.shape == x.shape and out.is_contiguous()
        assert torch.equal(out.view(tokens, h, dim), _reference(x.reshape(tokens, h, dim), cos, sin))
