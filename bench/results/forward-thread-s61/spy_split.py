"""Scratch (61st session): share of the scheduler's main-thread samples (py-spy raw, --threads --idle) inside the
model forward (a frame of ModelRunner.forward or EagerRunner._execute_decode on the stack) and outside it, with the
largest frames outside. usage: python spy_split.py STACKS.raw[.gz]"""

import collections
import gzip
import sys

path = sys.argv[1]
opener = gzip.open if path.endswith(".gz") else open
inside = outside = 0
frames = collections.Counter()
with opener(path, "rt") as f:
    for line in f:
        stack, n = line.rsplit(" ", 1)
        parts = stack.split(";")
        if "MainThread" not in parts[0]:
            continue
        if any("ModelRunner.forward" in p or "_execute_decode" in p for p in parts):
            inside += int(n)
            continue
        outside += int(n)
        for name in {p.split(" (")[0] for p in parts[1:]}:
            frames[name] += int(n)
total = inside + outside
print(f"main-thread samples {total}: inside the forward {inside / total:.1%}, outside {outside / total:.1%}")
for name, n in frames.most_common(25):
    if "Scheduler" in name or "process_batch" in name or "forward_batch" in name or "init_new" in name:
        print(f"  {n / total:5.1%}  {name}")
