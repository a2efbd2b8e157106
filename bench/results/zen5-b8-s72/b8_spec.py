"""Scratch (72nd session): each batch-8 wave of a step log that had a speculative step, step by step: requests in
the step, plain or not, K and drafts accepted per request, the step's wall ms, target forward, drafting and other
ms, and the judged outcomes it carried. usage: python b8_spec.py STEPS.jsonl.gz"""

import sys

from _waves import rows, waves  # this folder's helper

for rs in waves(rows(sys.argv[1])):
    if max(len(r["rids"]) for r in rs) < 8 or all(r["plain"] for r in rs):
        continue
    print("wave", round((rs[-1]["end"] - rs[0]["start"]) * 1e3), "ms")
    for r in rs:
        ks, acc = "".join(map(str, r["k"])), "".join(map(str, r["accepted"]))
        print(
            f"  n={len(r['rids'])} plain={int(r['plain'])} k={ks} acc={acc} dur={(r['end'] - r['start']) * 1e3:.1f}"
            f" v={r['verify_ms']:.1f} d={r['draft_ms']:.1f} o={r['other_ms']:.1f} judged={len(r['shadow'])}"
        )
