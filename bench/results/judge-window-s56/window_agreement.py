"""Scratch (fifty-sixth session): could a first judgement run the dense draft over a window of the context instead of
the whole context (the catch-up over a ~130-token prompt is most of a judgement's cost: ~6 ms against a 4.6 ms plain
step of moe-fine x48 at batch 1 on a 2-core AMD EPYC family 26) and still tell the requests whose drafts pay?
moe-fine and its dense draft in transformers, float32; the bench's held-out prompts (8 per task, 128 tokens at most),
32 greedy tokens each. Per request: the share of the first JUDGED output positions where the draft's argmax, given
the whole context or only the last W tokens before the predicted one, equals the target's greedy token, against the
same share over all 32 output positions (what verifies would meet). usage (from the repository root): .venv/bin/python
bench/results/judge-window-s56/window_agreement.py > bench/results/judge-window-s56/window_agreement.txt"""

import os
import statistics
import sys

import torch
import transformers

sys.path.insert(0, os.getcwd())
from bench._heldout import prompt_sets  # noqa: E402
from bench.policies import as_token_ids  # noqa: E402

TARGET, DRAFT, NEW, JUDGED, WINDOWS = (
    "service/models/assets/moe-fine",
    "service/models/assets/moe-fine-draft",
    32,
    4,
    (8, 16, 32, 64),
)
torch.set_num_threads(2)
prompts = as_token_ids(prompt_sets(8, 400), TARGET, 128)
target = transformers.AutoModelForCausalLM.from_pretrained(TARGET, dtype=torch.float32).eval()
draft = transformers.AutoModelForCausalLM.from_pretrained(DRAFT, dtype=torch.float32).eval()


def windowed(full: torch.Tensor, pos: int, width: int) -> int:
    """The draft's argmax for the token at `pos` given only the `width` tokens before it."""
    ctx = full[max(pos - width, 0) : pos]
    return int(draft(ctx[None]).logits[0, -1].argmax())


rows: dict[str, list[list[float]]] = {}
with torch.no_grad():
    for task in ("code", "math", "prose"):
        for ids in prompts[task]:
            full = target.generate(torch.tensor([ids]), max_new_tokens=NEW, do_sample=False)[0]
            n = len(ids)
            whole = draft(full[None]).logits[0].argmax(-1)  # whole[p - 1] predicts the token at p
            # judged positions: output tokens 2..JUDGED + 1 (the first output token has no chain: draft_model.py)
            judged = range(n + 1, n + 1 + JUDGED)
            row = [statistics.mean(float(whole[p - 1] == full[p]) for p in judged)]
            for width in WINDOWS:
                row.append(statistics.mean(float(windowed(full, p, width) == full[p]) for p in judged))
            row.append(statistics.mean(float(whole[p - 1] == full[p]) for p in range(n + 1, len(full))))
            rows.setdefault(task, []).append(row)
            print(task, " ".join(f"{v:.2f}" for v in row), flush=True)
head = ["whole"] + [f"last{w}" for w in WINDOWS]
print(f"columns: agreement over output tokens 2..{JUDGED + 1} given {', '.join(head)} | over all {NEW - 1}")
for task, got in rows.items():
    print(task, "medians", " ".join(f"{statistics.median(c):.2f}" for c in zip(*got, strict=True)))
