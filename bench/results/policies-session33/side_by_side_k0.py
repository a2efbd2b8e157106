"""Scratch A/B (33rd session): the plain engine without overlap and a drafter engine up together, moe-fine x48, batch 1,
3 held-out prompts x 32 tokens, request by request in rotated order: plain-sync, the drafter engine at the K = 0 hint,
the drafter engine under moe-serve. usage: python side_by_side_k0.py DRAFTER TASK ROUNDS -> side_by_side_k0-DRAFTER-TASK.json"""

import contextlib
import json
import re
import statistics
import sys

import httpx

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
from bench._cell import flush_cache
from bench._heldout import prompt_sets
from bench._load import run_batch, served_model
from bench._models import bench_engine, deciding_setup, timed_model
from bench.policies import K0, as_token_ids, speculation
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings

drafter, task, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
setup = deciding_setup()
model = timed_model(setup)
texts = prompt_sets(3, 400)
prompts = as_token_ids({task: texts[task]}, model, 128)[task]
MS = {"custom_params": {"moe_serve": {"policy": "moe-serve", "tenant": "bench"}}}


def metrics(url):
    out = {}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        m = re.match(r'moe_serve:spec_step_seconds_(sum|count)\{.*phase="(\w+)".*\} ([0-9.e+-]+)', line)
        if m:
            out[(m.group(1), m.group(2))] = out.get((m.group(1), m.group(2)), 0) + float(m.group(3))
    return out


with contextlib.ExitStack() as st:
    sync = st.enter_context(
        running_engine(
            bench_engine(model, SpeculationConfig(), 1, extra=("--disable-overlap-schedule",)),
            log_path="/tmp/sc-sync.log",
        )
    )
    spec = st.enter_context(
        running_engine(
            bench_engine(model, speculation(drafter, setup), 1, EngineSettings(), ("--enable-metrics",)),
            log_path="/tmp/sc-spec.log",
        )
    )
    variants = {"sync": (sync, None), "k0": (spec, K0), "ms": (spec, MS)}
    names = {u: served_model(u) for u in (sync, spec)}
    res = {n: [] for n in variants}
    rows = []
    for r in range(rounds):
        order = list(variants)[r % 3 :] + list(variants)[: r % 3]
        for p_i, prompt in enumerate(prompts):
            for name in order:
                url, extra = variants[name]
                flush_cache(url)
                before = metrics(url) if url == spec else {}
                out = run_batch(url, names[url], [prompt], 32, 1, extra)
                ph = ""
                if url == spec:
                    after = metrics(url)
                    n = after[("count", "verify")] - before.get(("count", "verify"), 0)
                    ph = {k[1]: round((after[k] - before.get(k, 0)) / n * 1e3, 2) for k in after if k[0] == "sum"}
                res[name].append(out["tpot_ms"])
                rows.append(
                    {
                        "round": r,
                        "prompt": p_i,
                        "variant": name,
                        "tpot_ms": out["tpot_ms"],
                        "phase_ms_per_step": ph or None,
                    }
                )
                print(r, p_i, name, round(out["tpot_ms"], 2), ph, flush=True)
    base = res["sync"]
    for n, v in res.items():
        ratios = [a / b for a, b in zip(v, base, strict=False)]
        print(
            n,
            "median tpot",
            round(statistics.median(v), 2),
            "ratio to sync median",
            round(statistics.median(ratios), 3),
            "min",
            round(min(ratios), 3),
            "max",
            round(max(ratios), 3),
        )
    summary = {
        n: {
            "median_ratio": statistics.median([a / b for a, b in zip(v, base, strict=False)]),
            "min_ratio": min(a / b for a, b in zip(v, base, strict=False)),
            "max_ratio": max(a / b for a, b in zip(v, base, strict=False)),
        }
        for n, v in res.items()
    }
    __import__("pathlib").Path(__file__).with_name(f"side_by_side_k0-{drafter}-{task}.json").write_text(
        json.dumps({"drafter": drafter, "task": task, "rows": rows, "ratio_to_sync": summary}, indent=1)
    )
