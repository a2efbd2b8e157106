"""Scratch (73rd session): py-spy raw stacks of the scheduler process (pyspy_other.py) split into the target's and
the draft's forwards, the draft thread, and the rest of the scheduler's work, the rest by function (inclusive
samples, 500 Hz: 1 sample = 2 ms). usage: python classify.py RAW [N]"""

import collections
import gzip
import sys

FORWARD = ("DirectTarget.", "DirectDraft.", "MixtralForCausalLM.forward", "LlamaForCausalLM.forward")


def name(frame: str) -> str:
    head, rest = frame.split(" (", 1)
    return f"{head} ({rest.split(':')[0]})"


parts = collections.Counter()
rest = collections.Counter()
with gzip.open(sys.argv[1], "rt") as f:
    lines = f.readlines()
for line in lines:
    stack, count = line.rsplit(" ", 1)
    frames = [name(f) for f in stack.split(";")]
    n = int(count)
    if any("Thread._bootstrap" in f for f in frames):
        parts["draft thread"] += n
    elif not any("Scheduler.run_event_loop" in f for f in frames):
        parts["not the scheduler loop"] += n
    elif any(f.startswith(FORWARD) for f in frames):
        parts[
            "target forward" if any("DirectTarget." in f or "MixtralFor" in f for f in frames) else "draft forward"
        ] += n
    else:
        parts["rest"] += n
        start = next(i for i, f in enumerate(frames) if "_dispatch_event_loop_once" in f)
        for f in set(frames[start + 1 :]):
            rest[f] += n
total = sum(parts.values())
for part, n in parts.most_common():
    print(f"{part:28} {n:6d} {100 * n / total:5.1f} %")
print("the rest by function:")
for f, n in rest.most_common(int(sys.argv[2]) if len(sys.argv) > 2 else 40):
    print(f"  {n:5d} {f}")
