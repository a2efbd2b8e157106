"""Issue 16 part 1: the fine-grained sparse bundled model (moe-fine), its dense draft, card and reports.

The card and reports must describe the shipped checkpoint: its config (>= 32 experts, top-k 4..8, <= 40 MB), the
held-out losses and routing numbers of the committed reports, and a finished dense draft on the same tokenizer.
"""

import json

import pytest
import torch

from service.models.accept_head import card_lines
from service.models.inflate import inflate_checkpoint

from .test_assets import ASSETS, TARGET

FINE, FINE_DRAFT = ASSETS / "moe-fine", ASSETS / "moe-fine-draft"
REPORTS = ASSETS / "reports" / "moe-fine"
ACCEPTANCE = ASSETS.parents[2] / "bench" / "results" / "draft_acceptance" / "moe-fine.json"


def _config(path):
    return json.loads((path / "config.json").read_text())


def _report(name):
    return json.loads((REPORTS / name).read_text())


def test_fine_is_a_fine_grained_sparse_mixtral():
    config = _config(FINE)
    assert config["architectures"] == ["MixtralForCausalLM"]
    assert config["num_local_experts"] >= 32
    assert 4 <= config["num_experts_per_tok"] <= 8
    assert config["intermediate_size"] < config["hidden_size"]  # small experts: narrower than the model
    assert (FINE / "model.safetensors").stat().st_size <= 40 * 2**20
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "README.md"):
        assert (FINE / name).exists(), name
    assert (FINE / "tokenizer.json").read_bytes() == (TARGET / "tokenizer.json").read_bytes()  # same tokenizer


def test_fine_draft_is_dense_finished_and_shares_the_tokenizer():
    config, summary = _config(FINE_DRAFT), json.loads((FINE_DRAFT / "training_summary.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["vocab_size"] == _config(FINE)["vocab_size"]
    assert (FINE_DRAFT / "tokenizer.json").read_bytes() == (TARGET / "tokenizer.json").read_bytes()
    assert summary["steps"] == summary["planned_steps"], "the dense draft must train to completion (issue 16)"
    assert (FINE_DRAFT / "README.md").exists()
    assert "\n".join(card_lines(FINE_DRAFT, "moe-fine")) in (FINE_DRAFT / "README.md").read_text()  # its head's


def test_card_states_the_checkpoint_and_the_reports():
    config, card = _config(FINE), (FINE / "README.md").read_text()
    summary = json.loads((FINE / "training_summary.json").read_text())
    assert f"{config['num_local_experts']} experts top-{config['num_experts_per_tok']}" in card
    assert f"expert intermediate {config['intermediate_size']}" in card
    assert f"{summary['tokens']:,} tokens" in card
    assert f"--seed {summary['train_config']['seed']}" in card and f"--experts {config['num_local_experts']}" in card
    evaluation = _report("eval.json")
    for domain, r in evaluation["domains"].items():
        assert f"| {domain} | {r['heldout_loss']:.3f} | {r['unigram_loss']:.3f} |" in card
    routing = _report("routing_stats.json")["summary"]
    for domain in ("python", "prose", "arithmetic"):
        assert f"{domain} {routing[domain]['effective_experts']:.1f}" in card
        assert f"{routing[domain]['top_half_mass']['16']:.3f}" in card
    acceptance = json.loads(ACCEPTANCE.read_text())
    assert set(acceptance["drafters"]) == {"ngram", "dense", "int4"}
    assert acceptance["model"] == "moe-fine"


def test_routing_report_matches_the_checkpoint():
    config, routing = _config(FINE), _report("routing_stats.json")
    experts, top_k = config["num_local_experts"], config["num_experts_per_tok"]
    for layers in routing["domains"].values():
        assert len(layers) == config["num_hidden_layers"]
        for layer in layers:
            assert len(layer["load"]) == experts
            assert layer["unique"]["1"] == pytest.approx(top_k)  # one token touches exactly its top-k
            # a run of 2t tokens is the union of two runs of t (windows of 256 split evenly): never fewer experts
            unique = [layer["unique"][str(t)] for t in (1, 2, 4, 8, 16, 32, 64)]
            assert unique == sorted(unique) and unique[-1] <= experts
    for domain in ("python", "prose", "arithmetic"):
        s = routing["summary"][domain]
        assert s["unique_moesd"]["64"] == pytest.approx(experts * (1 - (1 - top_k / experts) ** 64), abs=1e-3)
        assert 0.5 <= s["top_half_mass"]["64"] <= 1.0


def test_fine_inflated_equals_original(tmp_path):
    from transformers import AutoModelForCausalLM

    config = _config(FINE)
    out = tmp_path / "moe-fine-x4"
    inflate_checkpoint(FINE, out, 4 * config["intermediate_size"])
    original = AutoModelForCausalLM.from_pretrained(str(FINE), dtype=torch.float32).eval()
    inflated = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    ids = torch.randint(1, config["vocab_size"], (2, 32), generator=torch.Generator().manual_seed(0))
    options = {"max_new_tokens": 16, "min_new_tokens": 16, "do_sample": False}
    with torch.no_grad():
        diff = (original(input_ids=ids).logits - inflated(input_ids=ids).logits).abs().max().item()
        assert torch.equal(original.generate(ids[:1, :12], **options), inflated.generate(ids[:1, :12], **options))
    assert diff < 1e-4
