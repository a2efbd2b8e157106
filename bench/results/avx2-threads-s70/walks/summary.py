"""Medians per walk of walks_across.py's rounds (old: each product split across two threads; new: whole experts per
thread), batch 1 and 8, and new / old. usage: python summary.py [FOLDER]"""

import json
import statistics
import sys
from pathlib import Path

folder = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent)
found: dict[tuple, list[float]] = {}
for path in sorted(folder.glob("*-*.json")):
    variant = path.name.split("-")[0]
    for row in json.loads(path.read_text())["rows"]:
        for batch in ("b1_ms", "b8_ms"):
            found.setdefault((row["walk"], batch, variant), []).append(row[batch])
for walk in dict.fromkeys(key[0] for key in found):
    cells = []
    for batch in ("b1_ms", "b8_ms"):
        old, new = (statistics.median(found[(walk, batch, v)]) for v in ("old", "new"))
        cells.append(f"{batch} split {old:6.2f} whole {new:6.2f} ({new / old:.3f})")
    print(f"{walk:17s}", " | ".join(cells))
