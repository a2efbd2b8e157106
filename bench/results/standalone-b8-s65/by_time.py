"""Scratch (65th session): the batch-8 waves of steps.jsonl.gz in time order (waves.py's split), each with whose it
is, its requests' rests (every third step), and per step the median duration, policy work (`other_ms`) and forward
time (`verify_ms`: the target's forward, plain or verify), and the gaps between its steps.
Usage: python by_time.py steps.jsonl.gz -> by_time.txt"""

import statistics
import sys

from waves import _lines, waves


def main(path: str) -> None:
    for i, w in enumerate(waves(_lines(path))):
        mine = any(s["resting"] or s["shadow"] or not s["plain"] or s["judge_beside_ms"] for s in w)
        print(
            f"wave {i:>2} {'moe-serve' if mine else 'k0':<9} steps {len(w):>2}  rests {[s['resting'] for s in w][::3]}"
            f"  step {statistics.median((s['end'] - s['start']) * 1e3 for s in w):5.1f} ms"
            f"  other {statistics.median(s['other_ms'] for s in w):4.2f}"
            f"  forward {statistics.median(s['verify_ms'] for s in w):5.1f}"
            f"  gaps {sum(b['start'] - a['end'] for a, b in zip(w, w[1:], strict=False)) * 1e3:5.1f} ms"
        )


if __name__ == "__main__":
    main(sys.argv[1])
