"""bench.draft_acceptance (issue 16): the (model, drafter) pairs of bench/_models.py, and a quick engine run on moe-fine
with all three drafters (NGRAM, dense STANDALONE draft, INT4 self-draft)."""

import json

import pytest

from bench._models import DRAFTERS, drafter_speculation, int4_self_draft
from moe_sglang.launch import DEFAULT_DRAFT_MODEL, DEFAULT_MODEL, FINE_DRAFT_MODEL, FINE_MODEL


def test_int4_self_draft_is_built_once_and_cached(tmp_path):
    first = int4_self_draft(FINE_MODEL, cache=tmp_path)
    assert first == tmp_path / "moe-fine-int4"
    assert json.loads((first / "int4_draft.json").read_text())["group_size"] == 32  # 96-wide experts
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert int4_self_draft(FINE_MODEL, cache=tmp_path) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp, "a cached draft was rebuilt"


def test_drafter_pairs():
    assert drafter_speculation("ngram", FINE_MODEL).algorithm == "ngram"
    assert drafter_speculation("dense", FINE_MODEL).draft_model_path == str(FINE_DRAFT_MODEL)
    assert drafter_speculation("dense", DEFAULT_MODEL).draft_model_path == str(DEFAULT_DRAFT_MODEL)
    spec = drafter_speculation("dense", FINE_MODEL, num_steps=2, num_draft_tokens=3)
    assert (spec.algorithm, spec.num_steps, spec.num_draft_tokens) == ("standalone", 2, 3)
    with pytest.raises(ValueError):
        drafter_speculation("eagle", FINE_MODEL)


@pytest.mark.sglang
@pytest.mark.slow
def test_quick_run_on_moe_fine(tmp_path):
    from bench import draft_acceptance

    assert draft_acceptance.main(["--quick", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "quick.json").read_text())
    assert data["model"] == "moe-fine" and set(data["drafters"]) == set(DRAFTERS)
    for drafter in data["drafters"].values():
        assert set(drafter["domains"]) == {"python", "prose", "arithmetic"}
        for cell in drafter["domains"].values():
            assert 1.0 <= cell["accept_length"] <= 4.0 and cell["tokens"] == 16
    # the INT4 self-draft routes like the target (routing_stats: 98 % exact top-k): most drafts are accepted
    assert min(c["accept_length"] for c in data["drafters"]["int4"]["domains"].values()) > 2.0
