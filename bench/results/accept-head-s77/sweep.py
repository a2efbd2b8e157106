"""Scratch (77th session): the shipped acceptance head (service/models/assets/moe-fine-draft/accept_head.safetensors)
read on data.py's rows: AUC against the margin's, and the stop at floors 0.3-0.8 against the margin's at 1.1, static
K = 4 and a perfect stop, simulated as in fit.py (sim.py: oracle-s76 run2's per-task step prices).
usage: PYTHONPATH=bench/results/accept-head-s77:. python bench/results/accept-head-s77/sweep.py ROWS.pt"""

import sys

import torch
from sim import TASKS, auc, features, price, simulated

from service.models.accept_head import AcceptHead

held = torch.load(sys.argv[1])
head = AcceptHead.load("service/models/assets/moe-fine-draft")
p = head.probability(held["top"].clamp_min(1e-9).log(), held["hidden"])
margin = features(held, "margin")[:, 0]
y = held["label"]
print(f"rows {len(y)}, accepted {float(y.float().mean()):.3f}")
print(f"AUC head {auc(p, y.float()):.3f}, margin {auc(margin, y.float()):.3f}")
for d, task in enumerate(TASKS):
    m = held["domain"] == d
    print(f"  {task}: head {auc(p[m], y[m].float()):.3f}, margin {auc(margin[m], y[m].float()):.3f}")
print("simulated batch-1 decode ms per token (code / math / prose):")
print("  plain steps    ", " / ".join(f"{price(t, 'plain', None):.2f}" for t in TASKS))
cases = [("static-4", torch.ones_like(y)), ("perfect stop", y), ("margin 1.1", margin >= torch.log(torch.tensor(1.1)))]
cases += [(f"head p>={t}", p >= t) for t in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)]
for name, keep in cases:
    sim = simulated(held, keep.bool())
    print(f"  {name:14s}", " / ".join(f"{sim[t]:.2f}" for t in TASKS), f" verified {float(keep.float().mean()):.3f}")
