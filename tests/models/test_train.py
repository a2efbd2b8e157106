import json

import numpy as np
import pytest
import torch

from service.models.batches import TokenData
from service.models.train import TrainConfig, lr_at, train

from .conftest import tiny_mixtral_config


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
