"""Helpers for scratch A/B runs of two versions of moe-serve's code on the deciding setup (bench/results/*/ab*.py):
one engine per version up together (PYTHONPATH per engine: a `git worktree` of the version before, with build/
linked into it, against this checkout), and waves of requests sent together, so both versions meet the same load in
interleaved rounds. Scratch measurements, not benchmarks: a change that they show is measured again by its bench."""

from __future__ import annotations

import contextlib
import os
import statistics
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from bench._cell import flush_cache
from bench._load import complete, served_model
from bench._models import bench_engine
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings


@contextlib.contextmanager
def engines_of(
    paths: dict[str, str],
    model,
    spec: SpeculationConfig,
    threads: int = 1,
    settings: EngineSettings | dict[str, EngineSettings] | None = None,
) -> Iterator[dict[str, tuple[str, str]]]:
    """{name: (url, served model name)}: one engine per code version (`paths`: name -> the checkout its processes
    import first), `threads` engine threads each (the deciding benches' 1 on 2 cores), with `settings` (one for all,
    or per name: an A/B of a setting on one version)."""
    before = os.environ.get("PYTHONPATH")
    with contextlib.ExitStack() as stack:
        engines = {}
        for name, path in paths.items():
            os.environ["PYTHONPATH"] = path
            config = bench_engine(model, spec, threads, settings.get(name) if isinstance(settings, dict) else settings)
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


def rotated_rounds(
    engines: dict[str, tuple[str, str]],
    variants: dict[str, dict],
    tasks: tuple[str, ...],
    rounds: int,
    measure: Callable[[str, str, str, dict], float],
) -> list[dict]:
    """Rows of `measure(url, served, task, hints)` (a TPOT in ms) for every engine x variant pair, once per task and
    round, the pairs' order rotated by one each round so that no pair always runs first; the prefix cache is flushed
    before each measurement."""
    pairs = [(e, v) for e in engines for v in variants]
    rows = []
    for r in range(rounds):
        order = pairs[r % len(pairs) :] + pairs[: r % len(pairs)]
        for task in tasks:
            for engine, variant in order:
                url, served = engines[engine]
                flush_cache(url)
                tpot = measure(url, served, task, variants[variant])
                rows.append(dict(round=r, task=task, engine=engine, variant=variant, tpot_ms=tpot))
                print(rows[-1], flush=True)
    return rows


def ms_over_k0(rows: list[dict], tasks: tuple[str, ...], engines: tuple[str, ...], rounds: int) -> dict:
    """Per task and engine, moe-serve's TPOT over the same engine's K = 0 hint per round (variants "ms" and "k0" of
    `rotated_rounds`) and their median: the ratio cancels the engine instance's own speed."""
    summary = {}
    for task in tasks:
        cell = {}
        for engine in engines:
            got = {(x["variant"], x["round"]): x["tpot_ms"] for x in rows if (x["task"], x["engine"]) == (task, engine)}
            ratios = [got["ms", r] / got["k0", r] for r in range(rounds)]
            cell[f"{engine}_ms_over_k0_rounds"] = ratios
            cell[f"{engine}_ms_over_k0_median"] = statistics.median(ratios)
        summary[task] = cell
    return summary
