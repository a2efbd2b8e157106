"""Scratch check of the fifty-third session (README, issue 15): does a walk over ~113 MB of bfloat16 weights (16 of
moe-fine x48's experts, w13 + w2, drawn from 128) slow the Python and small tensor ops that run after it, as a decode
step's scheduler runs after its forward, and does the walk's prefetch hint change that? A read-only sum of the weights
(AVX-512) with the hardware prefetchers alone, a T1 prefetch 2 KB ahead, or a non-temporal (NTA) one 1, 2 or 4 KB
ahead, then a fixed workload (dataclasses.replace, dict building, torch.cat and a .item()), 1 thread; the variants
take turns for ROUNDS rounds; medians [min, max] of the walk and of the workload after it, and the workload alone.
Run from the repository root: .venv/bin/python bench/results/plan-cold-s53/nta_python.py [ROUNDS]"""

import dataclasses
import statistics
import sys
import time

import torch
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <immintrin.h>
template<int HINT, int PF>
__attribute__((target("avx512f,avx512bw"))) double walk(const uint16_t* w, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t k = 0; k < n; k += 16) {
    if (PF > 0) _mm_prefetch(reinterpret_cast<const char*>(w + k + PF), static_cast<_mm_hint>(HINT));
    __m512 v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k))), 16));
    acc = _mm512_add_ps(acc, v);
  }
  return _mm512_reduce_add_ps(acc);
}
double run(torch::Tensor t, int64_t kind) {
  const uint16_t* w = reinterpret_cast<const uint16_t*>(t.data_ptr()); int64_t n = t.numel();
  switch (kind) {
    case 0: return walk<_MM_HINT_T0, 0>(w, n);
    case 1: return walk<_MM_HINT_T1, 1024>(w, n);
    case 2: return walk<_MM_HINT_NTA, 1024>(w, n);
    case 3: return walk<_MM_HINT_NTA, 512>(w, n);
    default: return walk<_MM_HINT_NTA, 2048>(w, n);
  }
}
"""
m = load_inline("nta_walk", cpp_sources=src, functions=["run"], extra_cflags=["-O3"], verbose=False)
torch.set_num_threads(1)
# 4 layers x 4 experts x (w13 [9216,256] + w2 [256,4608]) bf16, drawn from a pool of 4 x 32 experts (random)
pool = [torch.randint(0, 1 << 15, (9216 * 256 + 256 * 4608,), dtype=torch.int16) for _ in range(128)]
g = torch.Generator().manual_seed(0)


@dataclasses.dataclass
class Req:
    rid: int
    tokens: list
    pos: int
    extra: dict


reqs = [Req(i, list(range(200)), 200, {"a": i}) for i in range(8)]
small = [torch.arange(64) for _ in range(8)]


def python_work():
    t0 = time.perf_counter()
    s = 0
    for _ in range(20):
        for r in reqs:
            r2 = dataclasses.replace(r, pos=r.pos + 1)
            s += r2.pos + len(r2.tokens) + r2.extra["a"]
        x = torch.cat(small)
        y = x[::3].sum().item()
        s += y
        d = {i: str(i) for i in range(50)}
        s += len(d)
    return time.perf_counter() - t0


def step(kind):
    idx = torch.randint(0, 128, (16,), generator=g).tolist()
    t0 = time.perf_counter()
    for i in idx:
        m.run(pool[i], kind)
    walk = time.perf_counter() - t0
    return walk, python_work()


kinds = {0: "hw only", 1: "T1 1024", 2: "NTA 1024", 3: "NTA 512", 4: "NTA 2048", -1: "no walk"}
res = {k: ([], []) for k in kinds}
for _round in range(int(sys.argv[1]) if len(sys.argv) > 1 else 30):
    for k in kinds:
        if k == -1:
            res[k][1].append(python_work() * 1e3)
            continue
        w, p = step(k)
        res[k][0].append(w * 1e3)
        res[k][1].append(p * 1e3)
bytes_ = 16 * pool[0].numel() * 2
for k, (w, p) in res.items():
    wm = statistics.median(w) if w else 0
    print(
        f"{kinds[k]:10s} walk {wm:6.2f} ms ({bytes_ / wm / 1e6 if wm else 0:5.1f} GB/s)  python after {statistics.median(p):6.3f} ms [{min(p):.3f},{max(p):.3f}]"
    )
