import json

import numpy as np
import pytest
import torch

from service.models.batches import TokenData
from service.models.train import TrainConfig, distill_loss, lr_at, train, untied_copy

from .conftest import tiny_llama_config, tiny_mixtral_config


def _data() -> TokenData:
    rng = np.random.default_rng(0)
    # Learnable structure: a repeating pattern per domain plus a little noise.
    pattern = np.tile(np.arange(1, 17, dtype=np.uint16), 200)
    noisy = pattern.copy()
    noisy[rng.integers(0, noisy.size, 100)] = 40
    return TokenData.from_arrays({"python": pattern, "prose": noisy, "arithmetic": (pattern * 3) % 64})


def _config(**overrides) -> TrainConfig:
    base = dict(steps=30, batch_size=4, seq_len=16, lr=1e-2, warmup=3, log_every=10, checkpoint_every=5, threads=1)
    return TrainConfig(**{**base, **overrides})


def test_batches_depend_only_on_seed_and_step():
    data = _data()
    assert torch.equal(data.batch(0, 7, 4, 16), data.batch(0, 7, 4, 16))
    assert not torch.equal(data.batch(0, 7, 4, 16), data.batch(0, 8, 4, 16))
    assert data.batch(0, 7, 4, 16).shape == (4, 17)


def test_domain_weights_must_cover_domains():
    with pytest.raises(ValueError):
        TokenData.from_arrays({"python": np.zeros(100, np.uint16)}, {"prose": 1.0})


def test_lr_warms_up_then_decays_to_floor():
    config = _config(steps=100, warmup=10)
    assert lr_at(0, config) < lr_at(9, config) == pytest.approx(config.lr)
    assert lr_at(99, config) == pytest.approx(config.lr * config.min_lr_ratio, rel=0.01)


def test_a_few_steps_reduce_loss(tmp_path):
    result = train(tiny_mixtral_config(), _data(), _config(), tmp_path)
    log = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    first, last = log[0]["ce"], log[-1]["ce"]
    assert last < first - 0.5
    assert result["steps"] == 30 and result["tokens"] == 30 * 4 * 16


def test_resume_continues_the_same_trajectory(tmp_path):
    straight = train(tiny_mixtral_config(), _data(), _config(steps=10), tmp_path / "a")["model"]
    train(tiny_mixtral_config(), _data(), _config(steps=10, max_minutes=1e-9), tmp_path / "b")  # stops after 1 step
    resumed = train(tiny_mixtral_config(), _data(), _config(steps=10), tmp_path / "b")["model"]
    for (name, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), name


def _agreement(student, teacher, batch: torch.Tensor) -> float:
    with torch.no_grad():
        inputs = batch[:, :-1]
        return (
            (student(input_ids=inputs).logits.argmax(-1) == teacher(input_ids=inputs).logits.argmax(-1))
            .float()
            .mean()
            .item()
        )


def test_distill_loss_is_zero_against_itself_and_positive_against_another_model():
    torch.manual_seed(0)
    from transformers import LlamaForCausalLM

    model, other = LlamaForCausalLM(tiny_llama_config()), LlamaForCausalLM(tiny_llama_config())
    batch = _data().batch(0, 0, 2, 16)
    assert distill_loss(model, model, batch)[1] == pytest.approx(0.0, abs=1e-6)
    assert distill_loss(model, other, batch)[1] > 1e-4  # two random inits: both near uniform, still apart


def test_distillation_moves_a_dense_draft_toward_its_moe_teacher(tmp_path):
    """A draft distilled from a trained MoE agrees with it on more next tokens than one trained on the corpus alone
    (the teacher learnt a descending pattern, the corpus ascends), and its logged KL falls; the draft starts from an
    exported checkpoint (`init`), whose weights it loads."""
    data = _data()
    descending = np.tile(np.arange(16, 0, -1, dtype=np.uint16), 200)  # the teacher predicts other tokens than the data
    other = TokenData.from_arrays({"python": descending, "prose": descending, "arithmetic": descending})
    teacher = train(tiny_mixtral_config(), other, _config(steps=40), tmp_path / "teacher")["model"].eval()
    start = train(tiny_llama_config(), data, _config(steps=5), tmp_path / "start")["model"]
    untied_copy(start).save_pretrained(str(tmp_path / "start-hf"))  # as export_hf writes it, in float32
    unchanged = train(
        tiny_llama_config(), data, _config(steps=1, lr=0.0), tmp_path / "same", init=tmp_path / "start-hf"
    )
    for (name, a), (_, b) in zip(start.state_dict().items(), unchanged["model"].state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    loaded = unchanged["model"]
    assert loaded.get_output_embeddings().weight is loaded.get_input_embeddings().weight  # tied again, as trained
    corpus = train(tiny_llama_config(), data, _config(steps=30), tmp_path / "corpus", init=tmp_path / "start-hf")
    distilled = train(
        tiny_llama_config(), data, _config(steps=30), tmp_path / "kd", init=tmp_path / "start-hf", teacher=teacher
    )
    log = [json.loads(line) for line in (tmp_path / "kd" / "train_log.jsonl").read_text().splitlines()]
    assert log[-1]["kl"] < log[0]["kl"]
    assert distilled["distilled_from"] is not None and distilled["init"] == str(tmp_path / "start-hf")
    held_out = data.batch(99, 0, 8, 16)
    assert _agreement(distilled["model"], teacher, held_out) > _agreement(corpus["model"], teacher, held_out) + 0.3
