"""The seventy-second session's batch-1 floor runs on a Zen 5 host, one line per run (in time order) and the medians
per engine thread count: `python bench/results/zen5-floor-s72/summarise.py` (reads the JSON beside it)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent
ORDER = ["sp1", "sp2", "sp3", "t2r1", "t1r1", "t2r2", "t1r2", "t2r3", "t1r3"]  # the order they ran in


def decode(run: dict, batch: int) -> dict:
    return next(r for r in run["rows"] if r["stage"] == "decode" and r["batch"] == batch)


def main() -> None:
    by_threads: dict[int, list[tuple[float, float, float]]] = {}
    print("run   threads  copy GB/s (2 thr / engine's)  b1 TPOT ms  b1 / engine's floor  b8 TPOT ms  b8 / floor")
    for name in ORDER:
        run = json.loads((HERE / f"{name}.json").read_text())
        one, eight = decode(run, 1), decode(run, 8)
        threads = run["engine_threads"]
        print(
            f"{name:5} {threads:7}  {run['bandwidth_bytes_per_s'] / 1e9:5.1f} / {run['thread_bandwidth_bytes_per_s'] / 1e9:5.1f}"
            f"{'':15}  {one['tpot_ms']:10.2f}  {one['tpot_over_thread_floor']:19.2f}"
            f"  {eight['tpot_ms']:10.2f}  {eight['tpot_over_thread_floor']:10.2f}"
        )
        rate = run["thread_bandwidth_bytes_per_s"]
        by_threads.setdefault(threads, []).append((one["tpot_ms"], rate, one["weight_bytes"]))
    for threads, rows in sorted(by_threads.items()):
        tpot = statistics.median(t for t, _, _ in rows)
        rate = statistics.median(r for _, r, _ in rows)
        floor = rows[0][2] / rate * 1e3
        within = sum(1 for t, r, b in rows if t / (b / r * 1e3) <= 1.5)
        print(
            f"{threads} thread(s), {len(rows)} runs: b1 TPOT median {tpot:.2f} ms, copy rate median {rate / 1e9:.1f} GB/s"
            f" (floor {floor:.2f} ms): {tpot / floor:.2f}x; runs within 1.5x of their own floor: {within} of {len(rows)}"
        )


if __name__ == "__main__":
    main()
