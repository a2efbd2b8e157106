"""Real-SGLang fixtures: tiny checkpoints made once per session, and an engine pool that runs one SGLang server per
configuration and keeps at most one alive (each is ~2 GB RSS on CPU), so tests grouped by configuration share it."""

from __future__ import annotations

import importlib.util
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
    """One live SGLang server at a time, keyed by its EngineConfig."""

    def __init__(self, log_dir: Path) -> None:
        self._log_dir = log_dir
        self._stack: ExitStack | None = None
        self._config: EngineConfig | None = None
        self._url: str | None = None
        self.starts = 0

    def url(self, config: EngineConfig) -> str:
        from moe_sglang.server import running_engine

        if config != self._config:
            self.close()
            self._stack = ExitStack()
            self.starts += 1
            log = self._log_dir / f"engine-{self.starts}.log"
            self._url = self._stack.enter_context(running_engine(config, log_path=log))
            self._config = config
        return self._url

    def close(self) -> None:
        if self._stack is not None:
            self._stack.close()
        self._stack, self._config, self._url = None, None, None


@pytest.fixture(scope="session")
def engine_pool(tmp_path_factory) -> Iterator[EnginePool]:
    pool = EnginePool(tmp_path_factory.mktemp("engine-logs"))
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """Random checkpoints: one per architecture, plus a Mixtral with other weights as a poor draft."""
    root = tmp_path_factory.mktemp("tiny-models")
    models = {arch: make_checkpoint(root / arch, arch) for arch in ARCHS}
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
