import json

import pytest
import torch

from service.models.inflate import inflate_checkpoint, pad_expert_weight


def test_pad_shapes_and_zero_fill():
    w1 = torch.randn(8, 4)
    w2 = torch.randn(4, 8)
    p1, p2 = pad_expert_weight("w1", w1, 20), pad_expert_weight("w2", w2, 20)
    assert p1.shape == (20, 4) and p2.shape == (4, 20)
    assert torch.equal(p1[:8], w1) and not p1[8:].any()
    assert torch.equal(p2[:, :8], w2) and not p2[:, 8:].any()
    with pytest.raises(ValueError):
        pad_expert_weight("w3", w1, 4)


def test_inflation_preserves_the_function(tiny_checkpoint, tmp_path):
    from transformers import MixtralForCausalLM

    out = tmp_path / "inflated"
    report = inflate_checkpoint(tiny_checkpoint, out, 512)
    assert report["intermediate_size"] == [128, 512]
    assert json.loads((out / "config.json").read_text())["intermediate_size"] == 512
    original = MixtralForCausalLM.from_pretrained(str(tiny_checkpoint)).eval()
    inflated = MixtralForCausalLM.from_pretrained(str(out)).eval()
    assert inflated.model.layers[0].mlp.experts.down_proj.shape[-1] == 512
    ids = torch.randint(1, 64, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        diff = (original(input_ids=ids).logits - inflated(input_ids=ids).logits).abs().max().item()
        greedy_a = original.generate(ids[:1, :8], max_new_tokens=12, do_sample=False, min_new_tokens=12)
        greedy_b = inflated.generate(ids[:1, :8], max_new_tokens=12, do_sample=False, min_new_tokens=12)
    assert diff < 1e-4
    assert torch.equal(greedy_a, greedy_b)


def test_inflation_refuses_to_shrink(tiny_checkpoint, tmp_path):
    with pytest.raises(ValueError):
        inflate_checkpoint(tiny_checkpoint, tmp_path / "x", 64)


def test_weight_share_sizing_reaches_the_goal_under_its_own_model():
    from service.models.inflate import factor_for_weight_share, intermediate_for_weight_share

    expert, dense, step = 1.0, 0.5, 6.0  # share now 0.25
    factor = factor_for_weight_share(expert, dense, step, 0.7)
    grown = step + (factor - 1) * expert
    assert abs((dense + factor * expert) / grown - 0.7) < 1e-9
    assert factor_for_weight_share(5.0, 0.5, 6.0, 0.7) == 1.0  # already memory-bound: no inflation
    profile = {
        "rows": [
            {"model": "m", "variant": "loop", "stage": "decode", "batch": 1, "expert_gemm_ms": 9.0,
             "dense_gemm_ms": 0.0, "step_ms": 10.0},
            {"model": "m", "variant": "batched", "stage": "decode", "batch": 1, "expert_gemm_ms": expert,
             "dense_gemm_ms": dense, "step_ms": step},
        ]
    }  # fmt: skip
    size = intermediate_for_weight_share(profile, "m", 512, 0.7)
    assert size % 64 == 0 and size >= 512 * factor > size - 64
    with pytest.raises(ValueError, match="no batch-1 decode row"):
        intermediate_for_weight_share(profile, "other", 512, 0.7)
    with pytest.raises(ValueError):
        factor_for_weight_share(1.0, 0.5, 6.0, 1.0)
