"""Expert offloading with lookahead prefetch vs LRU (issue 10 parts 1-3; MoE-SpeQ reports 96-99.9 % vs 29-77 %).

    python -m bench.offload                                   # bundled model if present, else a random tiny Mixtral
    python -m bench.offload --model DIR --fractions 0.25,0.5 --tokens 48 --out bench/results/offload

For each resident fraction and policy the same greedy speculative loop (INT4 self-draft, k drafts) runs over the same
prompts; only the store's behaviour differs:
  lru        demand fetch on a miss, LRU eviction (the reactive baseline)
  lookahead  ELB-driven three-phase prefetch on a background thread + lookahead-aware eviction
  governor   lookahead, with k chosen each cycle by the amortization-roofline governor from measured costs
Hit rate = share of verify expert lookups found resident (MoE-SpeQ's per-step coverage); stall = seconds verify waited for
experts. Also: INT4 routing fidelity per layer (teacher-forced), acceptance, measured fetch bandwidth. Prints a table,
writes JSON and a PNG. Every run also checks its tokens equal the no-offload run's.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import torch

from service.offload.eviction import LookaheadEviction, LruEviction
from service.offload.expert_file import ExpertFile, write_expert_file
from service.offload.expert_store import ExpertStore
from service.offload.fidelity import routing_fidelity
from service.offload.governor import OffloadGovernor
from service.offload.lookahead import ExpertLookaheadBuffer
from service.offload.offloaded_experts import ExpertsMode, fused_experts, install
from service.offload.prefetch import Prefetcher
from service.offload.runner import OffloadRunner
from service.offload.tiny_model import tiny_random_mixtral
from service.offload.types import StoreStats

DEFAULT_MODEL = Path("service/models/assets/moe-tiny")
PROMPTS = [
    "def fibonacci(n):\n    ",
    "The license grants you the right to",
    "Question: 17 + 25 = ",
    "import os\nimport sys\n",
]
POLICIES = ("none", "lru", "lookahead", "governor")


def load_model(path: Path | None):
    """(model, prompts as token ids, description); a random tiny Mixtral when `path` has no model."""
    from transformers import MixtralForCausalLM

    if path is not None and (path / "config.json").exists():
        model = MixtralForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(path))
            prompts = [tokenizer.encode(p) for p in PROMPTS]
        except Exception:  # a checkpoint without tokenizer files: fixed ids keep the bench running
            prompts = _random_prompts(model.config.vocab_size)
        return model, prompts, f"bundled model {path}"
    model = tiny_random_mixtral(hidden_size=256, intermediate_size=512, num_layers=4, num_experts=8)
    return (
        model,
        _random_prompts(model.config.vocab_size),
        "RANDOM tiny Mixtral (bundled model absent): routing is not trained",
    )


def _random_prompts(vocab: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randint(0, vocab, (12,), generator=gen).tolist() for _ in PROMPTS]


def run_policy(model_path, policy: str, fraction: float, k: int, tokens: int, workdir: Path) -> dict:
    model, prompts, _ = load_model(model_path)  # fresh per run: install() rewires the model
    config = model.config
    layers, experts = config.num_hidden_layers, config.num_local_experts
    source = ExpertFile(write_expert_file(fused_experts(model), workdir / "experts.safetensors"))
    mode, lookahead = ExpertsMode(), ExpertLookaheadBuffer(layers, experts)
    store = prefetcher = governor = None
    if policy != "none":
        eviction = LruEviction() if policy == "lru" else LookaheadEviction(lookahead)
        store = ExpertStore.with_fraction(source, fraction, eviction)
        prefetcher = Prefetcher(store, lookahead) if policy != "lru" else None
    if policy == "governor":
        governor = OffloadGovernor(
            layers, experts, config.num_experts_per_tok, source.expert_bytes, resident_fraction=fraction, initial_k=k
        )
    install(model, store, mode)
    runner = OffloadRunner(model, mode, store, lookahead, prefetcher, k=k, governor=governor)
    outputs, cycles, start = [], [], time.perf_counter()
    try:
        for prompt in prompts:
            result = runner.generate(prompt, tokens)
            outputs.append(result.tokens)
            cycles.extend(result.cycles)
    finally:
        if prefetcher is not None:
            prefetcher.close()
        source.close()
    wall = time.perf_counter() - start
    verify = sum((c.verify for c in cycles), StoreStats())
    window = sum((c.window for c in cycles), StoreStats())
    proposed = sum(c.k for c in cycles)
    return {
        "policy": policy,
        "resident_fraction": fraction,
        "capacity": store.capacity if store else layers * experts,
        "hit_rate": verify.hit_rate,
        "verify_stall_ms_per_cycle": 1e3 * verify.stall_s / len(cycles),
        "verify_stall_share": verify.stall_s / max(sum(c.verify_s for c in cycles), 1e-12),
        "late_hits": verify.late_hits,
        "misses": verify.misses,
        "prefetches": window.prefetches,
        "fetches": window.fetches,
        "fetch_bandwidth_gbs": (window.bandwidth or 0.0) / 1e9,
        "acceptance": sum(c.accepted for c in cycles) / proposed if proposed else 0.0,
        "mean_k": proposed / len(cycles),
        "tokens_per_s": sum(len(o) for o in outputs) / wall,
        "peak_resident": store.peak_occupancy if store else layers * experts,
        "outputs": outputs,
    }


def fidelity(model_path) -> list[dict]:
    model, prompts, _ = load_model(model_path)
    mode = ExpertsMode()
    install(model, None, mode)
    width = min(len(p) for p in prompts)
    ids = torch.tensor([p[:width] for p in prompts])
    return [vars(f) for f in routing_fidelity(model, mode, ids)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="Mixtral checkpoint dir (random if absent)")
    parser.add_argument("--fractions", default="0.25,0.5", help="resident share of all experts, comma-separated")
    parser.add_argument("--k", type=int, default=3, help="draft tokens per cycle (initial k for the governor)")
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per prompt")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--out", type=Path, default=Path("bench/results/offload"), help="writes OUT.json and OUT.png")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    _, _, described = load_model(args.model)
    print(f"model: {described}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        reference = run_policy(args.model, "none", 1.0, args.k, args.tokens, Path(tmp))
        rows.append(reference)
        for fraction in (float(f) for f in args.fractions.split(",")):
            for policy in POLICIES[1:]:
                row = run_policy(args.model, policy, fraction, args.k, args.tokens, Path(tmp))
                fixed_k = policy != "governor"
                row["greedy_equal_to_no_offload"] = row["outputs"] == reference["outputs"] if fixed_k else None
                rows.append(row)
    report = {
        "model": described,
        "k": args.k,
        "tokens_per_prompt": args.tokens,
        "prompts": len(PROMPTS),
        "machine": platform.platform(),
        "torch_threads": args.threads,
        "fidelity": fidelity(args.model),
        "rows": [{key: v for key, v in row.items() if key != "outputs"} for row in rows],
    }
    _print(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2))
    _plot(report, args.out.with_suffix(".png"))
    print(f"wrote {args.out.with_suffix('.json')} and {args.out.with_suffix('.png')}")
    return 0


def _print(report: dict) -> None:
    head = f"{'policy':<10} {'resident':>8} {'hit rate':>8} {'stall ms/cycle':>14} {'stall share':>11} {'prefetch':>8} {'fetch GB/s':>10} {'accept':>6} {'mean k':>6} {'tok/s':>6} {'= greedy':>8}"
    print(head)
    for r in report["rows"]:
        print(
            f"{r['policy']:<10} {r['resident_fraction']:>8.0%} {r['hit_rate']:>8.1%} {r['verify_stall_ms_per_cycle']:>14.3f}"
            f" {r['verify_stall_share']:>11.1%} {r['prefetches']:>8} {r['fetch_bandwidth_gbs']:>10.2f} {r['acceptance']:>6.2f}"
            f" {r['mean_k']:>6.2f} {r['tokens_per_s']:>6.1f} {str(r.get('greedy_equal_to_no_offload', '-')):>8}"
        )
    print("INT4 self-draft routing fidelity (teacher-forced):")
    for f in report["fidelity"]:
        print(f"  layer {f['layer']}: exact {f['exact']:.1%}  same set {f['same_set']:.1%}  overlap {f['overlap']:.1%}")


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["rows"] if r["policy"] != "none"]
    labels = [f"{r['policy']}\n{r['resident_fraction']:.0%}" for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.bar(labels, [100 * r["hit_rate"] for r in rows], color="tab:blue")
    left.set_ylabel("verify hit rate (%)")
    right.bar(labels, [r["verify_stall_ms_per_cycle"] for r in rows], color="tab:red")
    right.set_ylabel("verify stall (ms per cycle)")
    fig.suptitle(f"Expert offload: lookahead prefetch vs LRU ({report['model'].split(':')[0]})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
