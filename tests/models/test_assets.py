"""The shipped embedded default (service/models/assets/) loads in transformers and has learned something."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from service.models.arithmetic import arithmetic_documents
from service.models.corpus import is_heldout, python_documents

ASSETS = Path(__file__).resolve().parents[2] / "service" / "models" / "assets"
TARGET, DRAFT = ASSETS / "moe-tiny", ASSETS / "moe-tiny-draft"


def _load(path: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(
        str(path)
    )


def _losses(model, ids: list[int], window: int = 128) -> tuple[float, float]:
    """(model cross-entropy on 4 spread-out windows, unigram entropy of all of ids) in nats/token.

    The unigram is fitted on the very tokens it is scored on (all of ids, which include the windows): a generous
    baseline, so beating it by a margin is a real result.
    """
    starts = np.linspace(0, len(ids) - window - 1, 4).astype(int)
    rows = torch.tensor([ids[s : s + window + 1] for s in starts])
    with torch.no_grad():
        logits = model(input_ids=rows[:, :-1]).logits
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1)).item()
    counts = np.bincount(np.asarray(ids))
    p = counts[counts > 0] / counts.sum()
    return ce, float(-(p * np.log(p)).sum())


def test_target_is_a_small_mixtral():
    config = json.loads((TARGET / "config.json").read_text())
    assert config["architectures"] == ["MixtralForCausalLM"]
    assert config["num_key_value_heads"] == config["num_attention_heads"]
    assert (TARGET / "model.safetensors").stat().st_size <= 40 * 2**20
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "README.md"):
        assert (TARGET / name).exists(), name


@pytest.mark.parametrize("domain", ["python", "arithmetic"])
def test_target_beats_unigram_on_unseen_text(domain):
    from transformers import MixtralForCausalLM

    model, tokenizer = _load(TARGET)
    assert isinstance(model, MixtralForCausalLM)
    if domain == "python":
        text = "".join(d.text for d in python_documents() if is_heldout(d.name, 0, 0.05))
    else:
        text = "\n".join(arithmetic_documents(seed=12345, total_chars=200_000))  # the corpus used seed 0
    ce, unigram = _losses(model, tokenizer(text).input_ids)
    assert ce < unigram - 0.5


def test_draft_is_dense_and_shares_the_tokenizer():
    from transformers import LlamaForCausalLM

    draft, tokenizer = _load(DRAFT)
    assert isinstance(draft, LlamaForCausalLM)
    assert (DRAFT / "tokenizer.json").read_bytes() == (TARGET / "tokenizer.json").read_bytes()
    assert draft.config.vocab_size == json.loads((TARGET / "config.json").read_text())["vocab_size"]
