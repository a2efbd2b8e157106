"""Inclusive py-spy samples per function in the scheduler process, from pyspy_ab.py's raw files. usage:
python hot.py step GLOB   moe_sglang / service / sglang code in the worker's decode steps, outside target forwards
python hot.py gap GLOB    the scheduler loop outside the worker's forward_batch_generation (between steps)"""

import collections
import glob
import re
import sys

FORWARDS = ("run_plain_decode", "target_forward", "forward_extend", "ModelRunner.forward")


def in_step(stack: str) -> list[str] | None:
    """The decode step's frames outside the target forwards, or None where the sample is not one."""
    if "MoeServeNgramWorker.forward_batch_generation" not in stack or "forward_batch_generation (sglang" in stack:
        return None
    frames = stack.split(";")
    if any(any(e in f for e in FORWARDS) for f in frames):
        return None
    return [f for f in frames if "moe_sglang/" in f or "service/" in f or "sglang/" in f]


def in_gap(stack: str) -> list[str] | None:
    """The scheduler loop's frames outside forward_batch_generation, or None."""
    if "forward_batch_generation" in stack or "event_loop_normal" not in stack:
        return None
    return stack.split(";")[20:]


mode, pattern = sys.argv[1], sys.argv[2]
select = {"step": in_step, "gap": in_gap}[mode]
inc, total, chosen = collections.Counter(), 0, 0
for path in sorted(glob.glob(pattern)):
    with open(path) as lines:
        for line in lines:
            stack, n = line.rsplit(" ", 1)
            if '"sglang::scheduler"' not in stack:
                continue
            total += int(n)
            frames = select(stack)
            if frames is None:
                continue
            chosen += int(n)
            for key in dict.fromkeys(re.sub(r":\d+\)", ")", f) for f in frames):
                inc[key] += int(n)
print(f"scheduler samples {total}; chosen ({mode}) {chosen}")
for k, v in inc.most_common(60):
    print(f"{v:6d} {k}")
