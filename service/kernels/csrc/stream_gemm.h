// What stream_gemm.cpp shares with the other ops of the library (decode_attention.cpp): the vector helpers per ISA,
// the product of a few rows in the form a plan chose, and the ISA the CPU runs.
#pragma once

#include <immintrin.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstring>
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
// A vector of bfloat16 weights widened to float32 (exactly: a bfloat16 is a float32's upper 16 bits): the stream
// walks read weights kept as bfloat16 (half the bytes) and multiply in float32 (`Bf16`, below).
__attribute__((target("avx512f"))) inline __m512 load512(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
__attribute__((target("avx2,fma"))) inline __m256 load256(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
inline __m128 load128(const uint16_t* p) {
  return _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline float widen(float v) { return v; }
inline float widen(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
__attribute__((target("avx512f"))) inline __m512 set1_512(float v) { return _mm512_set1_ps(v); }
__attribute__((target("avx512f"))) inline void store512(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
__attribute__((target("avx2,fma"))) inline __m256 set1_256(float v) { return _mm256_set1_ps(v); }
__attribute__((target("avx2,fma"))) inline void store256(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
inline __m128 set1_128(float v) { return _mm_set1_ps(v); }
inline void store128(float* p, __m128 v) { _mm_storeu_ps(p, v); }

// A stream walk of stream_gemm.cpp for one ISA: y[:, begin:end] of x [m, in] @ w [out, in]^T; KernelBf16 the same
// walk over a weight kept as bfloat16 (its raw bits), multiplied in float32.
using Kernel = void (*)(const float*, const float*, float*, int, int64_t, int64_t, int64_t, int64_t, int64_t);
using KernelBf16 = void (*)(const float*, const uint16_t*, float*, int, int64_t, int64_t, int64_t, int64_t, int64_t);

// The forms of a product other than the stream walks (Kind >= 0): torch's F.linear and (w @ x^T)^T.
constexpr int64_t kLinear = -1, kWeightMajor = -2;

// The AMX tile forms of a bfloat16 weight's product (amx_gemm.cpp), numbered after stream_gemm.cpp's walks: the
// hardware prefetchers alone, or a software prefetch of the next blocks into L2.
constexpr int64_t kAmx = 7, kAmxPrefetch = 8;
inline bool is_amx(int64_t kind) { return kind == kAmx || kind == kAmxPrefetch; }
bool amx_ready();  // the CPU has AMX-TILE + AMX-BF16 and the kernel lets this process use the tiles (asked once)
// y [m, out] = x [m, in] @ w [out, in]^T, w bfloat16 bits, m >= 1 (past 16 rows in pieces of 16 under each weight
// block), in form `kind` (kAmx or kAmxPrefetch); a TORCH_CHECK error where amx_ready() is false
void amx_product(const float* x, const uint16_t* w, float* y, int64_t m, int64_t in, int64_t out, int64_t kind);

Kernel pick(const std::string& isa);  // "avx512", "avx2" or "base"
KernelBf16 pick_bf16(const std::string& isa);
std::string best_isa();               // the widest of them this CPU runs (asked of the CPU)
void check_isa(const std::string& isa, const char* op);  // a known ISA this CPU runs, or a TORCH_CHECK error

// y [m, out] = x [m, in] @ w [out, in]^T in form `kind` (a Kind, kLinear or kWeightMajor; F.linear beyond 16 rows
// but in the AMX forms).
void planned_product(const torch::Tensor& x, const torch::Tensor& w, torch::Tensor& y, int64_t kind, Kernel kernel);

// The same for a stream walk (kind >= 0) on plain row-major buffers: y [m, out] = x [m, in] @ w [out, in]^T.
void stream_product(const float* x, const float* w, float* y, int64_t m, int64_t in, int64_t out, int64_t kind,
                    Kernel kernel);
void stream_product(const float* x, const uint16_t* w, float* y, int64_t m, int64_t in, int64_t out, int64_t kind,
                    KernelBf16 kernel);

// The form for m rows of a per-row-count list (a plan's kinds for rows 1..n; kLinear beyond it).
inline int64_t form_for(at::IntArrayRef kinds, int64_t m) {
  return m >= 1 && m <= static_cast<int64_t>(kinds.size()) ? kinds[m - 1] : kLinear;
}

// dot(a, b) over n floats (two accumulators) and y += s * x, per ISA: the vector helpers above, compiled with the
// ISA's target attribute and chosen at run time (vec_for) as the stream kernel is
#define DOT_AXPY(NAME, TARGET, VEC, WIDTH, ZERO, LOAD, FMA, ADD, HSUM, SET1, STORE)                             \
  __attribute__((target(TARGET))) inline float dot_##NAME(const float* a, const float* b, int64_t n) {          \
    VEC acc0 = ZERO(), acc1 = ZERO();                                                                           \
    int64_t i = 0;                                                                                              \
    for (; i + 2 * WIDTH <= n; i += 2 * WIDTH) {                                                                \
      acc0 = FMA(LOAD(a + i), LOAD(b + i), acc0);                                                               \
      acc1 = FMA(LOAD(a + i + WIDTH), LOAD(b + i + WIDTH), acc1);                                               \
    }                                                                                                           \
    for (; i + WIDTH <= n; i += WIDTH) acc0 = FMA(LOAD(a + i), LOAD(b + i), acc0);                              \
    float s = HSUM(ADD(acc0, acc1));                                                                            \
    for (; i < n; ++i) s += a[i] * b[i];                                                                        \
    return s;                                                                                                   \
  }                                                                                                             \
  __attribute__((target(TARGET))) inline void axpy_##NAME(float* y, float s, const float* x, int64_t n) {       \
    const VEC sv = SET1(s);                                                                                     \
    int64_t i = 0;                                                                                              \
    for (; i + WIDTH <= n; i += WIDTH) STORE(y + i, FMA(sv, LOAD(x + i), LOAD(y + i)));                         \
    for (; i < n; ++i) y[i] += s * x[i];                                                                        \
  }

DOT_AXPY(avx512, "avx512f", __m512, 16, zero512, load512, fma512, add512, hsum512, set1_512, store512)
DOT_AXPY(avx2, "avx2,fma", __m256, 8, zero256, load256, fma256, add256, hsum256, set1_256, store256)
DOT_AXPY(base, "sse2", __m128, 4, zero128, load128, fma128, add128, hsum128, set1_128, store128)

struct Vec {
  float (*dot)(const float*, const float*, int64_t);
  void (*axpy)(float*, float, const float*, int64_t);
};

inline Vec vec_for(const std::string& isa) {
  if (isa == "avx512") return {dot_avx512, axpy_avx512};
  if (isa == "avx2") return {dot_avx2, axpy_avx2};
  return {dot_base, axpy_base};
}

// y = x * rsqrt(mean(x^2) + eps) * w per row of x [rows, n] (SGLang's RMSNorm in float32; the sum of squares in the
// ISA's dot, so in another order than torch's: equal to float rounding)
inline void rms_norm_rows(const Vec& vec, const float* x, const float* w, float* y, int64_t rows, int64_t n,
                          float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    const float mean = vec.dot(xr, xr, n) / static_cast<float>(n);
    const float s = 1.0f / std::sqrt(mean + eps);
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = (xr[i] * s) * w[i];
  }
}

// out [T, H] = sum_j topk_weights[t, j] * expert_{topk_ids[t, j]}(x[t]) with SiLU gating, expert e's m rows in the
// forms kinds13[m - 1] / kinds2[m - 1] (stream_gemm.cpp's stream_moe; the caller checks shapes, dtypes and the ISA;
// this checks the kinds and the ids)
torch::Tensor expert_forward(const torch::Tensor& x, const torch::Tensor& w13, const torch::Tensor& w2,
                             const torch::Tensor& topk_ids, const torch::Tensor& topk_weights, const std::string& isa,
                             at::IntArrayRef kinds13, at::IntArrayRef kinds2);

}  // namespace moe_serve_stream
