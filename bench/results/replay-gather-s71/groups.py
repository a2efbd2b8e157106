"""Scratch (seventy-first session): how each replay of a `bench.replay` run was prefilled, per engine, from the engines'
logs: the `#new-seq` of every prefill between one cache flush (each replay starts with one) and the next. The replay
of the Mooncake window is told from Azure's by its prompt tokens (Mooncake's window holds more).
usage: python bench/results/replay-gather-s71/groups.py FOLDER (bench.replay's --out, holding engine-*.log, or
those logs gzipped)"""

import gzip
import re
import sys
from pathlib import Path

PREFILL = re.compile(r"Prefill batch, #new-seq: (\d+), #new-token: (\d+), #cached-token: (\d+)")


def replays(log: Path) -> list[tuple[int, list[int]]]:
    """(prompt tokens, prefill sizes) per replay, in order."""
    out, current = [], None
    text = gzip.decompress(log.read_bytes()).decode(errors="replace") if log.suffix == ".gz" else log.read_text()
    for line in text.splitlines():
        if "Cache flushed successfully" in line:
            current = [0, []]
            out.append(current)
        elif current is not None and (m := PREFILL.search(line)):
            current[0] += int(m[2]) + int(m[3])
            current[1].append(int(m[1]))
    return [(tokens, sizes) for tokens, sizes in out if sizes]


def main(folder: Path) -> None:
    for log in sorted(folder.glob("engine-*.log*")):
        runs = replays(log)
        if not runs:
            continue
        mooncake = max(t for t, _ in runs)
        moon = [s for t, s in runs if t == mooncake]
        whole = sum(1 for s in moon if s[0] >= 10)
        print(f"{log.name.split('.')[0]}: Mooncake {whole} of {len(moon)} with its first ten in one prefill")
        print("  Mooncake:", " | ".join(" ".join(map(str, s)) for s in moon))
        print("  Azure:   ", " | ".join(" ".join(map(str, s)) for t, s in runs if t != mooncake))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
