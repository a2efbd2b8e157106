"""Scratch A/B (34th session): one MoE layer's expert forward (stream_gemm.stream_moe) as built from three commits,
each in its own process and build folder, rounds rotated: `tensor` (da5d151: every expert hit through tensor ops),
`vector` (833bf3a: stream-walk hits on std::vector buffers) and `aligned` (7171e0d and later: on torch allocations).
moe-fine's layer (32 experts [192, 256] / [256, 96]) and x48's ([9216, 256] / [256, 4608]), 1 and 8 tokens top-4,
random expert ids, each of 4 layers' weights in turn; the plan's kinds of this host (w13: sequential_hw at 1 row,
sequential to 11; w2: sequential_hw, then lockstep_l2_near to 8, F.linear beyond); 1 thread; median of 5 timings.
usage: python stream_moe_ab.py ROUNDS tensor=WORKTREE:EXTDIR vector=... aligned=... -> stream_moe_ab.json"""

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time, torch
sys.path.insert(0, sys.argv[1])
torch.set_num_threads(1)
from service.kernels import stream_gemm
assert stream_gemm.load(), stream_gemm.error()
E, H, k13, k2 = 32, 256, [4] + [3] * 10 + [0] * 5, [4] + [2] * 7 + [-1] * 8
out = {}
for inter, tokens, reps in ((96, 1, 2000), (96, 8, 1000), (4608, 1, 100), (4608, 8, 30)):
    g = torch.Generator().manual_seed(0)
    w13s = [torch.randn(E, 2 * inter, H, generator=g) for _ in range(4)]
    w2s = [torch.randn(E, H, inter, generator=g) for _ in range(4)]
    x, w = torch.randn(tokens, H, generator=g), torch.rand(tokens, 4, generator=g)
    ids = [torch.stack([torch.randperm(E, generator=g)[:4] for _ in range(tokens)]) for _ in range(64)]
    it = [0]
    def f():
        i = it[0] = (it[0] + 1) % 64
        stream_gemm.stream_moe(x, w13s[i % 4], w2s[i % 4], ids[i], w, k13, k2)
    for _ in range(8): f()
    times = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps): f()
        times.append((time.perf_counter() - t) / reps * 1e6)
    out[f"inter{inter}-t{tokens}"] = sorted(times)[2]
print(json.dumps(out))
"""

rounds = int(sys.argv[1])
builds = dict(arg.split("=", 1) for arg in sys.argv[2:])
rows = []
for r in range(rounds):
    names = list(builds)
    for name in names[r % len(names) :] + names[: r % len(names)]:
        tree, ext = builds[name].split(":")
        env = dict(os.environ, MOE_SERVE_EXTENSIONS_DIR=ext)
        res = subprocess.run([sys.executable, "-c", CHILD, tree], env=env, cwd=tree, capture_output=True, text=True)
        us = json.loads(res.stdout.strip().splitlines()[-1])
        rows.append({"round": r, "build": name, "us_per_layer_call": us})
        print(r, name, {k: round(v, 1) for k, v in us.items()}, flush=True)
cases = list(rows[0]["us_per_layer_call"])
summary = {
    name: {c: statistics.median(x["us_per_layer_call"][c] for x in rows if x["build"] == name) for c in cases}
    for name in builds
}
print(json.dumps(summary, indent=1))
Path(__file__).with_name("stream_moe_ab.json").write_text(
    json.dumps({"method": __doc__, "rows": rows, "median_us_per_layer_call": summary}, indent=1)
)
