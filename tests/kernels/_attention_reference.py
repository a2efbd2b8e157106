"""Naive attention reference: one request, one head, one query at a time, keys read slot by slot from the pool."""

import math

import torch


def naive_attention(
    q: torch.Tensor,  # [H, D] one query
    keys: list[torch.Tensor],  # each [Hkv, D]
    values: list[torch.Tensor],  # each [Hkv, Dv]
    visible: list[bool],
    sm_scale: float,
    logit_cap: float,
    sinks: torch.Tensor | None,  # [H]
) -> torch.Tensor:
    heads, groups = q.shape[0], q.shape[0] // keys[0].shape[0] if keys else 1
    out = torch.zeros(heads, values[0].shape[-1] if values else 1, dtype=torch.float64)
    for h in range(heads):
        kv = h // groups
        scores, vecs = [], []
        for k, v, seen in zip(keys, values, visible, strict=True):
            if not seen:
                continue
            s = float(q[h].double() @ k[kv].double()) * sm_scale
            if logit_cap > 0:
                s = logit_cap * math.tanh(s / logit_cap)
            scores.append(s)
            vecs.append(v[kv].double())
        if sinks is not None:
            scores.append(float(sinks[h]))
            vecs.append(torch.zeros_like(out[h]))
        if not scores:
            continue
        top = max(scores)
        weights = [math.exp(s - top) for s in scores]
        total = sum(weights)
        out[h] = sum(w / total * vec for w, vec in zip(weights, vecs, strict=True))
    return out
