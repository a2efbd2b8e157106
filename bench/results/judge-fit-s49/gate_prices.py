"""Scratch (49th session): the batch-1 gates pickled by run 3 (gates-after-3.pkl.gz: the policy, the batch, the group
and its arguments at each first-judgement gate, written by price_log_sitecustomize.py's pickling variant) priced again
with the code at f973162: the hoped gain at several hoped-for rates, and for three prose requests the target forward
the model prices for a plain step and for a three-draft verify whose drafts are all accepted / none.
usage: python gate_prices.py (from the repository root)"""

import gzip
import pickle
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from service.policy import moe_serve_probe as probe  # noqa: E402

gates = []
with gzip.open(Path(__file__).with_name("gates-after-3.pkl.gz"), "rb") as f:
    while True:
        try:
            gates.append(pickle.load(f))
        except EOFError:
            break
for policy, batch, group, ks, probs, caps, _ in gates:
    r = batch.requests[0]
    cost = probe.judgement_cost(policy, group, batch) * 1e3
    gains = [probe.hoped_gain(policy, group, ks, probs, caps, batch, [h] * 3) * 1e3 for h in (0.8, 0.85, 0.9, 0.95)]
    reuse = policy._reuse[r.request_id][0]
    print(
        f"{r.request_id[:6]} token {r.tokens_so_far} reuse {reuse:.2f} cost {cost:.1f} ms, hoped gain at 0.8 / 0.85 /"
    )
    print(f"  0.9 / 0.95: {' / '.join(f'{g:.1f}' for g in gains)} ms")
    if r.request_id.startswith(("aab7fa", "00d0fb", "dde85f")):
        model, c = policy._priced_for(batch.requests).hoped(), policy.model.coef
        prices = [1e3 * model.verify_time(n, 1, None, a) for n, a in ((1, None), (4, 3.0), (4, 0.0))]
        print("  target forward priced: plain {:.2f}, 3 drafts all accepted {:.2f}, none {:.2f} ms".format(*prices))
        print(f"  per_token {c.per_token * 1e3:.3f} ms, verify path {c.verify_extra * 1e3:.2f} ms a request")
