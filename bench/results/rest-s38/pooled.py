"""Pooled reading of ab-*.json (38th session): per drafter, task and engine, the mean TPOT of all its moe-serve
requests over the mean of all its K = 0 hint requests. usage: python pooled.py -> pooled.json"""

import json
import statistics
from pathlib import Path

here = Path(__file__).parent
out = {}
for drafter in ("ngram", "standalone"):
    rows = json.loads((here / f"ab-{drafter}.json").read_text())["rows"]
    for task in ("math", "code"):
        for engine in ("old", "new"):

            def mean(variant, key=(task, engine), rows=rows):
                return statistics.mean(
                    r["tpot_ms"] for r in rows if (r["task"], r["engine"], r["variant"]) == (*key, variant)
                )

            out[f"{drafter}/{task}/{engine}"] = dict(
                ms_tpot_ms=mean("ms"), k0_tpot_ms=mean("k0"), ms_over_k0=mean("ms") / mean("k0")
            )
(here / "pooled.json").write_text(json.dumps(out, indent=1))
print(json.dumps(out, indent=1))
