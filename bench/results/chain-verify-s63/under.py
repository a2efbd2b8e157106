"""Scratch (63rd session): inclusive shares of the frames under one function in py-spy raw stacks (scheduler event
loop only), and the leaf frames there. Usage: python under.py STACKS[.gz] FUNCTION [TOP]"""

import collections
import gzip
import sys
from pathlib import Path

path, root = sys.argv[1], sys.argv[2]
raw = Path(path).read_bytes()
text = (gzip.decompress(raw) if path.endswith(".gz") else raw).decode()
tot = 0
under = collections.Counter()
self_ = collections.Counter()
allsamples = 0
for line in text.splitlines():
    stack, _, count = line.rpartition(" ")
    n, frames = int(count), stack.split(";")
    if not any("event_loop" in f for f in frames):
        continue
    allsamples += n
    idx = [i for i, f in enumerate(frames) if f.startswith(root)]
    if not idx:
        continue
    tot += n
    rest = frames[idx[0] + 1 :]
    names = [
        f.split(" (")[0]
        + " ("
        + f.split(" (")[1].split(":")[0].split("/")[-1]
        + ":"
        + f.rsplit(":", 1)[-1].rstrip(")")
        + ")"
        if " (" in f
        else f
        for f in rest
    ]
    for nm in dict.fromkeys(n2.rsplit(":", 1)[0] + ")" for n2 in names):
        under[nm] += n
    if names:
        self_[names[-1]] += n
    else:
        self_["<self>"] += n
print(f"{root}: {tot} of {allsamples} samples ({100 * tot / allsamples:.1f}%)")
for k, v in under.most_common(int(sys.argv[3]) if len(sys.argv) > 3 else 30):
    print(f"{100 * v / tot:5.1f}%  {k}")
print("-- leaf frames")
for k, v in self_.most_common(15):
    print(f"{100 * v / tot:5.1f}%  {k}")
