"""Scratch (55th session): is the wave-to-wave spread of batch-8 TPOT on this host the hypervisor's steal time, or
time the engine itself spends? Two plain engines on moe-fine x48 (SGLang's overlap scheduler and the synchronous
loop), waves of 8 math prompts alternating between them; per wave: TPOT, the machine's steal share over the wave
(/proc/stat) and the engine's CPU seconds per output token (server and children, as bench.spec_overhead).
Usage: PYTHONPATH=. python steal_waves.py WAVES OUT.json"""

import json
import statistics
import sys
import time

from bench._cell import flush_cache
from bench._heldout import prompt_sets
from bench._load import run_batch, served_model
from bench._models import bench_engine, deciding_setup, timed_model
from bench.policies import PROMPT_TOKENS, as_token_ids
from bench.spec_overhead import cpu_seconds
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings


def cpu_ticks() -> tuple[int, int]:
    """(all ticks, steal ticks) of the machine so far."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return sum(fields), fields[7]


def main() -> None:
    waves, out = int(sys.argv[1]), sys.argv[2]
    model = timed_model(deciding_setup())
    prompts = as_token_ids(prompt_sets(8, 400), model, PROMPT_TOKENS)["math"][:8]
    engines = {
        "none": bench_engine(model, SpeculationConfig(), 1, EngineSettings(), ()),
        "none-sync": bench_engine(model, SpeculationConfig(), 1, EngineSettings(), ("--disable-overlap-schedule",)),
    }
    rows = []
    with running_engine(engines["none"]) as a, running_engine(engines["none-sync"]) as b:
        urls = {"none": a, "none-sync": b}
        models = {n: served_model(u) for n, u in urls.items()}
        for n, u in urls.items():  # warm-up wave each
            run_batch(u, models[n], prompts, 8, 8)
        for w in range(waves):
            for n in ["none", "none-sync"] if w % 2 == 0 else ["none-sync", "none"]:
                flush_cache(urls[n])
                cpu0, (all0, st0) = cpu_seconds(urls[n]), cpu_ticks()
                r = run_batch(urls[n], models[n], prompts, 32, 8)
                cpu1, (all1, st1) = cpu_seconds(urls[n]), cpu_ticks()
                rows.append(
                    {
                        "wave": w,
                        "engine": n,
                        "tpot_ms": r["tpot_ms"],
                        "wall_s": r["wall_s"],
                        "steal_share": (st1 - st0) / max(all1 - all0, 1),
                        "cpu_ms_per_token": (cpu1 - cpu0) / r["tokens"] * 1e3,
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    for n in urls:
        mine = [r for r in rows if r["engine"] == n]
        for k in ("tpot_ms", "cpu_ms_per_token", "steal_share"):
            v = [r[k] for r in mine]
            print(n, k, f"median {statistics.median(v):.3f} min {min(v):.3f} max {max(v):.3f}")
    with open(out, "w") as f:
        json.dump({"at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
