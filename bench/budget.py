"""MoE-Spec's expert budget B in verification, truncation vs substitution: verify time saved against greedy token
agreement and held-out loss, B swept from top_k to E (`budget_sweep`).

Measured in-process with transformers' Mixtral (fp32) and the torch reference budget functions
(service/kernels/moe_ref.py via bench/_routing.py), not through the engine: the engine applies the same functions
(moe_sglang/expert_budget.py) but cannot report a loss. The expert products are the CPU engine's (`--experts
engine`, the default; a truncated slot then points at an in-budget expert with weight 0, as the engine's does) or
transformers' own (`--experts transformers`, which skips a truncated slot; the runs before 2026-11-26). A verify
step is emulated as one forward of K+1 held-out tokens after a cached prefix (all drafts correct, as teacher
forcing): its time (best of repeats; on the bundled model and its inflated, memory-bound variant), its argmax at each
position against the unbudgeted forward's (greedy agreement, i.e. would verification accept the same token), and the
cross-entropy of the true next tokens (held-out loss, nats/token) on the bundled model (inflation preserves the
function, so quality is the same on both).

At batch b (`--batches`, default 1 and 8) b windows verify together in one forward of b x VERIFY_TOKENS tokens, and
the budget keeps the top-B experts by router mass over all of them, as the engine applies it to a batch's verify
forward: one request's 4-token verify touches ~10 of moe-fine's 32 experts per layer, so B = E/2 binds only when
requests verify together (MoE-Spec budgets batched verification). Each group's prefix is prefilled once without a
budget and the cache cropped back after every verify forward.

    python -m bench.budget [--model PATH] [--inflate N] [--batches 1,8] [--experts engine|transformers] [--quick]
                           [--out DIR]
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
from bench._routing import EXPERTS, RoutingProbe, expert_products, probed_routers

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


def groups(wins: list[torch.Tensor], batch: int) -> list[torch.Tensor]:
    """Consecutive windows stacked b at a time ([b, prefix + 2·VERIFY_TOKENS]); a remainder short of b is left out."""
    if batch < 1 or batch > len(wins):
        raise ValueError(f"batch {batch}: between 1 and the {len(wins)} held-out windows")
    return [torch.stack(wins[i : i + batch]) for i in range(0, len(wins) - batch + 1, batch)]


class CachedGroup:
    """A group of windows with their prefixes cached (prefilled without a budget: MoE-Spec budgets verification
    only); `verify` runs the next VERIFY_TOKENS of every window in one forward and crops the cache back."""

    def __init__(self, model, probe: RoutingProbe, ids: torch.Tensor, prefix: int) -> None:
        self.model, self.probe, self.ids, self.prefix = model, probe, ids, prefix
        budget, probe.budget = probe.budget, None
        try:
            with torch.no_grad():
                self.cache = model(ids[:, :prefix], use_cache=True).past_key_values
        finally:
            probe.budget = budget

    def verify(self) -> tuple[torch.Tensor, float]:
        """Logits [b·VERIFY_TOKENS, V] (window-major) and the forward's time in seconds; the probe sees only it."""
        self.probe.reset()
        chunk = self.ids[:, self.prefix : self.prefix + VERIFY_TOKENS]
        positions = torch.arange(self.prefix, self.prefix + VERIFY_TOKENS).expand(chunk.shape[0], -1)
        with torch.no_grad():
            start = time.perf_counter()
            logits = self.model(chunk, past_key_values=self.cache, position_ids=positions, use_cache=True).logits
            elapsed = time.perf_counter() - start
        self.cache.crop(-VERIFY_TOKENS)
        return logits.reshape(-1, logits.shape[-1]), elapsed

    def targets(self) -> torch.Tensor:
        """The true next token of every verify position, window-major like `verify`'s logits."""
        return self.ids[:, self.prefix + 1 : self.prefix + 1 + VERIFY_TOKENS].reshape(-1)


# Budgets per sweep: about this many points between E and top_k (every budget where there are fewer). A verify per
# window per budget is the bench's time: every budget of moe-fine (28 per mode) took 423 s on a 2-core Intel Xeon
# (2026-11-29), every other one (15) 252 s in the bench.run_all after it.
SWEEP_POINTS = 14


def budget_sweep(num_experts: int, top_k: int) -> list[int]:
    """The budgets B swept, descending: E - 1, E / 2 (MoE-Spec's and the goal's point) and top_k always, between them
    every `step`-th budget, step chosen so that about SWEEP_POINTS remain."""
    step = max(1, (num_experts - top_k) // SWEEP_POINTS)
    kept = {num_experts - 1, num_experts // 2, top_k, *range(num_experts - 2, top_k, -step)}
    return sorted((b for b in kept if top_k <= b < num_experts), reverse=True)


def sweep(
    ckpt: MoeCheckpoint,
    wins: list[torch.Tensor],
    prefix: int,
    repeats: int,
    quality: bool,
    batch: int = 1,
    experts: str = "engine",
) -> list[dict]:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(ckpt.path, dtype=torch.float32).eval()
    budgets = [None, *budget_sweep(ckpt.num_experts, ckpt.top_k)]
    rows = []
    with probed_routers(model) as probe, expert_products(model, probe, experts):
        cached = [CachedGroup(model, probe, ids, prefix) for ids in groups(wins, batch)]
        cached[0].verify()  # warm-up
        reference = [group.verify()[0].argmax(-1) for group in cached]
        for mode in MODES:
            for budget in budgets:
                if budget is None and mode != MODES[0]:
                    continue
                probe.budget, probe.mode = budget, mode
                times, agree, losses, unique = [], [], [], []
                for group, ref in zip(cached, reference, strict=True):
                    best = float("inf")
                    for _ in range(repeats):
                        logits, elapsed = group.verify()
                        best = min(best, elapsed)
                    times.append(best)
                    unique.append(sum(probe.unique) / len(probe.unique))
                    agree.append(float((logits.argmax(-1) == ref).float().mean()))
                    losses.append(float(torch.nn.functional.cross_entropy(logits, group.targets())))
                rows.append(
                    {
                        "model": ckpt.path.name,
                        "batch": batch,
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
    parser.add_argument("--experts", choices=EXPERTS, default="engine", help="whose expert products run")
    parser.add_argument(
        "--batches", default=None, help="requests verifying together, comma-separated (default 1,8; --quick 1,2)"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: few windows, one repeat")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    folder = out_dir(args.out, "budget")
    torch.set_num_threads(args.threads)
    per_domain, repeats, prefix = (1, 1, 16) if args.quick else (11, 3, 64)
    batches = [int(b) for b in (args.batches or ("1,2" if args.quick else "1,8")).split(",")]
    setup = setup_from_args(args)
    source = read_checkpoint(setup.model)
    wins = windows(source, per_domain, prefix)
    rows = []
    for batch in batches:
        rows += sweep(source, wins, prefix, repeats, quality=True, batch=batch, experts=args.experts)
        if setup.inflate > 1:  # the deciding setup's memory-bound copy, cached under .cache/inflated
            copy = read_checkpoint(timed_model(setup))
            rows += sweep(copy, wins, prefix, repeats, quality=False, batch=batch, experts=args.experts)
    print(
        table(
            rows,
            [
                "model",
                "batch",
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
            "batches": batches,
            "experts": args.experts,
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
    for batch in dict.fromkeys(r["batch"] for r in rows):
        at = [r for r in rows if r["batch"] == batch]
        quality = [r for r in at if r["greedy_agreement"] is not None]
        for mode in MODES:
            pts = sorted((r for r in quality if r["mode"] in (mode, "none")), key=lambda r: r["budget"])
            label = f"b{batch} {mode}"
            axes[0].plot([r["budget"] for r in pts], [r["greedy_agreement"] for r in pts], "o-", label=label)
            axes[1].plot([r["budget"] for r in pts], [r["heldout_loss"] for r in pts], "o-", label=label)
            for model in dict.fromkeys(r["model"] for r in at):
                timed = sorted(
                    (r for r in at if r["model"] == model and r["mode"] in (mode, "none")), key=lambda r: r["budget"]
                )
                xs, ys = [r["budget"] for r in timed], [r["time_saved"] for r in timed]
                axes[2].plot(xs, ys, "o-", label=f"{model} {label}")
    for ax, label in zip(axes, ("greedy agreement", "held-out loss (nats/token)", "verify time saved"), strict=True):
        ax.set_xlabel("expert budget B per layer")
        ax.set_ylabel(label)
        ax.legend(fontsize=6)
    title = f"Expert budget in a verify of {VERIFY_TOKENS} tokens per request: truncation vs substitution"
    save_figure(fig, path, title)


if __name__ == "__main__":
    raise SystemExit(main())
