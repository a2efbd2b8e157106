// Scratch (63rd session, AVX2-only EPYC): one bfloat16 weight widening per 8 weights (zero-extend, shift: the
// library's) against a shift and a mask per 16 (even and odd lanes, each x row permuted to match), M rows, 48
// matrices of x48's expert shapes in turn, best of 5 passes. Output: widen_bench.txt.
#include <immintrin.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
// y[r, j] = sum_k x[r,k] * w[j,k]; w bf16 [out, in]
static inline __m256 widen8(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
template <int M>
void cur(const float* x, const uint16_t* w, float* y, int64_t in, int64_t out) {
  for (int64_t j = 0; j < out; ++j) {
    const uint16_t* wj = w + j * in;
    __m256 acc[M][2];
    for (int r = 0; r < M; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < in; k += 16) {
      __m256 w0 = widen8(wj + k), w1 = widen8(wj + k + 8);
      for (int r = 0; r < M; ++r) {
        acc[r][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + r * in + k), acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + r * in + k + 8), acc[r][1]);
      }
    }
    for (int r = 0; r < M; ++r) y[r * out + j] = hsum(_mm256_add_ps(acc[r][0], acc[r][1]));
  }
}
// even/odd: x pre-split per 16 block: xe[k/2..] = x[even], xo = x[odd], stored as [blk][8 even][8 odd]
template <int M>
void eo(const float* xs, const uint16_t* w, float* y, int64_t in, int64_t out) {
  const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
  for (int64_t j = 0; j < out; ++j) {
    const uint16_t* wj = w + j * in;
    __m256 acc[M][2];
    for (int r = 0; r < M; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < in; k += 16) {
      __m256i v = _mm256_loadu_si256((const __m256i*)(wj + k));
      __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
      __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(v, hi));
      for (int r = 0; r < M; ++r) {
        acc[r][0] = _mm256_fmadd_ps(we, _mm256_loadu_ps(xs + r * in + k), acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(wo, _mm256_loadu_ps(xs + r * in + k + 8), acc[r][1]);
      }
    }
    for (int r = 0; r < M; ++r) y[r * out + j] = hsum(_mm256_add_ps(acc[r][0], acc[r][1]));
  }
}
int main(int argc, char** argv) {
  const int64_t out = atoi(argv[1]), in = atoi(argv[2]);
  const int E = 48;
  std::vector<uint16_t> w(E * out * in);
  for (auto& v : w) v = 0x3f80 + (rand() & 0x7f);
  std::vector<float> x(16 * in), xs(16 * in), y(16 * out);
  for (auto& v : x) v = (rand() % 100) / 100.f;
  for (int r = 0; r < 16; ++r)
    for (int64_t b = 0; b < in; b += 16)
      for (int i = 0; i < 8; ++i) { xs[r * in + b + i] = x[r * in + b + 2 * i]; xs[r * in + b + 8 + i] = x[r * in + b + 2 * i + 1]; }
  double gb = E * out * in * 2 / 1e9;
  auto run = [&](auto fn) {
    double best = 1e9;
    for (int rep = 0; rep < 5; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      for (int e = 0; e < E; ++e) fn(e);
      double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, t);
    }
    return gb / best;
  };
#define ROW(M) { \
    double a = run([&](int e) { cur<M>(x.data(), w.data() + e * out * in, y.data(), in, out); }); \
    float c0 = y[0]; \
    double b = run([&](int e) { eo<M>(xs.data(), w.data() + e * out * in, y.data(), in, out); }); \
    printf("%ldx%ld m=%2d cur %5.1f GB/s  evenodd %5.1f GB/s  (check %g %g)\n", out, in, M, a, b, c0, y[0]); }
  ROW(1) ROW(2) ROW(3) ROW(4) ROW(6) ROW(8)
}
