"""Issue 10 part 1: MoE-SpeQ's INT4 self-draft of the bundled model (experts INT4, group 128, symmetric; everything
else unchanged) serves as SGLang's STANDALONE draft on CPU: greedy output equals plain decoding and most drafts are
accepted (the draft routes like the target)."""

import pytest

from service.models.draft import make_int4_self_draft
from tests.engine import engine_config, generate
from tests.models.test_assets import ASSETS, TARGET

FINE = ASSETS / "moe-fine"  # issue 16: 32 experts top-4, INT4 groups of 32

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

PROMPTS = ["def fibonacci(n):\n", "This program is free software; you can redistribute it", "Compute (12 + 7) * 3.\n"]


@pytest.mark.parametrize("target", [TARGET, FINE], ids=["moe-tiny", "moe-fine"])
def test_int4_self_draft_as_standalone_draft(target, engine_pool, tmp_path_factory):
    from transformers import AutoTokenizer

    draft = tmp_path_factory.mktemp("int4") / f"{target.name}-int4"
    make_int4_self_draft(target, draft)
    ids = [AutoTokenizer.from_pretrained(str(TARGET))(p).input_ids for p in PROMPTS]
    plain_url = engine_pool.url(engine_config(target))
    plain = [generate(plain_url, i, 32, ignore_eos=True)["output_ids"] for i in ids]
    spec_url = engine_pool.url(
        engine_config(target, algorithm="standalone", draft_model_path=str(draft), num_steps=3, num_draft_tokens=4)
    )
    outs = [generate(spec_url, i, 32, ignore_eos=True) for i in ids]
    assert [o["output_ids"] for o in outs] == plain
    accept = [o["meta_info"]["spec_accept_length"] for o in outs]
    # 32 tokens with nothing accepted would be 32/31 ≈ 1.03 per step; measured here: 2.9-3.6 of at most 4
    assert min(accept) > 2.0, accept
