"""Scratch (74th session): does the STANDALONE draft's agreement with the target over a request's prompt tell how often
its drafts will be accepted over the output? Offline, transformers, moe-fine and its dense draft (float32, greedy; the
inflated copy the benches decode is function-preserving), the bench.policies prompts (prompt_sets(COUNT, 400), ids cut
as the bench cuts them). Per prompt: the target's 32 greedy output tokens; over the prompt's last TAIL positions the
share where the draft's top-1 next token equals the target's top-1 (`prompt_agree`) and equals the prompt's own next
token (`prompt_next`); over the output, the share where the draft's top-1 (given the true prefix) equals the target's
token: the first-draft acceptance a verify would see (`output_p1`), also over the output's first 8 tokens (`first8`).
usage: PYTHONPATH=. python bench/results/prompt-signal-s74/agreement.py [COUNT] [TAIL] > out.json"""

import json
import sys

import torch
import transformers

from bench._heldout import prompt_sets
from bench.policies import PROMPT_TOKENS, as_token_ids

ASSETS = "service/models/assets"
COUNT = int(sys.argv[1]) if len(sys.argv) > 1 else 8
TAIL = int(sys.argv[2]) if len(sys.argv) > 2 else 32
TOKENS = 32

torch.manual_seed(0)
target = transformers.AutoModelForCausalLM.from_pretrained(f"{ASSETS}/moe-fine", torch_dtype=torch.float32).eval()
draft = transformers.AutoModelForCausalLM.from_pretrained(f"{ASSETS}/moe-fine-draft", torch_dtype=torch.float32).eval()
context = target.config.max_position_embeddings
texts = prompt_sets(COUNT, 400)
ids = as_token_ids(
    {t: texts[t] for t in ("code", "math", "prose")}, f"{ASSETS}/moe-fine", min(PROMPT_TOKENS, context - TOKENS - 1)
)
rows = []
with torch.no_grad():
    for task, prompts in ids.items():
        for i, prompt in enumerate(prompts):
            x = torch.tensor([prompt])
            out = target.generate(x, max_new_tokens=TOKENS, do_sample=False, pad_token_id=0)[0]
            n = len(prompt)
            full = out.unsqueeze(0)
            t_top = target(full).logits[0].argmax(-1)  # top-1 after each position
            d_top = draft(full).logits[0].argmax(-1)
            tail = range(max(n - 1 - TAIL, 0), n - 1)  # predictions of prompt tokens (position j predicts j + 1)
            outs = range(n - 1, len(out) - 1)  # predictions of output tokens
            agree = sum(int(d_top[j] == t_top[j]) for j in tail) / len(tail)
            nxt = sum(int(d_top[j] == out[j + 1]) for j in tail) / len(tail)
            p1 = sum(int(d_top[j] == out[j + 1]) for j in outs) / len(outs)
            first8 = sum(int(d_top[j] == out[j + 1]) for j in list(outs)[:8]) / 8
            rows.append(
                {
                    "task": task,
                    "i": i,
                    "prompt_tokens": n,
                    "prompt_agree": agree,
                    "prompt_next": nxt,
                    "output_p1": p1,
                    "first8": first8,
                }
            )
            print(json.dumps(rows[-1]), file=sys.stderr)
print(json.dumps({"count": COUNT, "tail": TAIL, "tokens": TOKENS, "rows": rows}, indent=1))
