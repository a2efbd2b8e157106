"""Scratch (68th session): the scheduler thread's py-spy samples (sample.py's stacks, all threads, idle included) split
into the model forward (EagerRunner.execute), idle waiting for requests (maybe_sleep_on_idle) and the rest of the
scheduler loop, per engine, with the forward and the rest per token (requests sampled x 32 tokens; 250 Hz: 4 ms a
sample). usage: python parts.py DIR > parts.txt"""

import gzip
import json
import sys
from pathlib import Path

folder = Path(sys.argv[1])
print("engine     loop  forward  idle  other  requests  forward_ms/token  other_ms/token  TPOT_median_ms")
for engine in ("none", "none-sync", "standalone"):
    forward = idle = loop = 0
    with gzip.open(folder / f"stacks-{engine}.raw.gz", "rt") as f:
        for line in f:
            stack, count = line.rsplit(" ", 1)
            n = int(count)
            loop += n * ("event_loop" in stack)
            forward += n * ("EagerRunner.execute" in stack)
            idle += n * ("maybe_sleep_on_idle" in stack)
    tpot = json.loads((folder / f"tpot-{engine}.json").read_text())
    tokens = 32 * len(tpot["tpot_ms"])
    other = loop - forward - idle
    print(
        f"{engine:10s} {loop:5d} {forward:7d} {idle:5d} {other:6d} {len(tpot['tpot_ms']):9d} "
        f"{forward * 4 / tokens:17.2f} {other * 4 / tokens:15.2f} {tpot['tpot_median_ms']:15.2f}"
    )
