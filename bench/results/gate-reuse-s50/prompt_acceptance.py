"""Scratch (fiftieth session): does the dense draft's agreement over a prompt's own tokens predict how often its drafts
are accepted on the continuation? If it did, a request could be judged at its first token (the first judgement's
catch-up runs the draft over the prompt anyway) instead of after `judge_after` emitted tokens. moe-fine and its
dense draft in transformers, float32; the bench's held-out prompts (8 per task, 128 tokens at most), 32 greedy
tokens each. Per request: the draft's argmax against the prompt's next token over the prompt's last 32 positions,
the target's argmax against it, draft against target there, and the acceptance that matters (the draft's argmax
against the target's greedy token over the 32 generated positions, what a one-token chain verify accepts).
usage: python bench/results/gate-reuse-s50/prompt_acceptance.py > bench/results/gate-reuse-s50/prompt_acceptance.txt"""

import os
import statistics
import sys

import torch
import transformers

sys.path.insert(0, os.getcwd())
from bench._heldout import prompt_sets  # noqa: E402
from bench.policies import as_token_ids  # noqa: E402

TARGET, DRAFT, WINDOW, NEW = "service/models/assets/moe-fine", "service/models/assets/moe-fine-draft", 32, 32
torch.set_num_threads(2)
prompts = as_token_ids(prompt_sets(8, 400), TARGET, 128)
target = transformers.AutoModelForCausalLM.from_pretrained(TARGET, dtype=torch.float32).eval()
draft = transformers.AutoModelForCausalLM.from_pretrained(DRAFT, dtype=torch.float32).eval()


def agree(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a == b).float().mean().item()


by_task: dict[str, list[tuple[float, ...]]] = {}
with torch.no_grad():
    for task in ("code", "math", "prose"):
        for ids in prompts[task]:
            full = target.generate(torch.tensor([ids]), max_new_tokens=NEW, do_sample=False)[0]
            n = len(ids)
            d, t = draft(full[None]).logits[0].argmax(-1), target(full[None]).logits[0].argmax(-1)
            seen, nxt = slice(n - WINDOW - 1, n - 1), full[n - WINDOW : n]
            row = (agree(d[seen], nxt), agree(t[seen], nxt), agree(d[seen], t[seen]), agree(d[n - 1 : -1], full[n:]))
            by_task.setdefault(task, []).append(row)
            print(task, " ".join(f"{x:.2f}" for x in row), flush=True)
print("columns: draft~prompt target~prompt draft~target-on-prompt | accepted on the output")
for task, rows in by_task.items():
    cols = list(zip(*rows, strict=True))
    print(task, "medians", " ".join(f"{statistics.median(c):.2f}" for c in cols))
