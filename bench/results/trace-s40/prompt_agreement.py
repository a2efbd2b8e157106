"""Scratch study (fortieth session): does the STANDALONE draft's agreement with the prompt's own next tokens predict its
agreement with the target's greedy output? moe-fine (target) and moe-fine-draft through transformers, float32, N
held-out prompts per task as bench.policies sends them (128 token ids), 32 greedy output tokens. Per prompt: the share
of positions where the draft's argmax is the next token, over the prompt's last 16 / 32 / 64 / 127 positions and over
the output (teacher-forced on the target's output, as a judgement counts; `first4`: the first 4 output tokens, what a
first judgement sees). usage: python bench/results/trace-s40/prompt_agreement.py [N] -> prompt_agreement.json"""

import json
import os
import statistics
import sys

sys.path.insert(0, os.getcwd())

import torch
import transformers

from bench._heldout import prompt_sets
from bench._models import deciding_setup
from bench.policies import as_token_ids

N = int(sys.argv[1]) if len(sys.argv) > 1 else 12
OUT = "bench/results/trace-s40/prompt_agreement.json"
torch.set_num_threads(2)
setup = deciding_setup()
target = transformers.AutoModelForCausalLM.from_pretrained(setup.model, torch_dtype=torch.float32).eval()
draft = transformers.AutoModelForCausalLM.from_pretrained(setup.draft_model, torch_dtype=torch.float32).eval()
prompts = as_token_ids(prompt_sets(N, 600), setup.model, 128)
rows = []
with torch.no_grad():
    for task, ps in prompts.items():
        for i, p in enumerate(ps):
            full = target.generate(torch.tensor([p]), max_new_tokens=32, do_sample=False, pad_token_id=0)
            predicted = draft(full).logits[0].argmax(-1)  # predicted[s] is the draft's guess of token s + 1
            hit = (predicted[:-1] == full[0, 1:]).tolist()
            n = len(p)
            prompt_hits, out_hits = hit[: n - 1], hit[n - 1 :]
            tail = {f"tail{t}": sum(prompt_hits[-t:]) / min(t, len(prompt_hits)) for t in (16, 32, 64, 127)}
            row = dict(
                task=task,
                prompt=i,
                prompt_len=n,
                out=sum(out_hits) / len(out_hits),
                out_after4=sum(out_hits[4:]) / len(out_hits[4:]),
                first4=sum(out_hits[:4]) / 4,
                **tail,
            )
            rows.append(row)
            print({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
with open(OUT, "w") as f:
    json.dump(rows, f, indent=1)
keys = ("out", "out_after4", "first4", "tail16", "tail32", "tail64", "tail127")
for task in prompts:
    r = [x for x in rows if x["task"] == task]
    print(task, {k: round(statistics.mean(x[k] for x in r), 3) for k in keys})
    print(
        task,
        "corr tail64 / out_after4:",
        round(statistics.correlation([x["tail64"] for x in r], [x["out_after4"] for x in r]), 3),
    )
ys = [x["out_after4"] for x in rows]
print("corr tail64 / out_after4, all prompts:", round(statistics.correlation([x["tail64"] for x in rows], ys), 3))
print("corr first4 / out_after4, all prompts:", round(statistics.correlation([x["first4"] for x in rows], ys), 3))
