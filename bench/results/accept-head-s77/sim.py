"""Scratch (77th session): what fit.py and sweep.py share: data.py rows' features, logistic fits and AUC, and the
batch-1 TPOT a stop gives on the rows' chains of 4 at oracle-s76 run2's per-task step prices (prices.py's model)."""

import collections
import gzip
import json
import statistics
from pathlib import Path

import torch

TASKS = ("code", "math", "prose")  # data.py's domains 0, 1, 2
DEPTH, TOKENS = 4, 47  # chain depth; roots per prompt


def top_features(rows):
    lp = rows["top"].clamp_min(1e-9).log()
    return torch.cat([lp, (lp[:, :1] - lp[:, 1:2]), rows["top"].sum(-1, keepdim=True)], -1)


def features(rows, kind):
    if kind == "margin":
        return top_features(rows)[:, 8:9]
    if kind == "top":
        return top_features(rows)
    return torch.cat([top_features(rows), rows["hidden"].float()], -1)


def fit(x, y, l2):  # as service/models/accept_head.fit, the standardisation kept apart
    mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
    z = (x - mean) / std
    w = torch.zeros(x.shape[1], requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=500, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(z @ w + b, y) + l2 * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return {"mean": mean, "std": std, "w": w.detach(), "b": b.detach()}


def score(head, x):
    return torch.sigmoid((x - head["mean"]) / head["std"] @ head["w"] + head["b"])


def auc(s, y):
    order = s.argsort()
    ranks = torch.empty_like(s)
    ranks[order] = torch.arange(1, len(s) + 1, dtype=s.dtype)
    pos = y.bool()
    n1, n0 = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


# step prices from oracle-s76's run2 (prices.py): per task, drafts verified k, all accepted or not
run = Path("bench/results/oracle-s76/run2")
requests = [json.loads(x) for x in (run / "requests.jsonl").read_text().splitlines()]
with gzip.open(run / "steps.jsonl.gz", "rt") as f:
    steps = [json.loads(x) for x in f]
prices = collections.defaultdict(list)
for q in requests:
    if q["policy"] in ("static-4", "static-stop", "k0"):
        for s in steps:
            if q["start"] <= s["start"] <= q["end"] and len(s["rids"]) == 1:
                k = "plain" if s["plain"] else s["verified"][0]
                whole = None if s["plain"] else s["accepted"][0] == s["verified"][0]
                prices[(q["task"], k, whole)].append((s["end"] - s["start"]) * 1e3)


def price(task, k, whole):
    own = prices.get((task, k, whole)) or prices.get((task, k, not whole))
    if own:
        return statistics.median(own)
    return statistics.median([w for (_, kk, _), ws in prices.items() if kk == k for w in ws])


def simulated(rows, keep):
    """Mean over prompts of decode ms per token: chains of 4 from each root, verified down to the first draft that
    `keep` (bool per row) refuses; accepted = the run of labels from the root, within what was verified."""
    out = {}
    label = rows["label"].view(-1, TOKENS)
    keep = keep.view(-1, TOKENS)
    domain = rows["domain"].view(-1, TOKENS)[:, 0]
    for d, task in enumerate(TASKS):
        per = []
        for p in (domain == d).nonzero().flatten().tolist():
            j = total = 0
            while j < TOKENS - DEPTH:
                k = next((i for i in range(DEPTH) if not keep[p, j + i]), DEPTH)
                a = next((i for i in range(k) if not label[p, j + i]), k)
                total += price(task, k, a == k)
                j += a + 1
            per.append(total / j)
        out[task] = statistics.mean(per)
    return out
