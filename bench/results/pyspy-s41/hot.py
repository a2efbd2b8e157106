"""Inclusive samples per function of moe_sglang / service code in the scheduler's decode steps, outside the target
forwards, from pyspy_ab.py's raw files. usage: python hot.py GLOB [EXCLUDE_FRAME ...]"""

import collections
import glob
import re
import sys

paths = sorted(glob.glob(sys.argv[1]))
exclude = sys.argv[2:] or ["run_plain_decode", "target_forward", "forward_extend", "ModelRunner.forward"]
inc, total, decode = collections.Counter(), 0, 0
for path in paths:
    for line in open(path):  # noqa: SIM115 - scratch
        stack, n = line.rsplit(" ", 1)
        if '"sglang::scheduler"' not in stack:
            continue
        n = int(n)
        total += n
        if "MoeServeNgramWorker.forward_batch_generation" not in stack or "forward_batch_generation (sglang" in stack:
            continue
        frames = stack.split(";")
        if any(any(e in f for e in exclude) for f in frames):
            continue
        decode += n
        seen = set()
        for f in frames:
            if "moe_sglang/" in f or "service/" in f or "sglang/" in f:
                key = re.sub(r":\d+\)", ")", f)
                if key not in seen:
                    inc[key] += n
                    seen.add(key)
print(f"scheduler samples {total}; decode-step samples outside target forwards {decode}")
for k, v in inc.most_common(60):
    print(f"{v:6d} {k}")
