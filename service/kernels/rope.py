"""Rotary position embedding, NeoX style (each head's two halves rotated as one complex number), for the CPU engine.

    x' = x * [cos, cos] + [x2, x1] * [-sin, sin]        x = [x1, x2] along the head, [x2, x1] = torch.roll by half

is term for term the reference's x1 cos - x2 sin | x2 cos + x1 sin (adding -b is subtracting b, exactly, in IEEE
arithmetic), so results are bit-identical to it, in 4 ops per tensor instead of a dozen (chunks, four products, two
sums, two concatenations). The two tables depend only on the positions: a step makes them once for every layer.
"""

import torch


def neox_tables(
    cos_sin_cache: torch.Tensor,  # [max_positions, R] the cosines of R / 2 frequencies, then their sines
    positions: torch.Tensor,  # [T] int64
) -> tuple[torch.Tensor, torch.Tensor]:
    """([T, 1, R] [cos, cos], [T, 1, R] [-sin, sin]) at each position."""
    cos, sin = cos_sin_cache.index_select(0, positions).chunk(2, dim=-1)
    return torch.cat([cos, cos], -1).unsqueeze(1), torch.cat([-sin, sin], -1).unsqueeze(1)


def rotate_neox(
    x: torch.Tensor,  # [T, H * D] or [T, H, D], D = head_size = R (the whole head rotates); may be a strided view
    head_size: int,
    cos_table: torch.Tensor,  # [T, 1, D] from neox_tables
    sin_table: torch.Tensor,  # [T, 1, D]
) -> torch.Tensor:
    """x rotated, a new contiguous tensor of x's shape."""
    heads = x.view(x.shape[0], -1, head_size)
    return (heads * cos_table + torch.roll(heads, head_size // 2, -1) * sin_table).view(x.shape)
