"""The draft's acceptance head (service/models/accept_head.py): its features, fit, AUC, storage, the rows it is fitted
on, and the head shipped beside moe-fine-draft."""

import json
from pathlib import Path

import pytest
import torch

from service.models.accept_head import EXTRA, HEAD_FILE, REPORT_FILE, TOP, AcceptHead, auc, collect, fit, head_features
from tests.models.conftest import tiny_llama_config, tiny_mixtral_config

FINE_DRAFT = Path(__file__).resolve().parents[2] / "service/models/assets/moe-fine-draft"


def test_features_are_the_top_log_probabilities_margin_mass_and_hidden_state():
    logprobs = torch.log_softmax(torch.randn(3, 50), -1)
    hidden = torch.randn(3, 5)
    f = head_features(logprobs, hidden)
    top = logprobs.sort(-1, descending=True).values[:, :TOP]
    assert f.shape == (3, EXTRA + 5)
    torch.testing.assert_close(f[:, :TOP], top)
    torch.testing.assert_close(f[:, TOP], top[:, 0] - top[:, 1])
    torch.testing.assert_close(f[:, TOP + 1], top.exp().sum(-1))
    torch.testing.assert_close(f[:, EXTRA:], hidden)


def test_auc_counts_the_pairs_ranked_right():
    g = torch.Generator().manual_seed(1)
    score, y = torch.rand(200, generator=g), torch.rand(200, generator=g) < 0.7
    pos, neg = score[y], score[~y]
    pairs = (pos[:, None] > neg[None, :]).double().mean()
    assert auc(score, y) == pytest.approx(float(pairs), abs=1e-12)
    with pytest.raises(ValueError, match="both"):
        auc(score, torch.ones(200, dtype=torch.bool))


def test_fit_finds_the_signal_and_folds_the_standardisation_in():
    """On rows whose label follows one feature (of three, scaled and shifted unlike each other), the head ranks by it,
    and its mean probability is the labels' rate (a logistic fit's calibration on its own rows)."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4000, 3, generator=g) * torch.tensor([5.0, 0.1, 30.0]) + torch.tensor([2.0, -7.0, 100.0])
    y = (x[:, 1] + 7.0 + 0.03 * torch.randn(4000, generator=g)) > -0.05
    head = fit(x, y)
    p = torch.sigmoid(x @ head.weight + head.bias)
    assert auc(p, y) > 0.95 and auc(p, y) > auc(x[:, 0], y) + 0.3
    assert float(p.mean()) == pytest.approx(float(y.float().mean()), abs=0.01)


def test_a_head_is_stored_beside_its_draft(tmp_path):
    head = AcceptHead(torch.arange(EXTRA + 4, dtype=torch.float32), -1.5)
    assert AcceptHead.load(tmp_path) is None
    head.save(tmp_path)
    loaded = AcceptHead.load(tmp_path)
    assert torch.equal(loaded.weight, head.weight) and loaded.bias == -1.5 and loaded.hidden_size == 4
    from safetensors.torch import save_file

    save_file({"weight": torch.zeros(3), "bias": torch.zeros(1)}, str(tmp_path / HEAD_FILE))
    with pytest.raises(ValueError, match="weight"):
        AcceptHead.load(tmp_path)


def test_rows_are_the_drafts_greedy_guess_against_the_targets_greedy_continuation():
    """collect: a row per root of the target's greedy continuation; its label says whether the draft's greedy
    token after the target's tokens is the target's next one (computed here from whole-sequence forwards)."""
    from transformers import LlamaForCausalLM, MixtralForCausalLM

    torch.manual_seed(0)
    target, draft = MixtralForCausalLM(tiny_mixtral_config()).eval(), LlamaForCausalLM(tiny_llama_config()).eval()
    prompts, tokens = [[3, 9, 4, 1], [7, 7, 2]], 6
    x, y = collect(target, draft, prompts, tokens)
    assert x.shape == (len(prompts) * (tokens - 1), EXTRA + 16) and y.dtype == torch.bool
    expected = []
    with torch.no_grad():
        for ids in prompts:
            seq = list(ids)
            for _ in range(tokens):
                seq.append(int(target(torch.tensor([seq])).logits[0, -1].argmax()))
            guess = draft(torch.tensor([seq])).logits[0].argmax(-1)
            expected += [bool(guess[len(ids) + j] == seq[len(ids) + j + 1]) for j in range(tokens - 1)]
    assert y.tolist() == expected


def test_the_shipped_head_fits_moe_fine_draft_and_reads_better_than_the_margin():
    head = AcceptHead.load(FINE_DRAFT)
    config = json.loads((FINE_DRAFT / "config.json").read_text())
    report = json.loads((FINE_DRAFT / REPORT_FILE).read_text())
    assert head is not None and head.hidden_size == config["hidden_size"]
    assert report["heldout"]["auc"] > report["heldout"]["auc_margin"] + 0.05, report["heldout"]
