"""Inclusive samples per SGLang / moe-serve function in the scheduler loop outside the worker's
forward_batch_generation (the gap between steps), from pyspy_ab.py's raw files. usage: python gap.py GLOB"""

import collections
import glob
import re
import sys

inc, total, outside = collections.Counter(), 0, 0
for path in sorted(glob.glob(sys.argv[1])):
    for line in open(path):  # noqa: SIM115 - scratch
        stack, n = line.rsplit(" ", 1)
        if '"sglang::scheduler"' not in stack:
            continue
        n = int(n)
        total += n
        if "forward_batch_generation" in stack or "event_loop_normal" not in stack:
            continue
        outside += n
        seen = set()
        for f in stack.split(";")[20:]:
            key = re.sub(r":\d+\)", ")", f)
            if key not in seen:
                inc[key] += n
                seen.add(key)
print(f"scheduler samples {total}; in the loop outside forward_batch_generation {outside}")
for k, v in inc.most_common(45):
    print(f"{v:6d} {k}")
