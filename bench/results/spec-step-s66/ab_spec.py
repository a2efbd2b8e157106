"""Scratch (66th session): old vs new engine code, a STANDALONE engine at 1 thread (moe-fine x48 and its dense draft)
serving batch-1 held-out prompts one at a time at a static K (or a policy), the two engines alternating round by
round; per engine the client's TPOT (streamed, 32 tokens) and the step log's medians over its batch-1 speculative
steps of other_ms / draft_ms / verify_ms and the step's duration.
Usage: PYTHONPATH=. python ab_spec.py OUT OLD_TREE ROUNDS HINT_JSON [TASK]   (OLD_TREE: a git worktree of the old
commit whose build/ links to this checkout's, so both engines load the same kernels)"""

import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

from bench._heldout import heldout_documents
from bench._models import bench_engine, deciding_setup, timed_model
from bench.policies import drafter_settings, speculation
from moe_sglang.server import running_engine


def tpot(url: str, served: str, prompt: str, hint: dict) -> float:
    body = {
        "model": served,
        "prompt": prompt,
        "max_tokens": 32,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "custom_params": {"moe_serve": hint},
    }
    times = []
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                times.append(time.perf_counter())
    return (times[-1] - times[0]) / 31 * 1e3


def summary(variant: str, rnd: int, tpots: list[float], log: Path) -> dict:
    with open(log) as f:
        steps = [json.loads(x) for x in f]
    spec = [s for s in steps if not s["plain"] and len(s["rids"]) == 1]
    row = {"variant": variant, "round": rnd, "tpot_ms": round(statistics.median(tpots), 3)}
    row["tpots"] = [round(x, 2) for x in tpots]
    row["spec_steps"] = len(spec)
    for key in ("other_ms", "draft_ms", "verify_ms"):
        row[key] = round(statistics.median(s[key] for s in spec), 3) if spec else None
    row["step_ms"] = round(statistics.median((s["end"] - s["start"]) * 1e3 for s in spec), 3) if spec else None
    return row


def main() -> None:
    out, old_tree, rounds, hint = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
    task = sys.argv[5] if len(sys.argv) > 5 else "prose"
    out.mkdir(parents=True, exist_ok=True)
    setup = deciding_setup()
    model = timed_model(setup)
    docs = [d[:400] for d in heldout_documents(task, 10)]
    base = os.environ.get("PYTHONPATH", "")
    results = []
    for rnd in range(rounds):
        for variant in ("old", "new") if rnd % 2 == 0 else ("new", "old"):
            os.environ["PYTHONPATH"] = f"{old_tree}:{base}" if variant == "old" else base
            log = out / f"{variant}-{rnd}.steps.jsonl"
            settings = dataclasses.replace(drafter_settings(), step_log=str(log))
            cfg = bench_engine(model, speculation("standalone", setup), 1, settings)
            with running_engine(cfg, out / f"{variant}-{rnd}.log") as url:
                served = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]
                tpot(url, served, docs[0], hint)  # warm-up
                tpots = [tpot(url, served, d, hint) for d in docs]
            results.append(summary(variant, rnd, tpots, log))
            print(results[-1], flush=True)
    os.environ["PYTHONPATH"] = base
    with open(out / "ab.json", "w") as f:
        json.dump(results, f, indent=1)
    for variant in ("old", "new"):
        rows = [r for r in results if r["variant"] == variant]
        keys = ("tpot_ms", "other_ms", "draft_ms", "verify_ms", "step_ms")
        print(variant, {k: round(statistics.median(r[k] for r in rows), 3) for k in keys})


if __name__ == "__main__":
    main()
