"""Scratch (34th session): the lines of DirectTarget.decode in py-spy samples of a plain moe-fine engine's scheduler
(pyspy_plain.py: 500 Hz, --nonblocking, 20-25 s of closed-loop batch-1 decode, 128-token requests), before (session
start, 1b62ca7) and after (da5d151: the decode attention op, with the std::vector stream_moe of 833bf3a); share of the
samples py-spy could read. py-spy misses ~30 % of samples here and over-weights long native calls: shares, not
times. -> pyspy_summary.json"""

import collections
import gzip
import json
import re
from pathlib import Path

HERE = Path(__file__).parent


def shares(path: Path) -> dict:
    lines, total = collections.Counter(), 0
    with gzip.open(path, "rt") as stacks:
        for raw in stacks:
            stack, n = raw.rstrip().rsplit(" ", 1)
            total += int(n)
            for frame in stack.split(";"):
                m = re.match(r"DirectTarget\.decode \(.*target_forward\.py:(\d+)\)", frame)
                if m:
                    lines[f"target_forward.py:{m.group(1)}"] += int(n)
                    break
    return {
        "samples": total,
        "decode_share": sum(lines.values()) / total,
        "lines": {k: round(v / total, 4) for k, v in lines.most_common()},
    }


out = {name: shares(HERE / f"pyspy-plain-b1-{name}.raw.gz") for name in ("before", "after")}
out["method"] = __doc__
(HERE / "pyspy_summary.json").write_text(json.dumps(out, indent=1))
print(json.dumps(out, indent=1)[:1500])
