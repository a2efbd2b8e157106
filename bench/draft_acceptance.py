"""Draft acceptance per domain per drafter, measured through the SGLang engine (issue 16 part 2).

For one target (default: the fine-grained bundled model, moe-fine) and each drafter — NGRAM, STANDALONE with the
dense draft, STANDALONE with the INT4 self-draft (built on demand, bench/_models.py) — one engine is started (one at
a time), and held-out prompts of each domain (bench/_heldout.py) are generated greedily one request at a time.
Reported per (drafter, domain): accepted length per verify step, i.e. SGLang's `spec_accept_length` (tokens emitted
per verify step; 1.0 = no draft token accepted, num_draft_tokens = all accepted), pooled over the domain's requests
as sum(completion tokens) / sum(verify steps). The cache (and with it NGRAM's corpus) is flushed between domains so
no domain drafts from another's text. Greedy and batch 1: acceptance, not speed, is measured.

    python -m bench.draft_acceptance            # ~5 min on 2 shared cores
    python -m bench.draft_acceptance --quick    # one prompt per domain, 16 tokens
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import httpx

from bench._cell import flush_cache
from bench._common import out_dir, table, write_json
from bench._heldout import PROMPT_SETS, prompt_sets
from bench._models import DRAFTERS, drafter_speculation, read_checkpoint
from moe_sglang.launch import FINE_MODEL, EngineConfig
from moe_sglang.server import running_engine


def measure(url: str, prompts: list[list[int]], new_tokens: int) -> dict:
    """Greedy generation of each prompt (token ids); pooled accepted length per verify step."""
    tokens = verifies = 0
    per_request = []
    for ids in prompts:
        sampling = {"max_new_tokens": new_tokens, "temperature": 0, "ignore_eos": True}
        body = {"input_ids": ids, "sampling_params": sampling}
        meta = httpx.post(f"{url}/generate", json=body, timeout=600).json()["meta_info"]
        completion = meta["completion_tokens"]
        # SGLang reports the verify count; older builds only the ratio, from which the count follows
        steps = meta.get("spec_verify_ct") or round(completion / meta.get("spec_accept_length", 1.0))
        tokens, verifies = tokens + completion, verifies + steps
        per_request.append(round(completion / max(steps, 1), 3))
    return {
        "accept_length": round(tokens / max(verifies, 1), 3),
        "tokens": tokens,
        "verify_steps": verifies,
        "per_request": per_request,
    }


def tokenized(model: Path, prompts: dict[str, list[str]], max_tokens: int) -> dict[str, list[list[int]]]:
    """Each prompt as at most its last `max_tokens` token ids (characters per token vary by domain; the model's
    context is short)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    return {name: [tokenizer(text).input_ids[-max_tokens:] for text in texts] for name, texts in prompts.items()}


def run(model: Path, drafters: list[str], prompts: dict[str, list[list[int]]], args, folder: Path) -> dict:
    report: dict = {}
    for drafter in drafters:
        spec = drafter_speculation(
            drafter, model, num_steps=args.num_draft_tokens - 1, num_draft_tokens=args.num_draft_tokens
        )
        config = EngineConfig(model_path=str(model), port=0, speculation=spec, threads=args.threads)
        began = time.monotonic()
        with running_engine(config, log_path=folder / f"engine-{drafter}.log") as url:
            domains = {}
            for name, texts in prompts.items():
                flush_cache(url)
                domains[PROMPT_SETS[name]] = measure(url, texts, args.new_tokens)
        report[drafter] = {
            "draft_model": spec.draft_model_path,
            "domains": domains,
            "wall_s": round(time.monotonic() - began, 1),
        }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=FINE_MODEL, help="Mixtral target (default: moe-fine)")
    parser.add_argument("--drafters", default=",".join(DRAFTERS), help=f"comma-separated subset of {DRAFTERS}")
    parser.add_argument("--prompts", type=int, default=6, help="held-out prompts per domain")
    parser.add_argument("--prompt-chars", type=int, default=600, help="characters cut from a held-out document")
    parser.add_argument("--prompt-tokens", type=int, default=128, help="prompt kept as its last N tokens")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--num-draft-tokens", type=int, default=4, help="tokens verified per step (K + 1)")
    parser.add_argument("--threads", type=int, default=1, help="engine threads (1: stable on a shared machine)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 prompt per domain, 16 tokens")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.prompts, args.new_tokens = 1, 16
    drafters = [d.strip() for d in args.drafters.split(",") if d.strip()]
    unknown = set(drafters) - set(DRAFTERS)
    if unknown:
        parser.error(f"unknown drafters {sorted(unknown)}: expected {DRAFTERS}")
    checkpoint = read_checkpoint(args.model)
    sets = prompt_sets(args.prompts, args.prompt_chars, Path("build/model/corpus"))
    prompts = tokenized(args.model, {name: sets[name] for name in PROMPT_SETS}, args.prompt_tokens)
    if args.prompt_tokens + args.new_tokens > checkpoint.context:
        parser.error(f"{args.prompt_tokens} + {args.new_tokens} tokens exceed the model's context {checkpoint.context}")
    folder = out_dir(args.out, "draft_acceptance")
    began = time.monotonic()
    results = run(args.model, drafters, prompts, args, folder)
    payload = {
        "model": args.model.resolve().name,
        "experts": checkpoint.num_experts,
        "top_k": checkpoint.top_k,
        "config": {
            "prompts": args.prompts,
            "prompt_chars": args.prompt_chars,
            "prompt_tokens": args.prompt_tokens,
            "new_tokens": args.new_tokens,
            "num_draft_tokens": args.num_draft_tokens,
            "threads": args.threads,
            "quick": args.quick,
        },
        "drafters": results,
        "wall_s": round(time.monotonic() - began, 1),
    }
    name = "quick" if args.quick else args.model.resolve().name
    path = write_json(folder, name, payload)
    rows = [
        {"drafter": d, **{dom: r["domains"][dom]["accept_length"] for dom in r["domains"]}} for d, r in results.items()
    ]
    print(table(rows, ["drafter", *PROMPT_SETS.values()]))
    print(f"accepted length per verify step (1 = nothing accepted, {args.num_draft_tokens} = all); wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
