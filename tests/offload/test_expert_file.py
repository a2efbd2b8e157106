from __future__ import annotations

import pytest
import torch

from service.offload.expert_file import ExpertFile, write_expert_file


def test_read_returns_each_expert_exactly(small_file, small_layers):
    assert (small_file.num_layers, small_file.num_experts) == (3, 4)
    assert small_file.expert_bytes == (4 * 4 + 4 * 2) * 4
    for layer, (gate_up, down) in enumerate(small_layers):
        for expert in range(4):
            w13, w2 = small_file.read(layer, expert)
            assert torch.equal(w13, gate_up[expert]) and torch.equal(w2, down[expert])


def test_read_copies_out_of_the_map(small_file):
    first, _ = small_file.read(0, 0)
    first.add_(1.0)  # a copy: writable, and the file is untouched
    again, _ = small_file.read(0, 0)
    assert not torch.equal(first, again)


@pytest.mark.parametrize("key", [(3, 0), (0, 4), (-1, 0)])
def test_unknown_expert_is_a_key_error(small_file, key):
    with pytest.raises(KeyError):
        small_file.read(*key)


def test_bf16_round_trip(tmp_path):
    layers = [(torch.randn(2, 4, 4).bfloat16(), torch.randn(2, 4, 2).bfloat16())]
    source = ExpertFile(write_expert_file(layers, tmp_path / "bf16.safetensors"))
    w13, w2 = source.read(0, 1)
    assert w13.dtype == torch.bfloat16 and torch.equal(w13, layers[0][0][1]) and torch.equal(w2, layers[0][1][1])


def test_bad_layouts_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="no MoE layers"):
        write_expert_file([], tmp_path / "x.safetensors")
    with pytest.raises(ValueError, match="layer 0"):
        write_expert_file([(torch.zeros(2, 4, 4), torch.zeros(3, 4, 2))], tmp_path / "x.safetensors")
