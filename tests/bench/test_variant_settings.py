"""bench.step_profile.variant_settings: the variant names bench.decode_peer and bench.step_profile take."""

import pytest

from bench.step_profile import variant_settings
from moe_sglang.settings import EngineSettings


def test_a_variant_sets_only_what_it_names():
    defaults = EngineSettings()
    s = variant_settings("fused+torch+experts-float32")
    assert (s.cpu_attention, s.cpu_gemm, s.expert_weights) == ("fused", "torch", "float32")
    assert (s.draft_forward, s.target_forward) == (defaults.draft_forward, defaults.target_forward)
    assert variant_settings("fused").expert_weights == defaults.expert_weights == "bf16-exact"
    assert variant_settings("batched+target-sglang").target_forward == "sglang"


@pytest.mark.parametrize("bad", ["fused+experts-int4", "fused+experts-float32+experts-bf16-exact", "avx", "fused+x"])
def test_a_bad_variant_stops_with_the_grammar(bad):
    with pytest.raises(SystemExit, match="experts-WEIGHTS"):
        variant_settings(bad)
