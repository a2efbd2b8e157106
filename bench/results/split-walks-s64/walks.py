"""Scratch (64th session, 2-core AMD EPYC Zen 4, AVX-512): GB/s of the stream walks over 32 bfloat16 weights of
moe-fine x48's expert shapes in turn (weights from memory), 1 thread, at 1, 2 and 4 rows, best of 3 passes, the forms
taking turns; beside them a plain read of the same bytes (no arithmetic: 64-byte loads xor-ed), one read in address
order and 2 / 4 reads of a weight's halves / quarters side by side. One JSON object on stdout.

    PYTHONPATH=. python bench/results/split-walks-s64/walks.py > OUT.json"""

import functools
import json
import time

import torch
from torch.utils.cpp_extension import load_inline

torch.set_num_threads(1)
from service.kernels import small_gemm, stream_gemm  # noqa: E402

READ = r"""
#include <immintrin.h>
#include <torch/extension.h>
// xor of every 64-byte line of w, read as `parts` equal pieces side by side (1: address order)
__attribute__((target("avx512f"))) int64_t read_lines(torch::Tensor w, int64_t parts) {
  const __m512i* p = reinterpret_cast<const __m512i*>(w.data_ptr());
  const int64_t n = w.numel() * w.element_size() / 64 / parts;
  __m512i a = _mm512_setzero_si512();
  for (int64_t i = 0; i + 1 < n; i += 2)
    for (int64_t s = 0; s < parts; ++s) {
      a = _mm512_xor_si512(a, _mm512_loadu_si512(p + s * n + i));
      a = _mm512_xor_si512(a, _mm512_loadu_si512(p + s * n + i + 1));
    }
  return _mm512_reduce_add_epi64(a);
}
"""

assert stream_gemm.load() and stream_gemm.best_isa() == "avx512"
read = load_inline("split_walks_s64_read", cpp_sources=READ, functions=["read_lines"], extra_cflags=["-O3"])


def read_parts(parts: int, w: torch.Tensor) -> int:
    return read.read_lines(w, parts)


torch.manual_seed(0)
FORMS = ("stream_seq", "stream_seq_hw", "stream_l2", "stream_l2_near", "stream", "stream_split4", "stream_split8")
result = {}
for out, inn in ((9216, 256), (256, 4608)):
    stack = torch.randn(32, out, inn).to(torch.bfloat16)
    gb = out * inn * 2 / 1e9
    for m in (1, 2, 4):
        x = torch.randn(m, inn)
        fns = {f"m{m} {form}": functools.partial(small_gemm._FORM_FN[form], x) for form in FORMS}
        if m == 1:
            fns.update({f"read x{parts}": functools.partial(read_parts, parts) for parts in (1, 2, 4)})
        for _ in range(3):
            for name, fn in fns.items():
                start = time.perf_counter()
                for w in stack:
                    fn(w)
                key = f"{out}x{inn} {name}"
                result[key] = max(result.get(key, 0.0), len(stack) * gb / (time.perf_counter() - start))
print(json.dumps({key: round(value, 2) for key, value in result.items()}, indent=1))
