"""Scratch (78th session): per cell, the per-round ratio of two rows of a bench.policies JSON (rounds interleaved:
each round ran every row of the cell back to back), median [min, max], and the mean of the cells' medians.
usage: python paired.py POLICIES.json ROW BASELINE_ROW"""

import json
import statistics
import sys
from pathlib import Path

data = json.loads(Path(sys.argv[1]).read_text())
row, base = sys.argv[2], sys.argv[3]
cells: dict[tuple, dict[str, list[float]]] = {}
for r in data["rows"]:
    cells.setdefault((r["drafter"], r["prompts"], r["batch"]), {})[r["policy"]] = r["tpot_ms_rounds"]
medians = []
for cell, rows in sorted(cells.items()):
    if row not in rows or base not in rows:
        continue
    ratios = [a / b for a, b in zip(rows[row], rows[base], strict=True)]
    medians.append(statistics.median(ratios))
    print(f"{'/'.join(map(str, cell)):22s} {row}/{base} {medians[-1]:.3f} [{min(ratios):.3f}, {max(ratios):.3f}]")
print(f"mean of the cells' medians {statistics.mean(medians):.3f} over {len(medians)} cells")
