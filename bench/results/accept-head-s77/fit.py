"""Scratch (77th session): acceptance predictors for the dense draft fitted on data.py's training rows, read on its
held-out rows: AUC of (a) the margin log(p1 / p2) the stop uses now, (b) a logistic model over the draft's top-8
log-probabilities, (c) the same plus its final hidden state; and the batch-1 TPOT each gives as a stop, simulated on
the held-out rows' chains of 4 at oracle-s76 run2's per-task step prices (sim.py).
usage: PYTHONPATH=bench/results/accept-head-s77:. python bench/results/accept-head-s77/fit.py TRAIN.pt HELD.pt"""

import sys

import torch
from sim import TASKS, auc, features, fit, price, score, simulated

torch.manual_seed(0)
train, held = torch.load(sys.argv[1]), torch.load(sys.argv[2])
y = train["label"].float()
print(
    f"rows: train {len(y)} (accepted {float(y.mean()):.3f}), held-out {len(held['label'])}"
    f" (accepted {float(held['label'].float().mean()):.3f})"
)
heads = {}
for kind, l2 in (("margin", 0.0), ("top", 1e-4), ("hidden", 1e-3)):
    heads[kind] = fit(features(train, kind), y, l2)
    s_tr, s_he = score(heads[kind], features(train, kind)), score(heads[kind], features(held, kind))
    per = " ".join(
        f"{t} {auc(s_he[held['domain'] == d], held['label'][held['domain'] == d].float()):.3f}"
        for d, t in enumerate(TASKS)
    )
    print(f"{kind:7s} AUC train {auc(s_tr, y):.3f} held-out {auc(s_he, held['label'].float()):.3f} ({per})")
never = torch.ones(len(held["label"]), dtype=torch.bool)
print("simulated batch-1 decode ms per token on the held-out rows (code / math / prose):")
print("  plain steps   ", " / ".join(f"{price(t, 'plain', None):.2f}" for t in TASKS))
for name, keep in (
    [("static-4", never), ("perfect stop", held["label"].bool())]
    + [("margin 1.1", features(held, "margin")[:, 0] >= torch.log(torch.tensor(1.1)))]
    + [
        (f"{kind} p>={t}", score(heads[kind], features(held, kind)) >= t)
        for kind in ("top", "hidden")
        for t in (0.3, 0.4, 0.5, 0.6)
    ]
):
    sim = simulated(held, keep)
    print(f"  {name:14s}", " / ".join(f"{sim[t]:.2f}" for t in TASKS), f" verified {float(keep.float().mean()):.3f}")
