"""Scratch A/B (33rd session): one MOE_SERVE_NGRAM engine on moe-fine x48, batch 1, 3 held-out prompts x 32 tokens per
measurement, the K = 0 hint against moe-serve in alternating order; TPOT and the engine's step phases per step
(moe_serve:spec_step_seconds). usage: python k0_vs_moe_serve.py TASK ROUNDS [spy] > writes k0_vs_moe_serve-TASK.json"""

import json
import re
import statistics
import subprocess
import sys
import time

import httpx

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
from bench._cell import flush_cache
from bench._heldout import prompt_sets
from bench._load import run_batch, served_model
from bench._models import bench_engine, deciding_setup, timed_model
from bench.policies import K0, as_token_ids, speculation
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings

task = sys.argv[1] if len(sys.argv) > 1 else "math"
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
spy = len(sys.argv) > 3
setup = deciding_setup()
model = timed_model(setup)
texts = prompt_sets(3, 600)
prompts = as_token_ids({task: texts[task]}, model, 128)[task]
MS = {"custom_params": {"moe_serve": {"policy": "moe-serve", "tenant": "bench"}}}


def metrics(url):
    out = {}
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        m = re.match(r'moe_serve:spec_step_seconds_(sum|count)\{.*phase="(\w+)".*\} ([0-9.e+-]+)', line)
        if m:
            out[(m.group(1), m.group(2))] = out.get((m.group(1), m.group(2)), 0) + float(m.group(3))
        m = re.match(r'moe_serve:target_forwards_total\{.*kind="(\w+)".*\} ([0-9.e+-]+)', line)
        if m:
            out[("fw", m.group(1))] = out.get(("fw", m.group(1)), 0) + float(m.group(2))
    return out


cfg = bench_engine(model, speculation("ngram", setup), 1, EngineSettings(), ("--enable-metrics",))
with running_engine(cfg, log_path="/tmp/k0cost-engine.log") as url:
    model_name = served_model(url)
    res = {"k0": [], "ms": []}
    rows = []
    for r in range(rounds):
        for name in ["k0", "ms"] if r % 2 == 0 else ["ms", "k0"]:
            extra = K0 if name == "k0" else MS
            flush_cache(url)
            before = metrics(url)
            p = None
            if spy and name == "ms" and r == rounds - 1:
                pid = subprocess.check_output("pgrep -f 'sglang::scheduler' | head -1", shell=True, text=True).strip()
                p = subprocess.Popen(
                    ["py-spy", "record", "-p", pid, "-r", "200", "-f", "raw", "-o", f"/tmp/spy-{task}.txt", "-d", "30"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                time.sleep(1)
            out = run_batch(url, model_name, prompts, 32, 1, extra)
            if p:
                p.send_signal(__import__("signal").SIGINT)
                p.wait()
            after = metrics(url)
            steps = after[("count", "verify")] - before.get(("count", "verify"), 0)
            ph = {k[1]: (after[k] - before.get(k, 0)) / steps * 1e3 for k in after if k[0] == "sum"}
            fw = {k[1]: after[k] - before.get(k, 0) for k in after if k[0] == "fw"}
            res[name].append(out["tpot_ms"])
            rows.append(
                {
                    "variant": name,
                    "round": r,
                    "tpot_ms": out["tpot_ms"],
                    "steps": steps,
                    "phase_ms_per_step": ph,
                    "target_forwards": fw,
                }
            )
            print(
                name,
                r,
                f"tpot {out['tpot_ms']:.2f}",
                "steps",
                steps,
                {k: round(v, 3) for k, v in ph.items()},
                fw,
                flush=True,
            )
    for n, v in res.items():
        print(n, "median tpot", round(statistics.median(v), 2), [round(x, 2) for x in v])
    out_path = __import__("pathlib").Path(__file__).with_name(f"k0_vs_moe_serve-{task}.json")
    out_path.write_text(
        json.dumps(
            {"task": task, "rows": rows, "median_tpot_ms": {n: statistics.median(v) for n, v in res.items()}}, indent=1
        )
    )
