"""Requests per prefill in the engine logs of this session's runs (the logs themselves are not committed: they are
large and .gitignore'd), so the README's counts of whole and split batch-8 waves can be re-read.

    .venv/bin/python bench/results/arrival-gather-s37/prefill_sizes.py
"""

import json
import re
from collections import Counter
from pathlib import Path

ROOT = Path("bench/results")
RUNS = ("policies", "replay", "spec_overhead-x48-s37", "arrival-gather-s37")
PREFILL = re.compile(r"Prefill batch, #new-seq: (\d+), #new-token: (\d+)")

counts = {}
for run in RUNS:
    for log in sorted((ROOT / run).glob("*.log")):
        sizes = Counter()
        for line in log.read_text(errors="replace").splitlines():
            # the start's warm-up prefills (9 and 1 tokens) are not requests of the run
            if (m := PREFILL.search(line)) and int(m.group(2)) > 9:
                sizes[int(m.group(1))] += 1
        counts[f"{run}/{log.name}"] = dict(sorted(sizes.items()))
        print(f"{run}/{log.name}", dict(sorted(sizes.items())))
(Path(__file__).parent / "prefill_sizes.json").write_text(json.dumps(counts, indent=1))
