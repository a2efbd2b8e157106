"""Scratch (51st session): a declined first-judgement gate pickled by decide_log_sitecustomize.py (gate-*.pkl): the
group's backlogs and tokens left, the judgement forward's price, and hoped_gain at the batch-1 fit and with the cost
scout's prices (StepTimeModel.scouting). usage, from the repository root: python
bench/results/prose-b8-s51/gate_prices.py FOLDER"""

import glob
import pickle
import sys

from service.policy import moe_serve_probe as probe
from service.policy.cost_model import StepTimeModel

_scouting = StepTimeModel.scouting


def _unscouted(model: StepTimeModel) -> StepTimeModel:
    return model


for path in sorted(glob.glob(f"{sys.argv[1]}/gate-*.pkl")):
    with open(path, "rb") as f:
        policy, group, ks, probs, caps, batch, hope = pickle.load(f)
    reqs = batch.requests
    print(f"{path}: batch {len(reqs)}, backlogs {[r.draft_backlog for r in reqs]}, left {reqs[0].tokens_left}")
    print(f"  judgement forward {policy.model.judgement_time(sum(r.draft_backlog for r in reqs)) * 1e3:.1f} ms")
    print(f"  judgement cost {probe.judgement_cost(policy, group, batch):.3f} request-s")
    StepTimeModel.scouting = _unscouted  # the fit's prices for an uncalibrated batch size
    print(f"  hoped gain at the fit {probe.hoped_gain(policy, group, ks, probs, caps, batch, hope):.3f} request-s")
    StepTimeModel.scouting = _scouting
    print(f"  hoped gain scouted {probe.hoped_gain(policy, group, ks, probs, caps, batch, hope):.3f} request-s")
