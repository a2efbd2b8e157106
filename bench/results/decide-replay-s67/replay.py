"""Scratch (67th session): replay decide() calls captured in the engine (capture_sitecustomize.py) with the code of
this tree: each call's time (best of REPEATS, each from a fresh unpickled copy) against its engine time, and whether
its decision equals the captured one. Usage: PYTHONPATH=. python replay.py CAPTURE.pkl [REPEATS] [OUT.json]"""

import json
import pickle
import statistics
import sys
import time


def records(path: str):
    with open(path, "rb") as f:
        while True:
            try:
                yield pickle.load(f)
            except EOFError:
                return


def main() -> None:
    path = sys.argv[1]
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    rows, differ = [], 0
    for rec in records(path):
        best = float("inf")
        for _ in range(repeats):
            policy, batch = pickle.loads(rec["state"])
            start = time.perf_counter()
            out = policy.decide(batch)
            best = min(best, time.perf_counter() - start)
        same = out == rec["decision"]
        differ += not same
        rows.append({"bs": len(batch.requests), "engine_ms": rec["ms"], "ms": best * 1e3, "same": same})
    by_bs: dict[int, list[float]] = {}
    for r in rows:
        by_bs.setdefault(r["bs"], []).append(r["ms"])
    print(f"{len(rows)} calls, {differ} decisions differ from the captured ones")
    print("batch  calls  total ms  mean ms  median ms  max ms")
    for bs, xs in sorted(by_bs.items()):
        mean, median = statistics.mean(xs), statistics.median(xs)
        print(f"{bs:5d}  {len(xs):5d}  {sum(xs):8.1f}  {mean:7.3f}  {median:9.3f}  {max(xs):6.2f}")
    if len(sys.argv) > 3:
        with open(sys.argv[3], "w") as f:
            json.dump({"capture": path, "repeats": repeats, "differ": differ, "rows": rows}, f)


if __name__ == "__main__":
    main()
