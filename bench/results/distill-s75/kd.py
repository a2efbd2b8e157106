"""Distil the dense STANDALONE draft toward moe-fine (scratch, seventy-fifth session).

Loss: forward KL(target || draft) over every position of train-split windows (data.py's arrays), the target's
logits computed on the fly in float32 without gradients (service.models.train.distill_loss; kd-a.json and
kd-b-mix05.json were run with a copy of it here, the same formula). Evaluation: target greedy continuations of held-out bench
prompts (bench._heldout.prompt_sets, 400 characters, the first 128 tokens), the draft teacher-forced over them:
top-1 agreement per position and the tokens per verify step a K-token greedy draft chain would get.

usage (from the repository root, PYTHONPATH=bench/results/distill-s75:.): kd.py TOKENS_DIR OUT_DIR STEPS [LR]
[EVAL_EVERY] [MIX]   (MIX: share of each batch drawn from target
greedy continuations of train windows instead of corpus text, 0 by default)
"""

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM

from bench._heldout import PROMPT_SETS, prompt_sets
from service.models.batches import TokenData
from service.models.tokenizer import load_tokenizer
from service.models.train import TrainConfig, _optimizer, distill_loss, lr_at

TARGET = Path("service/models/assets/moe-fine")
DRAFT = Path("service/models/assets/moe-fine-draft")
PROMPTS, PROMPT_TOKENS, NEW_TOKENS = 16, 128, 32


def load(path: Path):
    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()


@torch.no_grad()
def greedy(model, ids: list[int], new: int) -> list[int]:
    out = model.generate(torch.tensor([ids]), max_new_tokens=new, do_sample=False, min_new_tokens=new)
    return out[0, len(ids) :].tolist()


def eval_set(target) -> dict[str, list[tuple[list[int], list[int]]]]:
    tokenizer = load_tokenizer(TARGET)
    texts = prompt_sets(PROMPTS, 400)
    return {
        task: [
            (p, greedy(target, p, NEW_TOKENS)) for p in (tokenizer.encode(t).ids[:PROMPT_TOKENS] for t in texts[task])
        ]
        for task in PROMPT_SETS
    }


def tokens_per_step(agree: list[bool], k: int) -> float:
    pos, steps = 0, 0
    while pos < len(agree):
        run = 0
        while run < k and pos + run < len(agree) and agree[pos + run]:
            run += 1
        pos += run + 1
        steps += 1
    return len(agree) / steps


@torch.no_grad()
def evaluate(draft, sets) -> dict:
    result = {}
    for task, pairs in sets.items():
        agrees = []
        for prompt, cont in pairs:
            ids = torch.tensor([prompt + cont])
            pred = draft(input_ids=ids).logits[0, len(prompt) - 1 : -1].argmax(-1).tolist()
            agrees.append([a == b for a, b in zip(pred, cont, strict=True)])
        flat = [a for row in agrees for a in row]
        result[task] = {
            "agree": round(sum(flat) / len(flat), 3),
            **{f"tps_k{k}": round(float(np.mean([tokens_per_step(r, k) for r in agrees])), 3) for k in (1, 2, 3, 4)},
        }
    return result


@torch.no_grad()
def generated_pool(target, data: TokenData, count: int) -> torch.Tensor:
    """`count` rows of 257 tokens: a 129-token train window and the target's 128 greedy tokens after it (the text a
    draft meets at serving time: the target's own continuations, loops included)."""
    rows = []
    for index in range(0, count, 16):
        prompts = data.batch(7, index, 16, 128)
        out = target.generate(
            prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=128, min_new_tokens=128, do_sample=False
        )
        rows.append(out[:, :257])
    return torch.cat(rows)[:count]


def main() -> None:
    tokens_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    steps = int(sys.argv[3])
    lr = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-3
    every = int(sys.argv[5]) if len(sys.argv) > 5 else 100
    torch.set_num_threads(2)
    out.mkdir(parents=True, exist_ok=True)
    target, draft = load(TARGET), load(DRAFT)
    sets = eval_set(target)
    arrays = {d: np.load(tokens_dir / f"{d}.train.npy", mmap_mode="r") for d in ("python", "prose", "arithmetic")}
    data = TokenData.from_arrays(arrays)
    config = TrainConfig(steps=steps, batch_size=8, seq_len=256, lr=lr, warmup=10, seed=1)
    optimizer = _optimizer(draft, config)
    began = time.monotonic()
    mix = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
    pool = generated_pool(target, data, int(round(mix * config.batch_size)) * steps // 4) if mix > 0 else None
    if pool is not None:
        print(json.dumps({"pool": list(pool.shape), "wall_s": round(time.monotonic() - began, 1)}), flush=True)
    log = []
    record = {"step": 0, "eval": evaluate(draft, sets), "wall_s": 0.0}
    print(json.dumps(record), flush=True)
    log.append(record)
    for step in range(steps):
        draft.train()
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, config)
        batch = data.batch(config.seed, step, config.batch_size, config.seq_len)
        if pool is not None:
            rows = int(round(mix * config.batch_size))
            picks = np.random.default_rng([config.seed, step, 1]).choice(len(pool), size=rows, replace=False)
            batch = torch.cat([batch[rows:], pool[torch.from_numpy(picks)]])
        loss = distill_loss(draft, target, batch)[0]  # the loss the product's `model train --distill-from` uses
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), config.grad_clip)
        optimizer.step()
        if (step + 1) % 10 == 0:
            print(
                json.dumps(
                    {"step": step + 1, "kl": round(loss.item(), 4), "wall_s": round(time.monotonic() - began, 1)}
                ),
                flush=True,
            )
        if (step + 1) % every == 0 or step + 1 == steps:
            draft.eval()
            record = {
                "step": step + 1,
                "kl": round(loss.item(), 4),
                "eval": evaluate(draft, sets),
                "wall_s": round(time.monotonic() - began, 1),
            }
            print(json.dumps(record), flush=True)
            log.append(record)
            draft.save_pretrained(str(out / "draft"), safe_serialization=True)
    (out / "log.json").write_text(json.dumps(log, indent=1))


if __name__ == "__main__":
    main()
