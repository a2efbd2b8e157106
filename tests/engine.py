"""Real-SGLang helpers shared by every test package: an engine pool that runs one SGLang server per configuration
(fixture `engine_pool` in tests/conftest.py) and small request helpers."""

from __future__ import annotations

import importlib.util
from collections import OrderedDict
from contextlib import ExitStack
from pathlib import Path

import httpx

from moe_sglang.launch import EngineConfig, SpeculationConfig

HAVE_SGLANG = importlib.util.find_spec("sglang") is not None


class EnginePool:
    """Live SGLang servers keyed by EngineConfig; the least recently used one is stopped beyond `max_live`."""

    def __init__(self, log_dir: Path, max_live: int = 2) -> None:
        self._log_dir = log_dir
        self._max_live = max_live
        self._live: OrderedDict[EngineConfig, tuple[ExitStack, str]] = OrderedDict()
        self.starts = 0
        self.logs: dict[EngineConfig, Path] = {}  # each configuration's latest engine log

    def url(self, config: EngineConfig) -> str:
        from moe_sglang.server import running_engine

        if config in self._live:
            self._live.move_to_end(config)
            return self._live[config][1]
        while len(self._live) >= self._max_live:
            self._live.popitem(last=False)[1][0].close()
        stack = ExitStack()
        self.starts += 1
        self.logs[config] = self._log_dir / f"engine-{self.starts}.log"
        url = stack.enter_context(running_engine(config, log_path=self.logs[config]))
        self._live[config] = (stack, url)
        return url

    def close(self) -> None:
        while self._live:
            self._live.popitem()[1][0].close()


def engine_config(model: Path, *, metrics: bool = False, **spec) -> EngineConfig:
    """A test engine on `model`; `metrics` adds SGLang's --enable-metrics (our moe_serve:* metrics with it)."""
    extra = ("--enable-metrics",) if metrics else ()
    return EngineConfig(model_path=str(model), port=0, speculation=SpeculationConfig(**spec), extra_args=extra)


def generate(url: str, input_ids: list[int], max_new_tokens: int, **sampling) -> dict:
    body = {
        "input_ids": input_ids,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0, **sampling},
    }
    response = httpx.post(f"{url}/generate", json=body, timeout=300)
    response.raise_for_status()
    return response.json()
