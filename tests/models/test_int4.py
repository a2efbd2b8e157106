import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from service.models.draft import make_int4_self_draft
from service.models.int4 import QMAX, dequantize, fake_quantize, quantize


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 6), groups=st.integers(1, 3), seed=st.integers(0, 10_000), scale=st.floats(1e-3, 1e3))
def test_error_is_at_most_half_a_step_per_group(rows, groups, seed, scale):
    weight = torch.randn(rows, groups * 128, generator=torch.Generator().manual_seed(seed)) * scale
    codes, scales = quantize(weight, 128)
    assert codes.dtype == torch.int8 and int(codes.abs().max()) <= QMAX
    error = (dequantize(codes, scales) - weight).abs().reshape(rows, groups, 128)
    assert torch.all(error <= scales.unsqueeze(-1) / 2 * (1 + 1e-5) + 1e-12)


def test_group_layout_runs_along_the_input_dimension():
    weight = torch.zeros(2, 256)
    weight[0, :128] = 0.7  # row 0, group 0
    weight[1, 128:] = -1.4  # row 1, group 1
    codes, scales = quantize(weight, 128)
    assert scales.shape == (2, 2)
    assert torch.allclose(scales, torch.tensor([[0.1, 0.0], [0.0, 0.2]]))
    assert int(codes[0, 0]) == 7 and int(codes[1, 200]) == -7
    assert torch.equal(fake_quantize(weight), weight)  # values on the grid survive exactly, zero groups stay zero


def test_stacked_experts_quantize_per_matrix():
    weight = torch.randn(3, 4, 128)
    codes, scales = quantize(weight, 128)
    assert codes.shape == weight.shape and scales.shape == (3, 4, 1)


@pytest.mark.parametrize("shape,group", [((4, 100), 128), ((4,), 128), ((4, 128), 0)])
def test_bad_shapes_are_rejected(shape, group):
    with pytest.raises(ValueError):
        quantize(torch.randn(*shape), group)


def test_self_draft_changes_only_expert_weights(tiny_checkpoint, tmp_path):
    from safetensors.torch import load_file

    report = make_int4_self_draft(tiny_checkpoint, tmp_path / "int4", group_size=32)  # hidden is 32 here
    assert report["quantized_tensors"] == 2 * 4 * 3  # layers * experts * (w1, w2, w3)
    before = load_file(str(tiny_checkpoint / "model.safetensors"))
    after = load_file(str(tmp_path / "int4" / "model.safetensors"))
    assert before.keys() == after.keys()
    for name, tensor in before.items():
        if ".experts." in name:
            assert not torch.equal(tensor, after[name]), name
            assert torch.equal(fake_quantize(tensor, 32), after[name])
        else:
            assert torch.equal(tensor, after[name]), name  # attention, norms, embeddings, router gates untouched
