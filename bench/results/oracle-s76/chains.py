"""Scratch (76th session): at each output root j of hits.json's requests, the dense draft's own greedy chain of 4
drafts after the target's tokens [0, P + j] (transformers, float32) with the draft's probability of each drafted
token and of its runner-up, and how many of them the target's tokens accept.
usage: PYTHONPATH=. python bench/results/oracle-s76/chains.py hits.json OUT.json"""

import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from bench._heldout import prompt_sets
from bench._models import deciding_setup
from bench.policies import PROMPT_TOKENS, as_token_ids

TOKENS, DEPTH = 32, 4
torch.set_num_threads(2)
setup = deciding_setup()
draft = AutoModelForCausalLM.from_pretrained(str(setup.draft_model), dtype=torch.float32).eval()
texts = prompt_sets(8, 400)
prompts = as_token_ids(
    {t: texts[t] for t in ("code", "math", "prose")}, setup.model, min(PROMPT_TOKENS, 256 - TOKENS - 1)
)
hits = json.loads(Path(sys.argv[1]).read_text())
result = {}
with torch.no_grad():
    for task, rows in hits.items():
        result[task] = []
        for ids, row in zip(prompts[task], rows, strict=False):
            ids = row.get("prompt", ids)  # hits.py's own prompts where it kept them
            cont, chains = row["continuation"], []
            for j in range(TOKENS - 1):
                x, drafted, probs, seconds = ids + cont[: j + 1], [], [], []
                for _ in range(DEPTH):
                    p = torch.softmax(draft(input_ids=torch.tensor([x])).logits[0, -1], -1)
                    top = p.topk(2)
                    t = int(top.indices[0])
                    drafted.append(t)
                    probs.append(round(float(top.values[0]), 4))
                    seconds.append(round(float(top.values[1]), 4))
                    x = x + [t]
                truth = cont[j + 1 : j + 1 + DEPTH]
                accepted = next((i for i, (a, b) in enumerate(zip(drafted, truth, strict=False)) if a != b), len(truth))
                chains.append({"probs": probs, "second": seconds, "accepted": accepted})
            result[task].append(chains)
            print(task, [c["accepted"] for c in chains], flush=True)
Path(sys.argv[2]).write_text(json.dumps(result))
