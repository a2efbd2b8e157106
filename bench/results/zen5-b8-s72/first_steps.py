"""Scratch (72nd session): the waves of a step log by batch size (8, 1): per step position, the median wall ms of
that position's step over the waves of 31 or more steps, and each wave's wall ms; then, per kind of batch-8 step
(largest K, drafts in all), its steps' median wall, forward, drafting and other ms and drafts accepted.
usage: python first_steps.py STEPS.jsonl.gz"""

import collections
import statistics
import sys

from _waves import rows, waves  # this folder's helper

steps = rows(sys.argv[1])
all_waves = waves(steps)
for n in (8, 1):
    chosen = [w for w in all_waves if max(len(r["rids"]) for r in w) == n]
    if not chosen:
        continue
    columns = list(
        zip(*[[(r["end"] - r["start"]) * 1e3 for r in rs[:31]] for rs in chosen if len(rs) >= 31], strict=False)
    )
    walls = [round((rs[-1]["end"] - rs[0]["start"]) * 1e3) for rs in chosen]
    print(f"batch {n}: {len(chosen)} waves, walls {walls}")
    if columns:
        print("  step ms by position:", " ".join(f"{statistics.median(c):.1f}" for c in columns))
kinds = collections.defaultdict(list)
for r in steps:
    if len(r["rids"]) == 8:
        kinds[(max(r["k"]), sum(r["k"]))].append(r)
for (k, drafts), steps in sorted(kinds.items()):
    med = {
        name: statistics.median(f(s) for s in steps)
        for name, f in (
            ("wall", lambda s: (s["end"] - s["start"]) * 1e3),
            ("forward", lambda s: s["verify_ms"]),
            ("draft", lambda s: s["draft_ms"]),
            ("other", lambda s: s["other_ms"]),
            ("accepted", lambda s: sum(s["accepted"])),
        )
    }
    print(
        f"batch-8 steps K<={k} drafts={drafts}: {len(steps)}, medians "
        + " ".join(f"{a}={b:.1f}" for a, b in med.items())
    )
