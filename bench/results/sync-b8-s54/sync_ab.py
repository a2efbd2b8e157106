"""Scratch: the plain engine with and without SGLang's overlap scheduler (none / none-sync of bench.policies), up
together on moe-fine x48 as in the deciding run, waves of 8 math prompts x 32 tokens alternating between them, per
request: TTFT, TPOT, every gap between streamed tokens; per engine and wave: CPU seconds of each of its processes
(the other engine's processes too, idle meanwhile); PAUSE_S (1.0) seconds between the cache flush and a wave.
Usage: sync_ab.py ROUNDS OUT.json"""

import concurrent.futures
import contextlib
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())
from bench._cell import flush_cache
from bench._heldout import prompt_sets
from bench._load import complete, served_model
from bench._models import bench_engine, deciding_setup, timed_model
from bench.policies import PROMPT_TOKENS, as_token_ids
from moe_sglang.launch import SpeculationConfig
from moe_sglang.server import running_engine
from moe_sglang.settings import EngineSettings

TICK = os.sysconf("SC_CLK_TCK")


def cpu_by_group() -> dict[int, dict[str, float]]:
    """CPU seconds (user + system) of every process, keyed by process group, then 'pid name'."""
    groups: dict[int, dict[str, float]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            groups.setdefault(int(fields[2]), {})[f"{pid} {name}"] = (int(fields[11]) + int(fields[12])) / TICK
    return groups


def port_groups(ports: dict[str, int]) -> dict[str, int]:
    """Engine name -> process group of the server whose command line names its port."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/cmdline") as f:
                argv = f.read().split("\0")
            for name, port in ports.items():
                if "--port" in argv and argv[argv.index("--port") + 1] == str(port):
                    found[name] = os.getpgid(int(pid))
    return found


def main() -> None:
    rounds, out = int(sys.argv[1]), sys.argv[2]
    setup = deciding_setup()
    model = timed_model(setup)
    prompts = as_token_ids(prompt_sets(8, 400), model, PROMPT_TOKENS)["math"][:8]
    engines = {"none": (), "none-sync": ("--disable-overlap-schedule",)}
    rows = []
    with contextlib.ExitStack() as stack:
        urls = {}
        for name, extra in engines.items():
            cfg = bench_engine(model, SpeculationConfig(), 1, EngineSettings(), extra)
            urls[name] = stack.enter_context(running_engine(cfg, log_path=f"{out}.{name}.log"))
        groups = port_groups({n: int(u.rsplit(":", 1)[1]) for n, u in urls.items()})
        served = {n: served_model(u) for n, u in urls.items()}
        for r in range(rounds):
            for name in list(engines) if r % 2 == 0 else list(engines)[::-1]:
                url = urls[name]
                flush_cache(url)
                time.sleep(float(os.environ.get("PAUSE_S", "1.0")))
                before, start = cpu_by_group(), time.perf_counter()
                with concurrent.futures.ThreadPoolExecutor(8) as pool:
                    done = list(pool.map(complete, [url] * 8, [served[name]] * 8, prompts, [32] * 8))
                wall, after = time.perf_counter() - start, cpu_by_group()
                cpu = {
                    e: {p: round(s - before.get(g, {}).get(p, 0.0), 3) for p, s in after.get(g, {}).items()}
                    for e, g in groups.items()
                }
                reqs = [
                    dict(ttft_ms=c.ttft_s * 1e3, tpot_ms=c.tpot_s * 1e3, gaps_ms=[
                        round((b - a) * 1e3, 2) for a, b in zip(c.chunk_s, c.chunk_s[1:], strict=False)
                    ]) for c in done
                ]  # fmt: skip
                rows.append(dict(round=r, engine=name, wall_s=wall, cpu_s=cpu, requests=reqs))
                tpot = sum(q["tpot_ms"] for q in reqs) / len(reqs)
                print(
                    r, name, f"tpot {tpot:.1f} wall {wall:.2f}", {e: round(sum(v.values()), 2) for e, v in cpu.items()}
                )
    with open(out, "w") as f:
        json.dump(dict(rows=rows, groups=groups), f, indent=1)


main()
