"""Scratch (76th session): on the deciding STANDALONE engine, static K = 4 with the draft stop at 1.1 emits exactly
what the same engine emits at K = 0, for run.py's nine prompts (32 greedy tokens), and stopped part way down chains.
usage: PYTHONPATH=. python bench/results/oracle-s76/equal.py OUT_DIR"""

import dataclasses
import gzip
import json
import sys
from pathlib import Path

import httpx

from bench._heldout import prompt_sets
from bench._models import bench_engine, deciding_setup, inflated
from bench.policies import MAX_K, PROMPT_TOKENS, as_token_ids, drafter_settings
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
setup = deciding_setup()
model = inflated(setup.model, Path("build/bench-models/moe-fine-x48"), setup.inflate)
spec = SpeculationConfig(
    "standalone", draft_model_path=str(setup.draft_model), num_steps=MAX_K, topk=1, num_draft_tokens=MAX_K + 1
)
params = json.dumps({"static": {"k": MAX_K, "draft_stop": 1.1}})
settings = dataclasses.replace(drafter_settings(), policy_params_json=params, step_log=str(out / "steps.jsonl"))
texts = prompt_sets(8, 400)
prompts = as_token_ids({t: texts[t] for t in ("code", "math", "prose")}, model, min(PROMPT_TOKENS, 256 - 32 - 1))


def generate(url, ids, max_k):
    body = {
        "input_ids": ids,
        "sampling_params": {"max_new_tokens": 32, "temperature": 0.0, "ignore_eos": True,
                            "custom_params": {"moe_serve": {"policy": "static", "max_k": max_k}}},
    }  # fmt: skip
    return httpx.post(f"{url}/generate", json=body, timeout=300).json()["output_ids"]


with running_engine(bench_engine(model, spec, 1, settings), out / "engine.log") as url:
    same = [generate(url, p, MAX_K) == generate(url, p, 0) for t in prompts for p in prompts[t][:3]]
steps = [json.loads(x) for x in (out / "steps.jsonl").read_text().splitlines()]
partial = sum(1 for s in steps if not s["plain"] and 0 < s["verified"][0] < s["k"][0])
print(f"outputs equal to K = 0's: {sum(same)} of {len(same)}; speculative steps stopped part way: {partial}")
with gzip.open(out / "steps.jsonl.gz", "wt") as f:
    f.write("\n".join(json.dumps(s) for s in steps))
(out / "steps.jsonl").unlink()
