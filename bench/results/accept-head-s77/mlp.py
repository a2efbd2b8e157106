"""Scratch (77th session): a one-hidden-layer MLP over fit.py's features with the hidden state (widths 32 and 128,
AdamW, 60 epochs), against the logistic model at several L2 weights: held-out AUC (data.py's rows).
usage: PYTHONPATH=bench/results/accept-head-s77:. python bench/results/accept-head-s77/mlp.py TRAIN.pt HELD.pt"""

import sys

import torch
from sim import auc, features, fit, score

train, held = torch.load(sys.argv[1]), torch.load(sys.argv[2])
y, yh = train["label"].float(), held["label"].float()
x, xh = features(train, "hidden"), features(held, "hidden")
for l2 in (1e-4, 1e-3, 1e-2, 3e-2):
    print(f"logistic l2 {l2}: held-out AUC {auc(score(fit(x, y, l2), xh), yh):.4f}")
mean, std = x.mean(0), x.std(0).clamp_min(1e-6)
z, zh = (x - mean) / std, (xh - mean) / std
for width in (32, 128):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], width), torch.nn.GELU(), torch.nn.Linear(width, 1))
    opt = torch.optim.AdamW(net.parameters(), 3e-3, weight_decay=0.05)
    for epoch in range(60):
        perm = torch.randperm(len(z))
        for i in range(0, len(z), 512):
            b = perm[i : i + 512]
            opt.zero_grad()
            torch.nn.functional.binary_cross_entropy_with_logits(net(z[b])[:, 0], y[b]).backward()
            opt.step()
        if epoch % 20 == 19:
            with torch.no_grad():
                print(
                    f"mlp width {width} epoch {epoch + 1}: held-out AUC {auc(net(zh)[:, 0], yh):.4f}, "
                    f"training {auc(net(z)[:, 0], y):.4f}"
                )
