"""Engine throughput and memory on this machine: tokens/s and peak RSS of the SGLang server (all its processes),
without speculation and with NGRAM / STANDALONE, at 1 and 16 concurrent streams. Ratios are against no speculation
in the same run.

    python -m bench.engine_throughput [--model PATH] [--draft PATH] [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import psutil

from bench._common import figure, out_dir, save_figure, table, write_json
from moe_sglang.launch import DEFAULT_DRAFT_MODEL, DEFAULT_MODEL, EngineConfig, SpeculationConfig
from moe_sglang.server import running_engine

PROMPTS = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "The GNU General Public License is a free, copyleft license for",
    "Question: 17 + 25 = ? Answer:",
    "import os\nimport sys\n\nfor name in sorted(os.listdir(",
]


class PeakRss:
    """Samples the summed RSS of a process tree in a thread; `peak` in bytes."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        self._root, self._every, self.peak = psutil.Process(pid), every, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                procs = [self._root, *self._root.children(recursive=True)]
                self.peak = max(self.peak, sum(p.memory_info().rss for p in procs if p.is_running()))
            except psutil.Error:
                pass
            time.sleep(self._every)


def server_pid(port: int) -> int:
    for conn in psutil.net_connections("tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
            return conn.pid
    raise RuntimeError(f"no process listens on port {port}")


def run_load(url: str, streams: int, requests: int, max_tokens: int) -> dict:
    def one(i: int) -> tuple[int, float]:
        body = {
            "text": PROMPTS[i % len(PROMPTS)],
            "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0, "ignore_eos": True},
        }
        out = httpx.post(f"{url}/generate", json=body, timeout=600).json()
        return out["meta_info"]["completion_tokens"], out["meta_info"].get("spec_accept_length", 1.0)

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(streams) as pool:
        results = list(pool.map(one, range(requests)))
    elapsed = time.perf_counter() - start
    tokens = sum(t for t, _ in results)
    return {
        "tokens": tokens,
        "seconds": elapsed,
        "tokens_per_s": tokens / elapsed,
        "accept_length": sum(a for _, a in results) / len(results),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--draft", default=str(DEFAULT_DRAFT_MODEL))
    parser.add_argument("--quick", action="store_true", help="smoke run: few short requests")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    folder = out_dir(args.out, "engine_throughput")
    max_tokens = 16 if args.quick else 96
    variants = {"none": SpeculationConfig(), "ngram": SpeculationConfig("ngram", topk=1, num_draft_tokens=4)}
    if Path(args.draft).exists():
        variants["standalone"] = SpeculationConfig(
            "standalone", draft_model_path=args.draft, num_steps=3, num_draft_tokens=4
        )
    rows = []
    for name, spec in variants.items():
        config = EngineConfig(model_path=args.model, port=0, speculation=spec)
        with running_engine(replace(config), log_path=folder / f"engine-{name}.log") as url:
            port = int(url.rsplit(":", 1)[1])
            for streams in (1, 16):
                requests = streams * (1 if args.quick else 2)
                run_load(url, streams, min(streams, 2), 4)  # warm-up
                with PeakRss(server_pid(port)) as rss:
                    result = run_load(url, streams, requests, max_tokens)
                rows.append({"speculation": name, "streams": streams, **result, "peak_rss_gb": rss.peak / 2**30})
    base = {r["streams"]: r["tokens_per_s"] for r in rows if r["speculation"] == "none"}
    for r in rows:
        r["speedup_vs_none"] = r["tokens_per_s"] / base[r["streams"]]
    print(
        table(
            rows,
            ["speculation", "streams", "tokens", "tokens_per_s", "speedup_vs_none", "accept_length", "peak_rss_gb"],
        )
    )
    path = write_json(folder, "engine_throughput", {"model": args.model, "max_tokens": max_tokens, "rows": rows})
    _plot(rows, folder / "engine_throughput.png")
    print(f"wrote {path}")
    return 0


def _plot(rows: list[dict], path: Path) -> None:
    fig, (ax,) = figure(1, (6, 3.5))
    names = sorted({r["speculation"] for r in rows}, key=lambda n: n != "none")
    for offset, streams in enumerate((1, 16)):
        values = [
            next(r["tokens_per_s"] for r in rows if r["speculation"] == n and r["streams"] == streams) for n in names
        ]
        ax.bar([i + offset * 0.4 for i in range(len(names))], values, width=0.4, label=f"{streams} stream(s)")
    ax.set_xticks([i + 0.2 for i in range(len(names))], names)
    ax.set_ylabel("tokens/s")
    ax.set_title("SGLang on CPU: throughput by speculation")
    ax.legend()
    save_figure(fig, path)


if __name__ == "__main__":
    raise SystemExit(main())
