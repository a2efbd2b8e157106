"""Evaluate a checkpoint per domain: held-out loss vs a unigram baseline, sample completions, and prompt-lookup
acceptance under greedy decoding (issue 3: acceptance must differ across domains for speculation policies to matter).

The unigram baseline for a domain is that domain's add-one-smoothed token frequencies on its *train* split,
scored on the same held-out targets as the model.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from service.models.corpus import DOMAINS
from service.models.prompt_lookup import speculative_greedy

SAMPLE_PROMPTS = {
    "python": ["def fibonacci(n):\n", "import os\n\n\nclass "],
    "prose": ["This program is free software; you can redistribute it", "NAME\n       grep - "],
    "arithmetic": [
        "Compute (12 + 7) * 3.\n",
        "Ana has 23 apples and gets 15 more. How many apples does Ana have now?\n",
    ],
}


@dataclass(frozen=True)
class EvalConfig:
    windows: int = 32  # held-out windows per domain for the loss
    seq_len: int = 256  # tokens per loss window
    prompts: int = 10  # held-out prompts per domain for acceptance
    prompt_tokens: int = 128  # prompt length for acceptance
    new_tokens: int = 64  # greedy tokens generated per prompt
    draft_tokens: int = 3  # prompt-lookup proposal length
    sample_tokens: int = 48  # tokens per sample completion
    threads: int = 1  # torch threads


def windows(ids: np.ndarray, count: int, length: int) -> torch.Tensor:
    """count evenly spaced [length] windows of ids -> [count, length] int64."""
    if ids.size < length:
        raise ValueError(f"{ids.size} tokens is shorter than one window of {length}")
    starts = np.linspace(0, ids.size - length, count).astype(np.int64)
    return torch.from_numpy(np.stack([ids[s : s + length].astype(np.int64) for s in starts]))


@torch.no_grad()
def model_loss(model, batch: torch.Tensor) -> float:
    """Mean next-token cross-entropy (nats) over [W, S] windows."""
    total, count = 0.0, 0
    for row in batch.split(8):
        logits = model(input_ids=row[:, :-1]).logits.float()
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), row[:, 1:].reshape(-1), reduction="sum"
        )
        total, count = total + float(loss), count + row[:, 1:].numel()
    return total / count


def unigram_loss(train_ids: np.ndarray, batch: torch.Tensor, vocab_size: int) -> float:
    counts = np.bincount(np.asarray(train_ids, dtype=np.int64), minlength=vocab_size).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(-logp[batch[:, 1:].numpy()].mean())


def _argmax_fn(model):
    @torch.no_grad()
    def next_tokens(ids: list[int]) -> list[int]:
        return model(input_ids=torch.tensor([ids])).logits[0].argmax(-1).tolist()

    return next_tokens


def acceptance(model, heldout: np.ndarray, config: EvalConfig) -> dict:
    prompts = windows(heldout, config.prompts, config.prompt_tokens)
    proposed = accepted = forwards = generated = 0
    for prompt in prompts.tolist():
        result = speculative_greedy(_argmax_fn(model), prompt, config.new_tokens, config.draft_tokens)
        proposed, accepted = proposed + result.proposed, accepted + result.accepted
        forwards, generated = forwards + result.forwards, generated + len(result.tokens)
    return {
        "accept_rate": round(accepted / proposed, 4) if proposed else 0.0,
        "tokens_per_forward": round(generated / forwards, 4),
        "proposed": proposed,
        "accepted": accepted,
        "prompts": len(prompts),
    }


@torch.no_grad()
def greedy_matches_generate(model, tokenizer, prompt: str, new_tokens: int) -> bool:
    """Prompt-lookup decoding reproduces transformers' own greedy generate (the losslessness check)."""
    ids = tokenizer(prompt).input_ids
    reference = model.generate(
        torch.tensor([ids]), max_new_tokens=new_tokens, do_sample=False, min_new_tokens=new_tokens
    )
    ours = speculative_greedy(_argmax_fn(model), ids, new_tokens).tokens
    return reference[0, len(ids) :].tolist() == ours


@torch.no_grad()
def samples(model, tokenizer, prompts: list[str], new_tokens: int) -> list[dict]:
    out = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        generated = model.generate(ids, max_new_tokens=new_tokens, do_sample=False)
        out.append({"prompt": prompt, "completion": tokenizer.decode(generated[0, ids.shape[1] :])})
    return out


def run_evaluation(model_dir: Path, work: Path, config: EvalConfig) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(config.threads)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    report: dict = {"model": str(model_dir), "config": config.__dict__, "domains": {}}
    began = time.monotonic()
    for domain in DOMAINS:
        heldout = np.load(work / "tokens" / f"{domain}.heldout.npy")
        batch = windows(heldout, config.windows, config.seq_len + 1)
        train_ids = np.load(work / "tokens" / f"{domain}.train.npy", mmap_mode="r")
        report["domains"][domain] = {
            "heldout_loss": round(model_loss(model, batch), 4),
            "unigram_loss": round(unigram_loss(train_ids, batch, model.config.vocab_size), 4),
            "prompt_lookup": acceptance(model, heldout, config),
            "samples": samples(model, tokenizer, SAMPLE_PROMPTS[domain], config.sample_tokens),
            "lossless": greedy_matches_generate(model, tokenizer, SAMPLE_PROMPTS[domain][0], 24),
        }
    report["wall_s"] = round(time.monotonic() - began, 1)
    report["summary"] = {
        d: {k: v for k, v in r.items() if k in ("heldout_loss", "unigram_loss", "lossless")}
        | {
            "accept_rate": r["prompt_lookup"]["accept_rate"],
            "tokens_per_forward": r["prompt_lookup"]["tokens_per_forward"],
        }
        for d, r in report["domains"].items()
    }
    return report
