"""Verify-step cost on a sparse MoE: forward time of t = 1..K+1 tokens over a cached prefix, against the unique
experts those tokens touch, on the deciding setup's model (bench/_models.py deciding_setup()) and its function-preserving inflated variant
(memory-bound on CPU).

Measured in-process with transformers' Mixtral (fp32, the engine's CPU dtype), one forward of t tokens after a cached
prefix of held-out text, the cache cropped back between forwards, best of several repeats; unique experts are counted from the routers' own
top-k. The expert products are the CPU engine's (`--experts engine`, the default: its tuned GemmPlan with the stream
kernel, bench/_routing.py engine_experts) or transformers' own per-expert `F.linear` (`--experts transformers`, the
form the runs before 2026-11-26 measured). Two sweeps per model:
- natural: real routing of held-out text, t = 1..K+1 (what a verify step of K drafts costs);
- forced: t = K+1 tokens routed over exactly u experts per layer, u = top_k..min(E, t·top_k) (time vs unique experts
  with the token count fixed; outputs are meaningless there, only the time is used).
Next to them: a least-squares fit time = a + c·t + b·(L·unique), every coefficient >= 0, over all measured points of a
model (pred_fit_ms),
MoESD's N(t) = E·(1-(1-k/E)^t) (service/policy/moesd.py) put in place of the measured unique experts of the
natural sweep (pred_moesd_ms: how far uniform routing is from the real router), and the bandwidth limit = bytes of the unique experts
(as the products read them: bfloat16 where the engine keeps them so) / memory bandwidth of this machine (a large torch
copy, read+write bytes / time).

    python -m bench.verify_cost [--model PATH] [--inflate N] [--max-k 7] [--experts engine|transformers] [--quick]
                                [--out DIR]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from bench._common import figure, out_dir, save_figure, table, write_json
from bench._heldout import heldout_documents
from bench._models import MoeCheckpoint, add_setup_arguments, read_checkpoint, setup_from_args, timed_model
from bench._routing import EXPERTS, expert_products, kept_weights, probed_routers
from service.policy.least_squares import fit_nonnegative
from service.policy.moesd import expected_experts


def memory_bandwidth(megabytes: int, repeats: int = 5, threads: int | None = None) -> float:
    """Bytes per second of a large tensor copy (each byte read once and written once), best of `repeats`; with
    `threads`, torch's thread count during the copy (default: this process's)."""
    src = torch.ones(megabytes * 2**20 // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    best, before = float("inf"), torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        for _ in range(repeats):
            start = time.perf_counter()
            dst.copy_(src)
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(before)
    return 2 * src.numel() * 4 / best


class CachedPrefix:
    """A model with a KV cache of `prefix` tokens; `forward(tokens)` times t more tokens and crops the cache back."""

    def __init__(self, model, ids: torch.Tensor, prefix: int) -> None:
        self.model, self.ids, self.prefix = model, ids, prefix
        with torch.no_grad():
            self.cache = model(ids[None, :prefix], use_cache=True).past_key_values

    def forward(self, tokens: int) -> float:
        chunk = self.ids[None, self.prefix : self.prefix + tokens]
        positions = torch.arange(self.prefix, self.prefix + tokens)[None]
        with torch.no_grad():
            start = time.perf_counter()
            self.model(chunk, past_key_values=self.cache, position_ids=positions, use_cache=True)
            elapsed = time.perf_counter() - start
        self.cache.crop(-tokens)
        return elapsed


def measure_model(
    ckpt: MoeCheckpoint, texts: list[str], max_k: int, repeats: int, prefix: int, experts: str = "engine"
) -> list[dict]:
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(ckpt.path)
    model = transformers.AutoModelForCausalLM.from_pretrained(ckpt.path, dtype=torch.float32).eval()
    windows = []
    for text in texts:
        ids = torch.tensor(tokenizer(text)["input_ids"][: prefix + max_k + 1])
        if len(ids) == prefix + max_k + 1:
            windows.append(ids)
    if not windows:
        raise RuntimeError(f"no held-out text of {prefix + max_k + 1} tokens")
    # bytes per expert weight read: the engine keeps a bfloat16 checkpoint's experts as bfloat16 (kept_weights)
    block = next(m for m in model.modules() if type(m).__name__ == "MixtralExperts")
    itemsize = kept_weights(block)[0].element_size() if experts.startswith("engine") else 4
    rows = []
    with probed_routers(model) as probe, expert_products(model, probe, experts):
        cached = [CachedPrefix(model, ids, prefix) for ids in windows]
        cached[0].forward(max_k + 1)  # warm-up: first-call allocations
        for t in range(1, max_k + 2):
            times, unique = [], []
            for c in cached:
                for _ in range(repeats):
                    probe.reset()
                    times.append(c.forward(t))
                    unique.append(sum(probe.unique) / len(probe.unique))
            rows.append(_row(ckpt, "natural", t, times, statistics.mean(unique), itemsize))
        t = max_k + 1
        for u in range(ckpt.top_k, min(ckpt.num_experts, t * ckpt.top_k) + 1):
            probe.force_unique = u
            times = [cached[0].forward(t) for _ in range(repeats * len(cached))]
            rows.append(_row(ckpt, "forced", t, times, float(u), itemsize))
        probe.force_unique = None
    return rows


def _row(ckpt: MoeCheckpoint, sweep: str, tokens: int, times: list[float], unique: float, itemsize: int = 4) -> dict:
    return {
        "model": ckpt.path.name,
        "sweep": sweep,
        "tokens": tokens,
        "unique_per_layer": unique,
        # MoESD's uniform-routing prediction only describes natural routing
        "moesd_n_t": expected_experts(tokens, ckpt.num_experts, ckpt.top_k) if sweep == "natural" else None,
        "time_ms": min(times) * 1e3,  # best of the repeats: other jobs on a shared machine only add time
        "expert_bytes": unique * ckpt.num_layers * ckpt.expert_params * itemsize,
    }


def add_predictions(rows: list[dict], ckpt: MoeCheckpoint, bandwidth: float) -> dict:
    """Fit time = a + c·t + b·L·unique on this model's rows (a, b, c >= 0); predict each row from MoESD's N(t) and from the
    measured unique experts, and give the bandwidth floor of its expert bytes."""
    mine = [r for r in rows if r["model"] == ckpt.path.name]
    x = np.array([[1.0, r["tokens"], ckpt.num_layers * r["unique_per_layer"]] for r in mine])
    y = np.array([r["time_ms"] for r in mine])
    # a fixed cost, a cost per token and one per expert cannot be negative (an unconstrained fit on the x48 copy
    # once gave a fixed cost of -4.5 ms); ridge ~0: a plain least-squares fit under c >= 0
    a, c, b = fit_nonnegative(zip(x.tolist(), y.tolist(), strict=True), (0.0, 0.0, 0.0), 1e-9)
    for r in mine:
        r["pred_fit_ms"] = a + c * r["tokens"] + b * ckpt.num_layers * r["unique_per_layer"]
        n_t = r["moesd_n_t"]
        r["pred_moesd_ms"] = None if n_t is None else a + c * r["tokens"] + b * ckpt.num_layers * n_t
        r["bw_limit_ms"] = r["expert_bytes"] / bandwidth * 1e3
    return {"fixed_ms": a, "per_token_ms": c, "per_expert_ms": b}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_setup_arguments(parser)
    parser.add_argument("--max-k", type=int, default=7, help="largest draft length K (forwards of 1..K+1 tokens)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: stable on a shared machine)")
    parser.add_argument("--experts", choices=EXPERTS, default="engine", help="whose expert products run")
    parser.add_argument("--quick", action="store_true", help="smoke run: K <= 3, few repeats")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    folder = out_dir(args.out, "verify_cost")
    torch.set_num_threads(args.threads)
    max_k = min(args.max_k, 3) if args.quick else args.max_k
    repeats, windows, prefix = (2, 1, 32) if args.quick else (5, 3, 96)
    bandwidth = memory_bandwidth(64 if args.quick else 512)
    texts = heldout_documents("prose", windows) + heldout_documents("python", windows)
    setup = setup_from_args(args)
    rows, fits = [], {}
    models = [read_checkpoint(setup.model)]
    if setup.inflate > 1:  # the deciding setup's memory-bound copy, cached under .cache/inflated
        models.append(read_checkpoint(timed_model(setup)))
    for ckpt in models:
        rows += measure_model(ckpt, texts, max_k, repeats, min(prefix, ckpt.context - max_k - 1), args.experts)
        fits[ckpt.path.name] = add_predictions(rows, ckpt, bandwidth)
    columns = ["model", "sweep", "tokens", "unique_per_layer", "moesd_n_t", "time_ms", "pred_moesd_ms", "pred_fit_ms"]
    columns.append("bw_limit_ms")
    print(f"memory bandwidth (torch copy): {bandwidth / 1e9:.2f} GB/s, {args.threads} thread(s)")
    print(table(rows, columns))
    path = write_json(
        folder,
        "verify_cost",
        {
            "setup": {"model": str(setup.model), "inflate": setup.inflate},
            "bandwidth_bytes_per_s": bandwidth,
            "threads": args.threads,
            "experts": args.experts,
            "max_k": max_k,
            "fits": fits,
            "rows": rows,
        },
    )
    _plot(rows, folder / "verify_cost.png")
    print(f"wrote {path}")
    return 0


def _plot(rows: list[dict], path: Path) -> None:
    fig, axes = figure(2, (10, 3.8))
    for model in dict.fromkeys(r["model"] for r in rows):
        for ax, sweep, x in ((axes[0], "natural", "tokens"), (axes[1], "forced", "unique_per_layer")):
            pts = [r for r in rows if r["model"] == model and r["sweep"] == sweep]
            line = ax.plot([r[x] for r in pts], [r["time_ms"] for r in pts], "o-", label=f"{model} measured")[0]
            style = {"color": line.get_color()}
            pred, label = ("pred_moesd_ms", "MoESD N(t)") if sweep == "natural" else ("pred_fit_ms", "linear fit")
            ax.plot([r[x] for r in pts], [r[pred] for r in pts], "--", label=f"{model} {label}", **style)
            ax.plot(
                [r[x] for r in pts], [r["bw_limit_ms"] for r in pts], ":", label=f"{model} bandwidth limit", **style
            )
    axes[0].set_xlabel("tokens verified (K+1)")
    axes[1].set_xlabel("unique experts per layer (forced, K+1 tokens)")
    for ax in axes:
        ax.set_ylabel("forward time (ms)")
        ax.legend(fontsize=6)
    save_figure(fig, path, "Verify cost vs draft length and unique experts")


if __name__ == "__main__":
    raise SystemExit(main())
