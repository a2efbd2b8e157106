"""moe_sglang/cpu_rope.py against SGLang's own RotaryEmbedding.forward_native on the same rope and inputs."""

import pytest
import torch

from moe_sglang import cpu_rope


def _rope(is_neox_style=True, rotary_dim=16, head_size=16):
    return cpu_rope.sglang_rope(head_size, rotary_dim, 128, 10000, is_neox_style)


def _inputs(seed=0, tokens=6, heads=4, kv_heads=2, head_size=16):
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_size, generator=g)
    q, k, _ = qkv.split([heads * head_size, kv_heads * head_size, kv_heads * head_size], dim=-1)
    return torch.randint(0, 128, (tokens,), generator=g), q, k


@pytest.fixture
def native():
    from sglang.srt.layers.rotary_embedding.base import RotaryEmbedding

    return RotaryEmbedding.forward_native  # SGLang's (no hook is installed in the test process)


def test_neox_rope_equals_sglangs_bit_for_bit_and_reuses_the_steps_tables(native):
    rope = _rope()
    positions, q, k = _inputs()
    expected = native(rope, positions, q, k)
    cpu_rope._STEP.clear()
    for _ in range(2):  # a second layer of the same step: the same tables, not new ones
        got = cpu_rope.rope_forward(native, rope, positions, q, k)
        assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    tables = cpu_rope._STEP[3]
    cpu_rope.rope_forward(native, rope, positions, q, k)
    assert cpu_rope._STEP[3] is tables
    positions.add_(1)  # the step's positions changed in place: new tables
    cpu_rope.rope_forward(native, rope, positions, q, k)
    assert cpu_rope._STEP[3] is not tables


@pytest.mark.parametrize(("neox", "rotary_dim"), [(False, 16), (True, 8)])
def test_what_the_fast_path_does_not_cover_goes_to_sglang(native, neox, rotary_dim):
    rope = _rope(is_neox_style=neox, rotary_dim=rotary_dim)
    positions, q, k = _inputs(seed=1)
    calls = []

    def original(*args):
        calls.append(1)
        return native(*args)

    got = cpu_rope.rope_forward(original, rope, positions, q, k)
    assert calls and all(torch.equal(a, b) for a, b in zip(got, native(rope, positions, q, k), strict=True))
