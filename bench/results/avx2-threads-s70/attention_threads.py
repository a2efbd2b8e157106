"""Scratch (70th session): the decode attention op (sublayer: norm, qkv product, rope, attention over the request's
keys, o product) at moe-fine's shapes (hidden 256, 4 heads of 64, context 200), one vs two threads, batch 1 and 8,
calls back to back and calls 0.5 ms of Python apart (a step's glue between the ops: the OpenMP worker's spin may run
out). Median us per call over 400 calls, per round; rounds alternate the thread count.
usage: PYTHONPATH=. python attention_threads.py OUT.json [rounds] [LIBRARY.so] [QKV_WALK,O_WALK]
QKV_WALK,O_WALK: the walks of the two products at every row count (KINDS names; default: the op's own forms).
"""

import json
import statistics
import sys
import time
from pathlib import Path

import torch

from service.kernels import stream_gemm
from service.kernels.decode_attention import decode_attention

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "kernels"))
from test_decode_attention import _case, _fresh  # noqa: E402
from threads import load_library  # noqa: E402 - this folder's script


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def per_call_us(case: dict, gap_s: float, forms: dict) -> float:
    times = []
    for _ in range(400):
        args = _fresh(case)
        if gap_s:
            busy(gap_s)
        start = time.perf_counter()
        decode_attention(**args, **forms)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    load_library(sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] != "-" else None)
    forms = {}
    if len(sys.argv) > 4:
        qkv, o = (stream_gemm.KINDS.index(name) for name in sys.argv[4].split(","))
        forms = {"kinds_qkv": [qkv] * stream_gemm.MAX_ROWS, "kinds_o": [o] * stream_gemm.MAX_ROWS}
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    cases = {b: _case(b, 4, 4, 64, hidden=256, context=200, seed=b) for b in (1, 8)}
    for case in cases.values():  # the test's rope table holds 64 positions
        case["cos_sin_cache"] = torch.rand(256, 64) * 2 - 1
    rows = []
    for rnd in range(rounds):
        for threads in (1, 2) if rnd % 2 == 0 else (2, 1):
            torch.set_num_threads(threads)
            for batch, case in cases.items():
                for gap in (0.0, 0.0005):
                    rows.append(
                        {
                            "round": rnd,
                            "threads": threads,
                            "batch": batch,
                            "gap_ms": gap * 1e3,
                            "us": per_call_us(case, gap, forms),
                        }
                    )
    summary = {}
    for threads in (1, 2):
        for batch in (1, 8):
            for gap in (0.0, 0.5):
                values = [r["us"] for r in rows if (r["threads"], r["batch"], r["gap_ms"]) == (threads, batch, gap)]
                summary[f"threads {threads} batch {batch} gap {gap} ms"] = statistics.median(values)
    for key, value in summary.items():
        print(f"{key}: {value:.1f} us")
    Path(sys.argv[1]).write_text(
        json.dumps({"library": sys.argv[3] if len(sys.argv) > 3 else None, "rows": rows, "summary": summary}, indent=1)
    )


if __name__ == "__main__":
    main()
