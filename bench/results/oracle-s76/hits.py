"""Scratch (76th session): for run.py's prompts (bench.policies' STANDALONE batch-1 cells), the target's 32 greedy
tokens (transformers, float32, the vocabulary whole: the engine's ignore_eos does not mask the end token) and, at each
output root j = 0..30, whether the dense draft's greedy prediction after tokens [0, P + j] equals the target's token
P + j + 1: a chain drafted at root j is accepted for the run of hits from j (a greedy chain verify; the draft's
context is the target's tokens as long as its drafts are accepted).
With COUNT FIRST LAST: prompts FIRST..LAST-1 of prompt_sets(COUNT, 400) instead (the bench's: 8 0 3); each row keeps
its prompt's token ids.
usage: PYTHONPATH=. python bench/results/oracle-s76/hits.py OUT.json [COUNT FIRST LAST]"""

import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from bench._heldout import prompt_sets
from bench._models import deciding_setup
from bench.policies import PROMPT_TOKENS, as_token_ids

TOKENS = 32
torch.set_num_threads(2)
setup = deciding_setup()
target = AutoModelForCausalLM.from_pretrained(str(setup.model), dtype=torch.float32).eval()
draft = AutoModelForCausalLM.from_pretrained(str(setup.draft_model), dtype=torch.float32).eval()
count, first, last = (int(x) for x in sys.argv[2:5]) if len(sys.argv) > 4 else (8, 0, 3)
texts = prompt_sets(count, 400)
prompts = as_token_ids(
    {t: texts[t] for t in ("code", "math", "prose")}, setup.model, min(PROMPT_TOKENS, 256 - TOKENS - 1)
)


@torch.no_grad()
def greedy(ids: list[int]) -> list[int]:
    out, past, x = [], None, torch.tensor([ids])
    for _ in range(TOKENS):
        res = target(input_ids=x, past_key_values=past, use_cache=True)
        past = res.past_key_values
        out.append(int(res.logits[0, -1].argmax()))
        x = torch.tensor([[out[-1]]])
    return out


result = {}
with torch.no_grad():
    for task, rows in prompts.items():
        result[task] = []
        for ids in rows[first:last]:
            cont = greedy(ids)
            pred = draft(input_ids=torch.tensor([ids + cont])).logits[0].argmax(-1).tolist()
            hits = [pred[len(ids) + j] == cont[j + 1] for j in range(TOKENS - 1)]
            result[task].append({"prompt_tokens": len(ids), "prompt": ids, "continuation": cont, "hits": hits})
            print(task, len(ids), "".join("1" if h else "." for h in hits), flush=True)
Path(sys.argv[1]).write_text(json.dumps(result, indent=1))
