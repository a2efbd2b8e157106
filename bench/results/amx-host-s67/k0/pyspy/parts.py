"""Scratch (67th session): where the STANDALONE engine's scheduler spends a batch-1 K = 0 request's time, from py-spy
raw stacks (../../../spec-step-s66/sample_spec_1thread.py OUT '{"policy": "static", "max_k": 0}'): samples by the
three frames below the last `forward_batch_generation` (a plain forward's inside), else by the last three frames.
usage: python parts.py STACKS.raw.gz"""

import collections
import gzip
import sys

total = 0
parts: collections.Counter[str] = collections.Counter()
with gzip.open(sys.argv[1], "rt") as f:
    for line in f:
        stack, count = line.rsplit(" ", 1)
        total += int(count)
        names = [frame.split(" (")[0] for frame in stack.split(";")]
        inside = [i for i, name in enumerate(names) if name.endswith("forward_batch_generation")]
        key = " > ".join(names[inside[-1] + 1 : inside[-1] + 4]) if inside else "(outside) " + " > ".join(names[-3:])
        parts[key] += int(count)
print(f"{total} samples")
for key, count in parts.most_common(12):
    print(f"{count:6d} {count / total:6.1%} {key}")
