"""INT4 group-symmetric quantization: error bound, packing layout, the reference matmul, bad input."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from service.kernels.int4 import dequantize_int4, int4_matmul_ref, quantize_int4, unpack_int4


@given(
    rows=st.integers(1, 6),
    groups=st.integers(1, 3),
    group_size=st.sampled_from([2, 8, 32, 128]),
    magnitude=st.floats(1e-3, 1e3),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=60, deadline=None)
def test_round_trip_error_is_at_most_half_a_scale(rows, groups, group_size, magnitude, seed):
    w = torch.randn(rows, groups * group_size, generator=torch.Generator().manual_seed(seed)) * magnitude
    packed, scales = quantize_int4(w, group_size)
    error = (dequantize_int4(packed, scales, group_size) - w).abs()  # [N, K]
    bound = scales.repeat_interleave(group_size, dim=1) / 2  # [N, K]
    assert (error <= bound * (1 + 1e-5) + 1e-12).all()
    # Symmetric: the largest magnitude in each group is represented exactly (code ±7).
    assert torch.allclose(scales * 7, w.reshape(rows, groups, group_size).abs().amax(-1))


def test_packing_layout_low_nibble_is_the_even_column():
    w = torch.tensor([[7.0, -7.0, 0.0, 1.0]])  # scale 1 → codes 7, -7, 0, 1 → nibbles 15, 1, 8, 9
    packed, scales = quantize_int4(w, group_size=4)
    assert packed.dtype == torch.uint8
    assert packed.tolist() == [[0x1F, 0x98]]
    assert scales.tolist() == [[1.0]]
    assert unpack_int4(packed).tolist() == [[7, -7, 0, 1]]


def test_codes_are_symmetric_and_zero_groups_stay_zero():
    w = torch.cat([torch.randn(3, 128), torch.zeros(3, 128)], dim=1)
    packed, scales = quantize_int4(w)
    codes = unpack_int4(packed)
    assert codes.min() >= -7 and codes.max() <= 7
    assert torch.equal(scales[:, 1], torch.zeros(3))
    assert torch.equal(dequantize_int4(packed, scales)[:, 128:], torch.zeros(3, 128))


def test_expert_stacks_quantize_per_expert():
    w13 = torch.randn(4, 6, 256)  # [E, 2I, H]
    packed, scales = quantize_int4(w13)
    assert packed.shape == (4, 6, 128) and scales.shape == (4, 6, 2)
    for expert in range(4):
        one_packed, one_scales = quantize_int4(w13[expert])
        assert torch.equal(packed[expert], one_packed) and torch.equal(scales[expert], one_scales)


def test_matmul_ref_is_x_times_dequantised_weight():
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(24, 256, generator=gen)
    x = torch.randn(5, 256, generator=gen)
    packed, scales = quantize_int4(w)
    got = int4_matmul_ref(x, packed, scales)
    torch.testing.assert_close(got, x @ dequantize_int4(packed, scales).T)
    # and within the quantization error of the fp32 product: |x| · (scale/2) per output
    bound = x.abs() @ (scales.repeat_interleave(128, dim=1) / 2).T
    assert ((got - x @ w.T).abs() <= bound + 1e-4).all()


def test_matmul_ref_keeps_the_input_dtype():
    packed, scales = quantize_int4(torch.randn(8, 128))
    assert int4_matmul_ref(torch.randn(2, 128, dtype=torch.bfloat16), packed, scales).dtype == torch.bfloat16


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: quantize_int4(torch.randn(4, 100)), "multiple of group_size"),
        (lambda: quantize_int4(torch.randn(4, 128), group_size=3), "even"),
        (lambda: unpack_int4(torch.zeros(2, 2, dtype=torch.int8)), "uint8"),
        (lambda: dequantize_int4(torch.zeros(2, 64, dtype=torch.uint8), torch.ones(2, 2)), "scales must be"),
        (lambda: int4_matmul_ref(torch.randn(2, 64), *quantize_int4(torch.randn(4, 128))), r"x must be \[M, K=128\]"),
    ],
)
def test_bad_input_is_rejected_clearly(call, message):
    with pytest.raises(ValueError, match=message):
        call()
