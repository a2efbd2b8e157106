// What stream_gemm.cpp shares with the other ops of the library (decode_attention.cpp): the vector helpers per ISA,
// the product of a few rows in the form a plan chose, and the ISA the CPU runs.
#pragma once

#include <immintrin.h>
#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace moe_serve_stream {

// One vector of floats per ISA (AVX-512F, AVX2 + FMA, SSE2): the operations the kernels of the library are written
// with, each compiled for its ISA by a target attribute (the library has no -march; the ISA is chosen at run time).
__attribute__((target("avx512f"))) inline __m512 zero512() { return _mm512_setzero_ps(); }
__attribute__((target("avx512f"))) inline __m512 load512(const float* p) { return _mm512_loadu_ps(p); }
__attribute__((target("avx512f"))) inline __m512 fma512(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
__attribute__((target("avx512f"))) inline float hsum512(__m512 v) { return _mm512_reduce_add_ps(v); }
__attribute__((target("avx512f"))) inline __m512 add512(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
__attribute__((target("avx2,fma"))) inline __m256 zero256() { return _mm256_setzero_ps(); }
__attribute__((target("avx2,fma"))) inline __m256 load256(const float* p) { return _mm256_loadu_ps(p); }
__attribute__((target("avx2,fma"))) inline __m256 fma256(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
__attribute__((target("avx2,fma"))) inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
__attribute__((target("avx2,fma"))) inline __m256 add256(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
inline __m128 zero128() { return _mm_setzero_ps(); }
inline __m128 load128(const float* p) { return _mm_loadu_ps(p); }
inline __m128 fma128(__m128 a, __m128 b, __m128 c) { return _mm_add_ps(_mm_mul_ps(a, b), c); }
inline float hsum128(__m128 v) {
  __m128 s = _mm_add_ps(v, _mm_movehl_ps(v, v));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}
inline __m128 add128(__m128 a, __m128 b) { return _mm_add_ps(a, b); }
__attribute__((target("avx512f"))) inline __m512 set1_512(float v) { return _mm512_set1_ps(v); }
__attribute__((target("avx512f"))) inline void store512(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
__attribute__((target("avx2,fma"))) inline __m256 set1_256(float v) { return _mm256_set1_ps(v); }
__attribute__((target("avx2,fma"))) inline void store256(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
inline __m128 set1_128(float v) { return _mm_set1_ps(v); }
inline void store128(float* p, __m128 v) { _mm_storeu_ps(p, v); }

// A stream walk of stream_gemm.cpp for one ISA: y[:, begin:end] of x [m, in] @ w [out, in]^T.
using Kernel = void (*)(const float*, const float*, float*, int, int64_t, int64_t, int64_t, int64_t, int64_t);

// The forms of a product other than the stream walks (Kind >= 0): torch's F.linear and (w @ x^T)^T.
constexpr int64_t kLinear = -1, kWeightMajor = -2;

Kernel pick(const std::string& isa);  // "avx512", "avx2" or "base"
std::string best_isa();               // the widest of them this CPU runs (asked of the CPU)
void check_isa(const std::string& isa, const char* op);  // a known ISA this CPU runs, or a TORCH_CHECK error

// y [m, out] = x [m, in] @ w [out, in]^T in form `kind` (a Kind, kLinear or kWeightMajor; F.linear beyond 16 rows).
void planned_product(const torch::Tensor& x, const torch::Tensor& w, torch::Tensor& y, int64_t kind, Kernel kernel);

// The same for a stream walk (kind >= 0) on plain row-major buffers: y [m, out] = x [m, in] @ w [out, in]^T.
void stream_product(const float* x, const float* w, float* y, int64_t m, int64_t in, int64_t out, int64_t kind,
                    Kernel kernel);

// The form for m rows of a per-row-count list (a plan's kinds for rows 1..n; kLinear beyond it).
inline int64_t form_for(at::IntArrayRef kinds, int64_t m) {
  return m >= 1 && m <= static_cast<int64_t>(kinds.size()) ? kinds[m - 1] : kLinear;
}

}  // namespace moe_serve_stream
