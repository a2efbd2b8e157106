"""MoE-Spec's expert budget B in verification, truncation vs substitution: verify time saved against greedy token
agreement and held-out loss, B swept from top_k to E.

Measured in-process with transformers' Mixtral (fp32) and the torch reference budget functions
(service/kernels/moe_ref.py via bench/_routing.py), not through the engine: the engine applies the same functions
(moe_sglang/expert_budget.py) but cannot report a loss. A verify step is emulated as one forward of K+1 held-out
tokens after a cached prefix (all drafts correct, as teacher forcing): its time (best of repeats; on the bundled
model and its inflated, memory-bound variant), its argmax at each position against the unbudgeted forward's (greedy
agreement, i.e. would verification accept the same token), and the cross-entropy of the true next tokens (held-out
loss, nats/token) on the bundled model (inflation preserves the function, so quality is the same on both).

    python -m bench.budget [--model PATH] [--inflate N] [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from bench._common import figure, out_dir, save_figure, table, write_json
from bench._heldout import PROMPT_SETS, heldout_documents
from bench._models import MoeCheckpoint, add_setup_arguments, read_checkpoint, setup_from_args, timed_model
from bench._routing import RoutingProbe, probed_routers

MODES = ("truncation", "substitution")
VERIFY_TOKENS = 4  # K + 1 with K = 3, the engine's NGRAM depth


def windows(ckpt: MoeCheckpoint, count: int, prefix: int) -> list[torch.Tensor]:
    """Token windows of prefix + 2·VERIFY_TOKENS from held-out documents of every domain."""
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(ckpt.path)
    need = prefix + 2 * VERIFY_TOKENS
    out = []
    for domain in PROMPT_SETS.values():
        for text in heldout_documents(domain, count):
            ids = tokenizer(text)["input_ids"]
            if len(ids) >= need:
                out.append(torch.tensor(ids[:need]))
    if not out:
        raise RuntimeError(f"no held-out text of {need} tokens")
    return out


def verify_forward(model, probe: RoutingProbe, ids: torch.Tensor, prefix: int) -> tuple[torch.Tensor, float]:
    """Logits [VERIFY_TOKENS, V] of a verify forward after a freshly cached prefix, and its time in seconds. The
    prefix is prefilled without a budget (MoE-Spec budgets verification only); the probe then sees only the verify."""
    budget, probe.budget = probe.budget, None
    with torch.no_grad():
        cache = model(ids[None, :prefix], use_cache=True).past_key_values
        probe.budget = budget
        probe.reset()
        chunk = ids[None, prefix : prefix + VERIFY_TOKENS]
        positions = torch.arange(prefix, prefix + VERIFY_TOKENS)[None]
        start = time.perf_counter()
        logits = model(chunk, past_key_values=cache, position_ids=positions, use_cache=True).logits[0]
        return logits, time.perf_counter() - start


def sweep(ckpt: MoeCheckpoint, wins: list[torch.Tensor], prefix: int, repeats: int, quality: bool) -> list[dict]:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(ckpt.path, dtype=torch.float32).eval()
    budgets = [None, *range(ckpt.num_experts - 1, ckpt.top_k - 1, -1)]
    rows = []
    with probed_routers(model) as probe:
        verify_forward(model, probe, wins[0], prefix)  # warm-up
        reference = [verify_forward(model, probe, ids, prefix)[0].argmax(-1) for ids in wins]
        for mode in MODES:
            for budget in budgets:
                if budget is None and mode != MODES[0]:
                    continue
                probe.budget, probe.mode = budget, mode
                times, agree, losses, unique = [], [], [], []
                for ids, ref in zip(wins, reference, strict=True):
                    best = float("inf")
                    for _ in range(repeats):
                        logits, elapsed = verify_forward(model, probe, ids, prefix)
                        best = min(best, elapsed)
                    times.append(best)
                    unique.append(sum(probe.unique) / len(probe.unique))
                    agree.append(float((logits.argmax(-1) == ref).float().mean()))
                    target = ids[prefix + 1 : prefix + 1 + VERIFY_TOKENS]
                    losses.append(float(torch.nn.functional.cross_entropy(logits, target)))
                rows.append(
                    {
                        "model": ckpt.path.name,
                        "mode": "none" if budget is None else mode,
                        "budget": budget or ckpt.num_experts,
                        "unique_per_layer": statistics.mean(unique),
                        "verify_ms": statistics.mean(times) * 1e3,
                        "greedy_agreement": statistics.mean(agree) if quality else None,
                        "heldout_loss": statistics.mean(losses) if quality else None,
                    }
                )
        probe.budget = None
    base = rows[0]["verify_ms"]
    for r in rows:
        r["time_saved"] = 1.0 - r["verify_ms"] / base
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_setup_arguments(parser)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="smoke run: few windows, one repeat")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    folder = out_dir(args.out, "budget")
    torch.set_num_threads(args.threads)
    per_domain, repeats, prefix = (1, 1, 16) if args.quick else (6, 3, 64)
    setup = setup_from_args(args)
    source = read_checkpoint(setup.model)
    wins = windows(source, per_domain, prefix)
    rows = sweep(source, wins, prefix, repeats, quality=True)
    if setup.inflate > 1:  # the deciding setup's memory-bound copy, cached under .cache/inflated
        rows += sweep(read_checkpoint(timed_model(setup)), wins, prefix, repeats, quality=False)
    print(
        table(
            rows,
            [
                "model",
                "mode",
                "budget",
                "unique_per_layer",
                "verify_ms",
                "time_saved",
                "greedy_agreement",
                "heldout_loss",
            ],
        )
    )
    path = write_json(
        folder,
        "budget",
        {
            "setup": {"model": str(setup.model), "inflate": setup.inflate},
            "verify_tokens": VERIFY_TOKENS,
            "windows": len(wins),
            "threads": args.threads,
            "rows": rows,
        },
    )
    _plot(rows, folder / "budget.png")
    print(f"wrote {path}")
    return 0


def _plot(rows: list[dict], path: Path) -> None:
    fig, axes = figure(3, (13, 3.6))
    quality = [r for r in rows if r["greedy_agreement"] is not None]
    for mode in MODES:
        pts = sorted((r for r in quality if r["mode"] in (mode, "none")), key=lambda r: r["budget"])
        axes[0].plot([r["budget"] for r in pts], [r["greedy_agreement"] for r in pts], "o-", label=mode)
        axes[1].plot([r["budget"] for r in pts], [r["heldout_loss"] for r in pts], "o-", label=mode)
        for model in dict.fromkeys(r["model"] for r in rows):
            timed = sorted(
                (r for r in rows if r["model"] == model and r["mode"] in (mode, "none")), key=lambda r: r["budget"]
            )
            axes[2].plot([r["budget"] for r in timed], [r["time_saved"] for r in timed], "o-", label=f"{model} {mode}")
    for ax, label in zip(axes, ("greedy agreement", "held-out loss (nats/token)", "verify time saved"), strict=True):
        ax.set_xlabel("expert budget B per layer")
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    save_figure(fig, path, f"Expert budget in a {VERIFY_TOKENS}-token verify: truncation vs substitution")


if __name__ == "__main__":
    raise SystemExit(main())
