"""Real-SGLang fixtures: tiny checkpoints made once per session, and an engine pool that runs one SGLang server per
configuration and keeps at most one alive (each is ~2 GB RSS on CPU), so tests grouped by configuration share it."""

from __future__ import annotations

import importlib.util
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from moe_sglang.launch import EngineConfig, SpeculationConfig
from tests.moe_sglang.tiny_models import ARCHS, make_checkpoint

HAVE_SGLANG = importlib.util.find_spec("sglang") is not None


def pytest_collection_modifyitems(config, items):
    if HAVE_SGLANG:
        return
    skip = pytest.mark.skip(reason="SGLang is not installed (run scripts/setup.sh)")
    for item in items:
        if "sglang" in item.keywords:
            item.add_marker(skip)


class EnginePool:
    """Live SGLang servers keyed by EngineConfig; the least recently used one is stopped beyond `max_live`."""

    def __init__(self, log_dir: Path, max_live: int = 2) -> None:
        self._log_dir = log_dir
        self._max_live = max_live
        self._live: OrderedDict[EngineConfig, tuple[ExitStack, str]] = OrderedDict()
        self.starts = 0

    def url(self, config: EngineConfig) -> str:
        from moe_sglang.server import running_engine

        if config in self._live:
            self._live.move_to_end(config)
            return self._live[config][1]
        while len(self._live) >= self._max_live:
            self._live.popitem(last=False)[1][0].close()
        stack = ExitStack()
        self.starts += 1
        url = stack.enter_context(running_engine(config, log_path=self._log_dir / f"engine-{self.starts}.log"))
        self._live[config] = (stack, url)
        return url

    def close(self) -> None:
        while self._live:
            self._live.popitem()[1][0].close()


@pytest.fixture(scope="session")
def engine_pool(tmp_path_factory) -> Iterator[EnginePool]:
    pool = EnginePool(tmp_path_factory.mktemp("engine-logs"))
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """Random checkpoints: one per architecture; an echo Mixtral (drafts get accepted, see make_checkpoint) as the
    speculation target and its own good draft; a Mixtral with other weights as a poor draft."""
    root = tmp_path_factory.mktemp("tiny-models")
    models = {arch: make_checkpoint(root / arch, arch) for arch in ARCHS}
    models["mixtral-echo"] = make_checkpoint(root / "mixtral-echo", "mixtral", echo=8.0)
    models["mixtral-other"] = make_checkpoint(root / "mixtral-other", "mixtral", seed=1)
    return models


def engine_config(model: Path, **spec) -> EngineConfig:
    return EngineConfig(model_path=str(model), port=0, speculation=SpeculationConfig(**spec))


def generate(url: str, input_ids: list[int], max_new_tokens: int, **sampling) -> dict:
    body = {
        "input_ids": input_ids,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0, **sampling},
    }
    response = httpx.post(f"{url}/generate", json=body, timeout=300)
    response.raise_for_status()
    return response.json()
