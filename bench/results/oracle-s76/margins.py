"""Scratch (76th session): how well the draft's own evidence predicts that the target accepts a draft, over the
chains of chains.json (every draft up to and including each chain's first rejection): acceptance by decile of the
draft's probability p1, of p1 - p2 and of p1 / p2 (p2: its runner-up's); and, for the first draft of each chain, the
AUC of the draft's log(p1 / p2) and of the target's own log-margin when it emitted the root (known before drafting).
usage: PYTHONPATH=. python bench/results/oracle-s76/margins.py hits.json chains.json"""

import json
import math
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from bench._heldout import prompt_sets
from bench._models import deciding_setup
from bench.policies import PROMPT_TOKENS, as_token_ids

hits = json.loads(Path(sys.argv[1]).read_text())
chains = json.loads(Path(sys.argv[2]).read_text())
drafts = [
    (p, q, d < c["accepted"])
    for rows in chains.values()
    for request in rows
    for c in request
    for d, (p, q) in enumerate(zip(c["probs"], c["second"], strict=True))
    if d < c["accepted"] or (d == c["accepted"] < len(c["probs"]))
]
print(f"drafts {len(drafts)}, rejected {sum(1 for x in drafts if not x[2])}")
for name, f in (("p1", lambda p, q: p), ("p1 - p2", lambda p, q: p - q), ("p1 / p2", lambda p, q: p / q)):
    ranked = sorted(drafts, key=lambda x: f(x[0], x[1]))
    n = len(ranked)
    print(name)
    for i in range(10):
        part = ranked[i * n // 10 : (i + 1) * n // 10]
        lo, hi = f(*part[0][:2]), f(*part[-1][:2])
        print(f"  decile {i}: {lo:.3f}-{hi:.3f} accepted {sum(x[2] for x in part) / len(part):.2f}")


def auc(pairs):
    pos, neg = [x for x, y in pairs if y], [x for x, y in pairs if not y]
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


torch.set_num_threads(2)
setup = deciding_setup()
target = AutoModelForCausalLM.from_pretrained(str(setup.model), dtype=torch.float32).eval()
texts = prompt_sets(8, 400)
prompts = as_token_ids({t: texts[t] for t in hits}, setup.model, min(PROMPT_TOKENS, 256 - 32 - 1))
firsts = []
with torch.no_grad():
    for task, rows in hits.items():
        for ids, row, request in zip(prompts[task], rows, chains[task], strict=False):
            ids = row.get("prompt", ids)  # hits.py's own prompts where it kept them
            logprobs = torch.log_softmax(target(input_ids=torch.tensor([ids + row["continuation"]])).logits[0], -1)
            for j, c in enumerate(request):
                top = logprobs[len(ids) + j - 1].topk(2).values
                draft = math.log(c["probs"][0] / c["second"][0])
                firsts.append((float(top[0] - top[1]), draft, c["accepted"] > 0))
print(f"first drafts {len(firsts)}, rejected {sum(1 for x in firsts if not x[2])}: AUC (accepted above rejected)")
print(f"  draft log(p1 / p2) {auc([(d, y) for _, d, y in firsts]):.3f}")
print(f"  target's log-margin at the root {auc([(t, y) for t, _, y in firsts]):.3f}")
print(f"  their sum {auc([(t + d, y) for t, d, y in firsts]):.3f}")
