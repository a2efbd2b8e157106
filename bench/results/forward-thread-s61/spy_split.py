"""Scratch (61st session): where the scheduler process's samples went (py-spy raw, --threads --idle).
For the main thread: inside the model forward (a frame of ModelRunner.forward or EagerRunner._execute_decode on the
stack) or outside, the forward split by the first of its named parts found on the stack, and the largest scheduler
frames outside it. For the forward worker thread (forward_thread.patch, on): in the forward or waiting for work.
usage: python spy_split.py STACKS.raw[.gz]"""

import collections
import gzip
import sys

PARTS = ("decode_moe", "decode_attention", "_lm_head", "ModelRunner.sample", "init_forward_metadata")
path = sys.argv[1]
opener = gzip.open if path.endswith(".gz") else open
threads = collections.defaultdict(collections.Counter)
frames = collections.Counter()
with opener(path, "rt") as f:
    for line in f:
        stack, n = line.rsplit(" ", 1)
        parts, n = stack.split(";"), int(n)
        names = [p.split(" (")[0] for p in parts[1:]]
        thread = "main" if "MainThread" in parts[0] else "worker" if "moe-serve-forward" in parts[0] else None
        if thread is None:
            continue
        if any("ModelRunner.forward" in x or "_execute_decode" in x for x in names):
            part = next((k for k in PARTS if any(k in x for x in names)), "other")
            threads[thread][f"forward: {part}"] += n
        elif any(x.split(".")[-1] == "wait" for x in names):
            threads[thread]["waiting (threading wait)"] += n
        else:
            threads[thread]["outside the forward"] += n
            if thread == "main":
                for name in sorted(set(names)):
                    frames[name] += n
for thread, counts in threads.items():
    total = sum(counts.values())
    inside = sum(v for k, v in counts.items() if k.startswith("forward"))
    print(f"{thread} thread, {total} samples: inside the forward {inside / total:.1%}")
    for key, v in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"  {v / total:5.1%}  {key}")
main = sum(threads["main"].values())
print("largest scheduler frames outside the forward (main thread):")
for name, n in frames.most_common(40):
    if "Scheduler" in name or "process_batch" in name or "forward_batch" in name or "init_new" in name:
        print(f"  {n / main:5.1%}  {name}")
