"""Summarize pyspy_ab.py's raw py-spy files: per hint, the scheduler process's samples (inclusive) under chosen
frames, summed over rounds. usage: python summarize.py [FRAME ...]"""

import collections
import glob
import re
import sys
from pathlib import Path

HERE = Path(__file__).parent
FRAMES = sys.argv[1:] or [
    "Scheduler.run_batch",
    "forward_batch_generation",
    "_timed_lookup",
    "SpecRuntime.plan",
    "SpecRuntime.close",
    "SpecRuntime.open",
    "plain_step",
    "verify_step",
    "_judge_shadow",
    "_update_corpus",
    "process_batch_result",
    "get_next_batch_to_run",
    "recv_requests",
    "stream_output",
    "forward_decode",
    "moe_sglang",
]


def frames(stack: str) -> list[str]:
    return [re.sub(r" \(.*", "", f) for f in stack.split(";")]


totals = {}
for label in ("moe-serve", "k0"):
    inc = collections.Counter()
    all_ = 0
    for path in sorted(glob.glob(str(HERE / f"{label}-*.raw"))):
        for line in open(path):  # noqa: SIM115 - scratch
            stack, n = line.rsplit(" ", 1)
            if '"sglang::scheduler"' not in stack:
                continue
            n = int(n)
            fs = frames(stack)
            if fs[-1] in ("select", "poll", "epoll_wait") or "recv_pyobj" in stack and "run_batch" not in stack:
                inc["<idle wait>"] += n
            all_ += n
            seen = set()
            for f in FRAMES:
                if f == "moe_sglang":
                    hit = "moe_sglang/" in stack or "service/policy" in stack
                else:
                    hit = any(x.endswith(f) for x in fs)
                if hit and f not in seen:
                    inc[f] += n
                    seen.add(f)
    totals[label] = (all_, inc)
print(f"{'frame':32s}" + "".join(f"{k:>12s}" for k in totals))
print(f"{'<all scheduler samples>':32s}" + "".join(f"{totals[k][0]:12d}" for k in totals))
for f in ["<idle wait>", *FRAMES]:
    print(f"{f:32s}" + "".join(f"{totals[k][1][f]:12d}" for k in totals))
