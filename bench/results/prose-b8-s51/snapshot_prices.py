"""Scratch (51st session): what moe-serve's cost model priced at a batch-8 decision that kept every request at K = 0
after some had measured their acceptance, from policy snapshots pickled by decide_log_sitecustomize.py
(POLICY_SNAPSHOTS=<folder>). Per snapshot: the requests' own first-draft p, J (the step's T · Σ 1/e) and T at a
uniform depth 0-4 under the model the allocation used, its `hoped` and `scouting` variants, the plain and
speculative calibration ratios per batch bucket, and what `allocate` chose. A snapshot unpickles against the code
that wrote it. usage, from the repository root: python bench/results/prose-b8-s51/snapshot_prices.py FOLDER"""

import glob
import pickle
import sys


def report(path: str) -> None:
    with open(path, "rb") as f:
        policy, batch = pickle.load(f)
    reqs = batch.requests
    probs = [policy.accept.get(r.request_id) for r in reqs]
    print(f"{path}: batch {len(reqs)}, tokens so far {reqs[0].tokens_so_far}, left {reqs[0].tokens_left}")
    print("  p0", [round(p[0], 2) for p in probs])
    model = policy._priced_for(reqs)
    for name, m in (("model", model), ("hoped", model.hoped()), ("scouting", model.scouting())):
        js, ts = [], []
        for depth in range(5):
            ks = [depth] * len(reqs)
            js.append(
                round(policy._objective(ks, policy._chains(probs, ks), float("inf"), True, batch, model=m)[1] * 1e3, 1)
            )
            ts.append(round(m.step_time(len(reqs) * (depth + 1), len(reqs), depth, len(reqs) * depth) * 1e3, 1))
        print(f"  {name:9s} J ms by depth {js}  T ms by depth {ts}")
    plain = {b: round(c.ratio, 2) for b, c in policy.model._plain_calibration.items()}
    spec = {b: round(c.ratio, 2) for b, c in policy.model._calibration.items() if c.measured}
    print(f"  plain ratio by bucket {plain}, calibrated speculative ratio by bucket {spec}")
    caps = [min(policy.k_max, batch.max_k)] * len(reqs)
    print("  allocate:", policy.allocate(probs, caps, float("inf"), drafting=True, layout=batch))


if __name__ == "__main__":
    for path in sorted(glob.glob(f"{sys.argv[1]}/[0-9]*.pkl")):  # decisions (gate-*.pkl: gate_prices.py)
        report(path)
