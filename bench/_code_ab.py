"""Helpers for scratch A/B runs of two versions of moe-serve's code on the deciding setup (bench/results/*/ab*.py):
one engine per version up together (PYTHONPATH per engine: a `git worktree` of the version before, with build/
linked into it, against this checkout), and waves of requests sent together, so both versions meet the same load in
interleaved rounds. Scratch measurements, not benchmarks: a change that they show is measured again by its bench."""

from __future__ import annotations

import contextlib
import os
import statistics
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from bench._load import complete, served_model
from bench._models import bench_engine
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings


@contextlib.contextmanager
def engines_of(
    paths: dict[str, str], model, spec: SpeculationConfig, threads: int = 1, settings: EngineSettings | None = None
) -> Iterator[dict[str, tuple[str, str]]]:
    """{name: (url, served model name)}: one engine per code version (`paths`: name -> the checkout its processes
    import first), `threads` engine threads each (the deciding benches' 1 on 2 cores)."""
    before = os.environ.get("PYTHONPATH")
    with contextlib.ExitStack() as stack:
        engines = {}
        for name, path in paths.items():
            os.environ["PYTHONPATH"] = path
            config = bench_engine(model, spec, threads, settings)
            url = stack.enter_context(running_engine(config, log_path=f"/tmp/ab-{name}.log"))
            engines[name] = (url, served_model(url))
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before
        yield engines


def wave_tpot_ms(url: str, served: str, prompts: list, tokens: int, hints: dict | None) -> float:
    """Mean TPOT (ms) of `prompts` sent together, `tokens` each."""
    with ThreadPoolExecutor(len(prompts)) as pool:
        done = list(pool.map(lambda p: complete(url, served, p, tokens, hints), prompts))
    return statistics.mean(c.tpot_s for c in done) * 1e3
