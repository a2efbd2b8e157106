from __future__ import annotations

import pytest
import torch

from service.kernels.int4 import dequantize_int4
from service.offload.fidelity import compare_topk, routing_fidelity
from service.offload.offloaded_experts import ExpertsMode, fused_experts, install
from service.offload.self_draft import Int4Experts
from service.offload.tiny_model import tiny_random_mixtral


@pytest.mark.parametrize(
    "target,draft,expected",
    [
        ([[0, 1], [2, 3]], [[0, 1], [2, 3]], (1.0, 1.0, 1.0)),
        ([[0, 1], [2, 3]], [[1, 0], [3, 2]], (0.0, 1.0, 1.0)),
        ([[0, 1], [2, 3]], [[0, 5], [6, 7]], (0.0, 0.0, 0.25)),
    ],
)
def test_compare_topk(target, draft, expected):
    assert compare_topk(torch.tensor(target), torch.tensor(draft)) == pytest.approx(expected)


def test_int4_experts_match_dequantized_weights():
    gate_up, down = torch.randn(3, 256, 128), torch.randn(3, 128, 128)
    int4 = Int4Experts.quantize(gate_up, down)
    x = torch.randn(5, 128)
    w13 = dequantize_int4(int4.gate_up[1], int4.gate_up_scales[1])
    w2 = dequantize_int4(int4.down[1], int4.down_scales[1])
    gate, up = (x @ w13.T).chunk(2, dim=-1)
    torch.testing.assert_close(int4.forward(1, x), (torch.nn.functional.silu(gate) * up) @ w2.T)
    assert int4.nbytes() < (gate_up.numel() + down.numel()) * 4 / 6  # ~4.3 bits per weight vs 32


def test_draft_shares_every_non_expert_tensor_and_routes_like_the_target():
    model = tiny_random_mixtral(num_layers=2)
    non_expert = {name: p.data_ptr() for name, p in model.named_parameters() if ".experts." not in name}
    mode = ExpertsMode()
    install(model, None, mode)
    assert {name: p.data_ptr() for name, p in model.named_parameters()} == non_expert  # same tensors, nothing new
    with pytest.raises(TypeError, match="fused Mixtral experts"):
        fused_experts(model)  # already replaced
    layers = routing_fidelity(model, mode, torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0)))
    assert [f.layer for f in layers] == [0, 1]
    for f in layers:
        assert 0.0 <= f.exact <= f.same_set <= f.overlap <= 1.0
    # Layer 0's router reads the same hidden states in both modes (only expert weights differ, and they act after it)
    assert (layers[0].exact, layers[0].same_set) == (1.0, 1.0)
    assert layers[1].overlap > 0.8  # INT4 group-128 noise rarely flips a choice (MoE-SpeQ: 90.9 % at top-4)
    assert mode.listeners == []
