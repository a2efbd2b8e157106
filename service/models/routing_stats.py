"""Routing statistics of a Mixtral checkpoint on held-out text (issue 3).

Per layer and domain:
  load            share of top-k assignments each expert receives (sums to 1); imbalance = max share · E
  token_entropy   mean over tokens of H(softmax(router logits)), nats; ln E = undecided router
  reuse_any       P(token t+1 shares >= 1 expert with token t) — the affinity that makes expert prefetch and
                  verify batching cheap; uniform random top-k gives 1 - C(E-k, k) / C(E, k)
  reuse_overlap   mean |S_t ∩ S_{t+1}| / k
and, given the INT4 self-draft, its top-k agreement with the target on the same tokens (MoE-SpeQ §4 reports
90.9 % for Qwen-MoE at INT4): exact-set match rate and mean overlap.

Over a verify of t consecutive tokens (non-overlapping chunks of the held-out windows, issue 16):
  top_half_mass[t]   share of the chunk's summed router probability held by its E/2 heaviest experts (the heavy tail
                     MoE-Spec's expert budget relies on; 0.5 = flat), for t in VERIFY_SIZES
  top_half_slots[t]  share of the chunk's routed top-k slots that land in its E/2 most-used experts: what a budget
                     B = E/2 that keeps the most-used experts keeps without substitution
  unique[t]          experts a verify of t tokens touches (union of top-k sets), t = 1..MAX_VERIFY; MoESD models it as
                     N(t) = E (1 - (1 - k/E)^t), i.e. independent uniform routing
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from service.models.corpus import DOMAINS


def load_share(topk: torch.Tensor, num_experts: int) -> torch.Tensor:
    """topk [T, k] expert ids -> [E] share of assignments."""
    counts = torch.bincount(topk.reshape(-1), minlength=num_experts).float()
    return counts / counts.sum()


def token_entropy(logits: torch.Tensor) -> float:
    """logits [T, E] -> mean routing entropy in nats."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return float(-(logp.exp() * logp).sum(-1).mean())


def overlap(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a, b [T, k] expert ids -> [T] number of experts in both sets."""
    return (a.unsqueeze(-1) == b.unsqueeze(-2)).any(-1).sum(-1)


def consecutive_reuse(topk: torch.Tensor) -> tuple[float, float]:
    """topk [W, S, k] per window -> (P(share >= 1 expert), mean overlap / k) over consecutive positions."""
    shared = overlap(topk[:, 1:].reshape(-1, topk.shape[-1]), topk[:, :-1].reshape(-1, topk.shape[-1]))
    return float((shared > 0).float().mean()), float(shared.float().mean() / topk.shape[-1])


def uniform_reuse_baseline(num_experts: int, top_k: int) -> float:
    return 1.0 - math.comb(num_experts - top_k, top_k) / math.comb(num_experts, top_k)


def agreement(target: torch.Tensor, draft: torch.Tensor) -> tuple[float, float]:
    """target, draft [T, k] -> (exact top-k set match rate, mean overlap / k)."""
    shared = overlap(target, draft)
    k = target.shape[-1]
    return float((shared == k).float().mean()), float(shared.float().mean() / k)


@torch.no_grad()
def router_logits(model, windows: torch.Tensor) -> list[torch.Tensor]:
    """windows [W, S] -> per layer [W, S, E] router logits."""
    out = model(input_ids=windows, output_router_logits=True)
    return [logits.reshape(*windows.shape, -1) for logits in out.router_logits]


VERIFY_SIZES = (16, 32, 64)  # verify lengths for the top-half mass
MAX_VERIFY = 64  # unique experts measured for t = 1..MAX_VERIFY


def chunks(values: torch.Tensor, t: int) -> torch.Tensor:
    """values [W, S, ...] -> [W * (S // t), t, ...] non-overlapping runs of t consecutive positions."""
    usable = values.shape[1] // t * t
    return values[:, :usable].reshape(-1, t, *values.shape[2:])


def unique_experts(topk: torch.Tensor, num_experts: int, t: int) -> float:
    """topk [W, S, k] -> mean number of distinct experts in the top-k sets of t consecutive tokens."""
    runs = chunks(topk, t).reshape(-1, t * topk.shape[-1])  # [N, t*k]
    touched = torch.zeros(runs.shape[0], num_experts, dtype=torch.bool).scatter_(1, runs, True)
    return float(touched.sum(-1).float().mean())


def moesd_unique(num_experts: float, top_k: int, t: int) -> float:
    """MoESD's expected distinct experts for t tokens under independent uniform top-k routing."""
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** t)


def top_half_shares(logits: torch.Tensor, topk: torch.Tensor, t: int) -> tuple[float, float]:
    """logits [W, S, E], topk [W, S, k] -> (router-mass share, routed-slot share) of each t-token chunk's top E/2
    experts, averaged over chunks."""
    num_experts = logits.shape[-1]
    half = num_experts // 2
    mass = chunks(torch.softmax(logits.float(), dim=-1), t).sum(1)  # [N, E]
    mass_share = mass.topk(half, dim=-1).values.sum(-1) / mass.sum(-1)
    runs = chunks(topk, t).reshape(mass.shape[0], -1)  # [N, t*k]
    counts = torch.zeros_like(mass).scatter_add_(1, runs, torch.ones(runs.shape, dtype=mass.dtype))
    slot_share = counts.topk(half, dim=-1).values.sum(-1) / counts.sum(-1)
    return float(mass_share.mean()), float(slot_share.mean())


def fit_effective_experts(measured: dict[int, float], num_experts: int, top_k: int) -> float:
    """E_eff minimising the squared error of E_eff (1 - (1 - k/E_eff)^t) against measured unique experts: the number
    of experts uniform independent routing would need to show the same reuse (E_eff = E when MoESD's model holds)."""
    best, best_err = float(num_experts), float("inf")
    candidate = float(top_k)
    while candidate <= 4 * num_experts:
        err = sum((moesd_unique(candidate, top_k, t) - n) ** 2 for t, n in measured.items())
        if err < best_err:
            best, best_err = candidate, err
        candidate += 0.05
    return round(best, 2)


def heldout_windows(tokens_dir: Path, domain: str, tokens: int, seq_len: int = 256) -> torch.Tensor:
    ids = np.load(tokens_dir / f"{domain}.heldout.npy")
    count = max(1, min(tokens, ids.size) // seq_len)
    if ids.size < seq_len:
        raise ValueError(f"held-out {domain} has only {ids.size} tokens")
    starts = np.linspace(0, ids.size - seq_len, count).astype(np.int64)  # spread over the split, deterministic
    return torch.from_numpy(np.stack([ids[s : s + seq_len].astype(np.int64) for s in starts]))


def domain_stats(target_logits: list[torch.Tensor], top_k: int, draft_logits: list[torch.Tensor] | None) -> list[dict]:
    layers = []
    for index, logits in enumerate(target_logits):  # [W, S, E]
        num_experts, seq_len = logits.shape[-1], logits.shape[1]
        topk = logits.topk(top_k, dim=-1).indices  # [W, S, k]
        share = load_share(topk, num_experts)
        reuse_any, reuse_overlap = consecutive_reuse(topk)
        stats = {
            "layer": index,
            "load": [round(float(x), 4) for x in share],
            "imbalance": round(float(share.max() * num_experts), 3),
            "token_entropy": round(token_entropy(logits.reshape(-1, num_experts)), 4),
            "reuse_any": round(reuse_any, 4),
            "reuse_overlap": round(reuse_overlap, 4),
            "unique": {
                t: round(unique_experts(topk, num_experts, t), 3) for t in range(1, min(MAX_VERIFY, seq_len) + 1)
            },
        }
        for t in (t for t in VERIFY_SIZES if t <= seq_len):
            mass_share, slot_share = top_half_shares(logits, topk, t)
            stats.setdefault("top_half_mass", {})[t] = round(mass_share, 4)
            stats.setdefault("top_half_slots", {})[t] = round(slot_share, 4)
        if draft_logits is not None:
            draft_topk = draft_logits[index].topk(top_k, dim=-1).indices
            exact, mean_overlap = agreement(topk.reshape(-1, top_k), draft_topk.reshape(-1, top_k))
            stats["int4_topk_exact"] = round(exact, 4)
            stats["int4_topk_overlap"] = round(mean_overlap, 4)
        layers.append(stats)
    return layers


def run_routing_stats(model_dir: Path, tokens_dir: Path, tokens: int, draft_dir: Path | None = None) -> dict:
    from transformers import MixtralForCausalLM

    model = MixtralForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    draft = MixtralForCausalLM.from_pretrained(str(draft_dir), dtype=torch.float32).eval() if draft_dir else None
    top_k, num_experts = model.config.num_experts_per_tok, model.config.num_local_experts
    report: dict = {"model": str(model_dir), "draft": str(draft_dir) if draft_dir else None, "domains": {}}
    for domain in DOMAINS:
        windows = heldout_windows(tokens_dir, domain, tokens)
        draft_logits = router_logits(draft, windows) if draft is not None else None
        report["domains"][domain] = domain_stats(router_logits(model, windows), top_k, draft_logits)
    report["summary"] = summarize(report["domains"], num_experts, top_k)
    return report


def summarize(domains: dict[str, list[dict]], num_experts: int, top_k: int) -> dict:
    summary: dict = {"uniform_reuse_any": round(uniform_reuse_baseline(num_experts, top_k), 4)}
    for domain, layers in domains.items():
        keys = [
            k
            for k in ("reuse_any", "token_entropy", "imbalance", "int4_topk_exact", "int4_topk_overlap")
            if k in layers[0]
        ]
        summary[domain] = {k: round(sum(layer[k] for layer in layers) / len(layers), 4) for k in keys}
        if layers[0].get("top_half_mass"):
            summary[domain] |= verify_summary(layers, num_experts, top_k)
    return summary


def _layer_mean(layers: list[dict], key: str) -> dict[int, float]:
    """Mean over layers of a per-t table; JSON turns the int keys into strings, so both are accepted."""
    sizes = [int(t) for t in layers[0][key]]
    return {t: sum(_at(layer[key], t) for layer in layers) / len(layers) for t in sizes}


def _at(table: dict, t: int) -> float:
    return table[t] if t in table else table[str(t)]


def verify_summary(layers: list[dict], num_experts: int, top_k: int) -> dict:
    """Per-domain verify-size view, mean over layers: top-half shares, measured vs MoESD unique experts, E_eff."""
    unique = _layer_mean(layers, "unique")
    return {
        "top_half_mass": {t: round(v, 4) for t, v in _layer_mean(layers, "top_half_mass").items()},
        "top_half_slots": {t: round(v, 4) for t, v in _layer_mean(layers, "top_half_slots").items()},
        "unique_measured": {t: round(v, 3) for t, v in unique.items()},
        "unique_moesd": {t: round(moesd_unique(num_experts, top_k, t), 3) for t in unique},
        "effective_experts": fit_effective_experts(unique, num_experts, top_k),
    }
