"""bench/_routing.py's in-process routing control: the engine's expert products in place of transformers' give the
same forward, with and without an expert budget (dropped slots redirected as the engine does add no contribution)."""

import pytest
import torch

from bench._routing import engine_experts, probed_routers
from moe_sglang.launch import DEFAULT_MODEL


@pytest.fixture(scope="module")
def model():
    if not (DEFAULT_MODEL / "config.json").exists():
        pytest.skip(f"bundled model missing at {DEFAULT_MODEL}")
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(DEFAULT_MODEL, dtype=torch.float32).eval()


@pytest.mark.parametrize("budget", [None, 2])
def test_engine_experts_give_transformers_forward(model, budget):
    ids = torch.randint(1, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with probed_routers(model) as probe, torch.no_grad():
        probe.budget = budget
        expected = model(ids).logits
        dropped = probe.dropped
        probe.redirect = True
        with engine_experts(model) as plan:
            got = model(ids).logits
            assert plan.forms  # tuned on the model's own expert shapes
            if budget is not None:
                probe.redirect = False
                with pytest.raises(ValueError, match="redirect"):
                    model(ids)
    if budget is not None:
        assert dropped > 0  # the budget bound: the dropped-slot path ran
    assert not expected.isnan().any(), "transformers' forward with the budget gave NaN"
    assert not got.isnan().any(), f"the engine's expert products gave NaN (plan {plan.describe()})"
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert all(type(m).forward is m.forward.__func__ for m in model.modules() if type(m).__name__ == "MixtralExperts")


def test_probed_routers_run_the_experts_eagerly_and_restore_their_form(model):
    """transformers' default grouped_mm form leaves the rows of a dropped slot (id E) uninitialized, NaN at times
    (bench/_routing.py); the eager form skips them."""
    experts = [m for m in model.modules() if type(m).__name__ == "MixtralExperts"]
    before = model.config._experts_implementation
    with probed_routers(model):
        assert {m.config._experts_implementation for m in experts} == {"eager"}
    assert model.config._experts_implementation == before


def test_the_engine_experts_are_kept_as_the_engine_keeps_them(model):
    """The bundled checkpoint is bfloat16: its experts are multiplied from bfloat16 copies, as the engine's are
    (EngineSettings.expert_weights), and a block whose values are not all bfloat16 keeps float32."""
    from bench._routing import kept_weights

    block = next(m for m in model.modules() if type(m).__name__ == "MixtralExperts")
    kept = kept_weights(block)
    assert [w.dtype for w in kept] == [torch.bfloat16] * 2
    assert torch.equal(kept[0].float(), block.gate_up_proj) and torch.equal(kept[1].float(), block.down_proj)
    inexact = type("Block", (), {"gate_up_proj": block.gate_up_proj + 1e-4, "down_proj": block.down_proj})()
    assert [w.dtype for w in kept_weights(inexact)] == [torch.float32] * 2
