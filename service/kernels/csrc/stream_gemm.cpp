// y[m, out] = x[m, in] @ w[out, in]^T for a few rows (m <= 16), float32, reading w once, row by row.
//
// The expert products of a MoE decode or verify step multiply 1-16 rows by a weight that comes from memory; the time
// should be the weight's bytes over the memory bandwidth whatever m is. BLAS GEMMs do not stay there: on a 2-core
// Intel Xeon (MKL, 1 thread, an expert's w13 [9216, 256]) F.linear took 0.70 ms for one row and 1.33 / 1.76 ms for
// 4 / 8 (table in stream_gemm.py). Here each output feature j is one pass over w[j] with m accumulators (the x rows
// stay in cache), so w is streamed once at any m.
//
// The CPU differs between machines (AVX-512 on some, AVX2 only on others): the loop is compiled three times with
// GCC's target attribute (AVX-512F, AVX2 + FMA, the baseline) and picked at run time from what the CPU reports.
// The sums run in a different order than BLAS's, so results agree with F.linear to float rounding, not bit for bit.

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/library.h>
#include <torch/torch.h>

#include <immintrin.h>

#include "stream_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

using namespace moe_serve_stream;  // the vector helpers per ISA (stream_gemm.h)

constexpr int kMaxRows = 16;
// the most rows an expert hit with bfloat16 weights multiplies by walks over pieces of kMaxRows rows: moe-fine x48's
// experts, 1 thread, 2-core AMD EPYC with AVX-512 (bench/results/bf16-experts-s44/chunks.txt): pieces 0.75-1.04x
// of F.linear on a float32 copy at 17-32 rows over two runs, 1.32x / 1.21x at 48 / 64 (the runs' spread is +-25 %)
constexpr int64_t kChunkedRows = 32;

// Whether a plan's forms for rows 1..kMaxRows are all stream walks (a bfloat16 weight's plan: torch's forms are not
// timed for it).
bool all_walks(at::IntArrayRef kinds) {
  return static_cast<int64_t>(kinds.size()) >= kMaxRows &&
         std::all_of(kinds.begin(), kinds.begin() + kMaxRows, [](int64_t kind) { return kind >= 0; });
}

// How the weight is walked and prefetched (`kind`, the op's last argument). Which is fastest depends on the CPU and
// the weight's shape, so GemmPlan times each on the layer's own weights (small_gemm.py's forms stream*). Measured on
// a 2-core AMD EPYC with AVX-512 (1 thread, 96 experts shaped like moe-fine x48's visited in random order, weight
// GB/s; a plain read of memory ran at 33.5 GB/s there):
//
//   kind            w13 [9216, 256]  rows 1    2    4    8     w2 [256, 4608]  rows 1    2    4    8
//   kLockstep                          10.4 11.1  8.9  8.4                      21.5 18.9 16.3 11.9
//   kLockstepL2                        16.0 23.4 18.8 17.4                      25.0 22.2 17.3 14.7
//   kLockstepL2Near                    12.1 14.6  9.4 13.1                      27.4 25.2 17.8 16.0
//   kSequential                        28.4 22.1 23.1 17.2                      22.9 17.0 13.2  8.8
//
// kLockstep (R output features side by side, software prefetch 8 KB ahead of each weight row into L1) was the fastest
// on the 2-core Intel Xeon it was written on (4 rows of w13: 1.1 ms without the prefetch, 0.66 with it; 1024 to 4096
// floats ahead within a few percent of each other). On the EPYC, R features side by side touch R weight rows 1 KB
// apart at each step when a row is short (w13's 256 floats), and its prefetchers fetched them at a third of the rate
// of a read in address order (kSequential: one feature after another, i.e. the weight in address order); prefetching
// into L2 rather than L1 helped every lockstep walk there.
// kSequentialHw is kSequential without software prefetch, the CPU's own prefetchers alone: on a 2-core AMD EPYC with
// AVX2 only (1 thread, 64 experts in turn, one row) it read w13 at 16.2-17.6 GB/s and w2 at 17.3-17.7 where
// kSequential read 13.8-13.9 and 11.5-13.3, and torch's read-only sum of the same weights 15.7-18.0 (two runs).
// kSplit4 / kSplit8 cut the features into 4 / 8 ranges of equal length and walk them side by side, each range in
// address order: as many streams for the hardware prefetchers, each a long run of whole weight rows. On a 2-core AMD
// EPYC with AVX-512 (Zen 4, 1 thread, 32 bfloat16 weights of x48's expert shapes in turn, GB/s in two runs:
// bench/results/split-walks-s64/walks-*.json) a plain read of w2's bytes in address order ran at 21.6-30.0 and four
// such reads side by side at 27.3-35.8; kSplit4 / kSplit8 read w13 at one row at 25.3-28.3 where kSequential read
// 22.4-24.4, w2 at one row 22.6-26.2 (kSplit8) against 18.3-21.8, at 2 and 4 rows 19.7-24.9 and 21.2-23.1 (kSplit4)
// against 15.4-17.6 and 15.4-16.5 (kLockstepL2Near, the best walk before).
enum Kind : int64_t {
  kLockstep = 0,
  kLockstepL2 = 1,
  kLockstepL2Near = 2,
  kSequential = 3,
  kSequentialHw = 4,
  kSplit4 = 5,
  kSplit8 = 6
};
// and the AMX forms of a bfloat16 weight (stream_gemm.h: kAmx, kAmxPrefetch)
constexpr int64_t kKinds = 9;

// R output features at a time, M x rows: R * M accumulators of one vector each, every weight vector loaded once and
// used M times, each x vector loaded once per k step and used R times; one horizontal sum per output at the end.
// HINT and PF (floats ahead of each weight row being read; a bfloat16 weight prefetches the same bytes ahead) are the
// kind's prefetch; PF = 0: none.
// kSequential: one output feature at a time, M accumulators, the weight read in address order.
// W: float, or uint16_t for a bfloat16 weight (its bits), widened to float32 exactly as it is loaded (load512 etc.,
// widen); the tails (features past the last whole vector) are explicit fused multiply-adds, so a weight's float32
// and bfloat16 forms give the same bits (the compiler contracted one form's tail and not the other's).
#define STREAM_KERNEL(NAME, TARGET, VEC, WIDTH, ZERO, LOAD, FMA, ADD, HSUM)                                     \
  template <typename W, int M, int R, int HINT, int64_t PF>                                                     \
  __attribute__((target(TARGET))) void NAME##_block(const float* x, const W* w, float* y, int64_t j,            \
                                                    int64_t in, int64_t out, int64_t body, int64_t stride = 1) { \
    VEC acc[R][M];                                                                                              \
    for (int a = 0; a < R; ++a)                                                                                 \
      for (int r = 0; r < M; ++r) acc[a][r] = ZERO();                                                           \
    for (int64_t k = 0; k < body; k += WIDTH) {                                                                 \
      VEC wv[R];                                                                                                \
      for (int a = 0; a < R; ++a) {                                                                             \
        wv[a] = LOAD(w + (j + a * stride) * in + k);                                                            \
        if (PF > 0)                                                                                             \
          _mm_prefetch(reinterpret_cast<const char*>(w + (j + a * stride) * in + k + PF * 4 / sizeof(W)),       \
                       static_cast<_mm_hint>(HINT));                                                            \
      }                                                                                                         \
      for (int r = 0; r < M; ++r) {                                                                             \
        const VEC xv = LOAD(x + r * in + k);                                                                    \
        for (int a = 0; a < R; ++a) acc[a][r] = FMA(wv[a], xv, acc[a][r]);                                      \
      }                                                                                                         \
    }                                                                                                           \
    for (int a = 0; a < R; ++a) {                                                                               \
      const W* wj = w + (j + a * stride) * in;                                                                  \
      for (int r = 0; r < M; ++r) {                                                                             \
        float s = HSUM(acc[a][r]);                                                                              \
        for (int64_t k = body; k < in; ++k) s = std::fma(widen(wj[k]), x[r * in + k], s);                       \
        y[r * out + j + a * stride] = s;                                                                        \
      }                                                                                                         \
    }                                                                                                           \
  }                                                                                                             \
  /* one row, one feature at a time: four accumulators, so the FMAs of a weight row are four chains, not one */ \
  template <typename W, int64_t PF>                                                                             \
  __attribute__((target(TARGET))) void NAME##_seq1(const float* x, const W* w, float* y, int64_t begin,         \
                                                   int64_t end, int64_t in, int64_t body) {                     \
    const int64_t body4 = body - body % (4 * WIDTH);                                                            \
    for (int64_t j = begin; j < end; ++j) {                                                                     \
      const W* wj = w + j * in;                                                                                 \
      VEC a0 = ZERO(), a1 = ZERO(), a2 = ZERO(), a3 = ZERO();                                                   \
      int64_t k = 0;                                                                                            \
      for (; k < body4; k += 4 * WIDTH) {                                                                       \
        if (PF > 0) _mm_prefetch(reinterpret_cast<const char*>(wj + k + PF * 4 / sizeof(W)), _MM_HINT_T1);      \
        a0 = FMA(LOAD(wj + k), LOAD(x + k), a0);                                                                \
        a1 = FMA(LOAD(wj + k + WIDTH), LOAD(x + k + WIDTH), a1);                                                \
        a2 = FMA(LOAD(wj + k + 2 * WIDTH), LOAD(x + k + 2 * WIDTH), a2);                                        \
        a3 = FMA(LOAD(wj + k + 3 * WIDTH), LOAD(x + k + 3 * WIDTH), a3);                                        \
      }                                                                                                         \
      for (; k < body; k += WIDTH) a0 = FMA(LOAD(wj + k), LOAD(x + k), a0);                                     \
      float s = HSUM(ADD(ADD(a0, a1), ADD(a2, a3)));                                                            \
      for (k = body; k < in; ++k) s = std::fma(widen(wj[k]), x[k], s);                                          \
      y[j] = s;                                                                                                 \
    }                                                                                                           \
  }                                                                                                             \
  template <typename W, int M, int HINT, int64_t PF>                                                            \
  __attribute__((target(TARGET))) void NAME##_walk(const float* x, const W* w, float* y, int64_t begin,         \
                                                   int64_t end, int64_t in, int64_t out, int64_t body) {        \
    constexpr int R = (M <= 4) ? 4 : (M <= 8 ? 2 : 1); /* R * M accumulators within the register file */        \
    int64_t j = begin;                                                                                          \
    for (; j + R <= end; j += R) NAME##_block<W, M, R, HINT, PF>(x, w, y, j, in, out, body);                    \
    for (; j < end; ++j) NAME##_block<W, M, 1, HINT, PF>(x, w, y, j, in, out, body);                            \
  }                                                                                                             \
  /* S ranges of features side by side, each in address order (kSplit*): S * M accumulators (fewer ranges */   \
  /* where they would not fit the vector registers); the features past S equal ranges one at a time */         \
  template <typename W, int M, int S, int64_t PF>                                                               \
  __attribute__((target(TARGET))) void NAME##_split(const float* x, const W* w, float* y, int64_t begin,        \
                                                    int64_t end, int64_t in, int64_t out, int64_t body) {       \
    constexpr int kAccumulators = WIDTH == 16 ? 24 : 12;                                                        \
    constexpr int R = S * M <= kAccumulators ? S : (kAccumulators / M > 1 ? kAccumulators / M : 1);             \
    const int64_t len = (end - begin) / R;                                                                      \
    for (int64_t i = 0; i < len; ++i)                                                                           \
      NAME##_block<W, M, R, _MM_HINT_T1, PF>(x, w, y, begin + i, in, out, body, len);                           \
    for (int64_t j = begin + R * len; j < end; ++j)                                                             \
      NAME##_block<W, M, 1, _MM_HINT_T1, PF>(x, w, y, j, in, out, body);                                        \
  }                                                                                                             \
  template <typename W, int M>                                                                                  \
  __attribute__((target(TARGET))) void NAME##_rows(const float* x, const W* w, float* y, int64_t begin,         \
                                                   int64_t end, int64_t in, int64_t out, int64_t kind) {        \
    const int64_t body = in - in % WIDTH;                                                                       \
    switch (kind) {                                                                                             \
      case kLockstep: return NAME##_walk<W, M, _MM_HINT_T0, 2048>(x, w, y, begin, end, in, out, body);          \
      case kLockstepL2: return NAME##_walk<W, M, _MM_HINT_T1, 2048>(x, w, y, begin, end, in, out, body);        \
      case kLockstepL2Near: return NAME##_walk<W, M, _MM_HINT_T1, 512>(x, w, y, begin, end, in, out, body);     \
      case kSplit4: return NAME##_split<W, M, 4, 1024>(x, w, y, begin, end, in, out, body);                     \
      case kSplit8: return NAME##_split<W, M, 8, 0>(x, w, y, begin, end, in, out, body);                        \
      case kSequentialHw: /* kSequential with the hardware prefetchers alone */                                 \
        if (M == 1) return NAME##_seq1<W, 0>(x, w, y, begin, end, in, body);                                    \
        for (int64_t j = begin; j < end; ++j) NAME##_block<W, M, 1, _MM_HINT_T1, 0>(x, w, y, j, in, out, body); \
        return;                                                                                                 \
      default: /* kSequential: one feature at a time, nearer prefetch for one row (fewer FMAs per byte) */      \
        if (M == 1) return NAME##_seq1<W, 512>(x, w, y, begin, end, in, body);                                  \
        for (int64_t j = begin; j < end; ++j)                                                                   \
          NAME##_block<W, M, 1, _MM_HINT_T1, M == 1 ? 512 : 2048>(x, w, y, j, in, out, body);                   \
    }                                                                                                           \
  }                                                                                                             \
  template <typename W>                                                                                         \
  __attribute__((target(TARGET))) void NAME(const float* x, const W* w, float* y, int m, int64_t begin,         \
                                            int64_t end, int64_t in, int64_t out, int64_t kind) {               \
    switch (m) {                                                                                                \
      case 1: return NAME##_rows<W, 1>(x, w, y, begin, end, in, out, kind);                                     \
      case 2: return NAME##_rows<W, 2>(x, w, y, begin, end, in, out, kind);                                     \
      case 3: return NAME##_rows<W, 3>(x, w, y, begin, end, in, out, kind);                                     \
      case 4: return NAME##_rows<W, 4>(x, w, y, begin, end, in, out, kind);                                     \
      case 5: return NAME##_rows<W, 5>(x, w, y, begin, end, in, out, kind);                                     \
      case 6: return NAME##_rows<W, 6>(x, w, y, begin, end, in, out, kind);                                     \
      case 7: return NAME##_rows<W, 7>(x, w, y, begin, end, in, out, kind);                                     \
      case 8: return NAME##_rows<W, 8>(x, w, y, begin, end, in, out, kind);                                     \
      case 9: return NAME##_rows<W, 9>(x, w, y, begin, end, in, out, kind);                                     \
      case 10: return NAME##_rows<W, 10>(x, w, y, begin, end, in, out, kind);                                   \
      case 11: return NAME##_rows<W, 11>(x, w, y, begin, end, in, out, kind);                                   \
      case 12: return NAME##_rows<W, 12>(x, w, y, begin, end, in, out, kind);                                   \
      case 13: return NAME##_rows<W, 13>(x, w, y, begin, end, in, out, kind);                                   \
      case 14: return NAME##_rows<W, 14>(x, w, y, begin, end, in, out, kind);                                   \
      case 15: return NAME##_rows<W, 15>(x, w, y, begin, end, in, out, kind);                                   \
      default: return NAME##_rows<W, 16>(x, w, y, begin, end, in, out, kind);                                   \
    }                                                                                                           \
  }

STREAM_KERNEL(stream_avx512, "avx512f", __m512, 16, zero512, load512, fma512, add512, hsum512)
STREAM_KERNEL(stream_avx2, "avx2,fma", __m256, 8, zero256, load256, fma256, add256, hsum256)
STREAM_KERNEL(stream_base, "sse2", __m128, 4, zero128, load128, fma128, add128, hsum128)

}  // namespace

namespace moe_serve_stream {

Kernel pick(const std::string& isa) {
  if (isa == "avx512") return stream_avx512<float>;
  if (isa == "avx2") return stream_avx2<float>;
  return stream_base<float>;
}

KernelBf16 pick_bf16(const std::string& isa) {
  if (isa == "avx512") return stream_avx512<uint16_t>;
  if (isa == "avx2") return stream_avx2<uint16_t>;
  return stream_base<uint16_t>;
}

std::string best_isa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "avx512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
  return "base";
}

void check_isa(const std::string& isa, const char* op) {
  TORCH_CHECK(isa == "avx512" || isa == "avx2" || isa == "base", op, ": unknown isa ", isa);
  TORCH_CHECK(isa == "base" || best_isa() == isa || (isa == "avx2" && best_isa() == "avx512"), op,
              ": this CPU cannot run ", isa);
}

// One product of the MoE path in the form the plan chose for its row count (stream_moe's `kinds`): a stream walk
// (kind >= 0), or torch's (kLinear: F.linear; kWeightMajor: (w @ x^T)^T), which the plan keeps where BLAS's GEMM is the
// faster (more rows, larger weights). y [m, out] is written.
// The weights an expert forward reads: float32, or bfloat16 multiplied in float32 (each weight widened exactly).
bool bf16_weights(const torch::Tensor& w13, const torch::Tensor& w2) {
  TORCH_CHECK(w13.scalar_type() == w2.scalar_type() &&
                  (w13.scalar_type() == torch::kFloat32 || w13.scalar_type() == torch::kBFloat16),
              "stream_moe: w13 and w2 must both be float32 or both bfloat16, got ", w13.scalar_type(), " and ",
              w2.scalar_type());
  return w13.scalar_type() == torch::kBFloat16;
}

const uint16_t* bf16_bits(const torch::Tensor& w) {
  return reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
}

// The same walk over bfloat16 weights, for the ISA `kernel` was picked for.
KernelBf16 bf16_twin(Kernel kernel) {
  for (const char* isa : {"avx512", "avx2"})
    if (kernel == pick(isa)) return pick_bf16(isa);
  return pick_bf16("base");
}

// A bfloat16 weight (kept so to be read at half the bytes) goes to torch's forms widened to float32 first: a copy per
// call, for prefills' many rows (the plan gives its few rows stream walks). The AMX forms take any row count.
void planned_product(const torch::Tensor& x, const torch::Tensor& w, torch::Tensor& y, int64_t kind, Kernel kernel) {
  const int64_t m = x.size(0), in = x.size(1), out = w.size(0);
  const bool bf16 = w.scalar_type() == torch::kBFloat16;
  if (kind == kLinear || kind == kWeightMajor || (m > kMaxRows && !(bf16 && is_amx(kind)))) {
    const auto wf = bf16 ? w.to(torch::kFloat32) : w;
    if (kind == kWeightMajor && m <= kMaxRows)
      y.copy_(at::mm(wf, x.t()).t());
    else
      at::linear_out(y, x, wf);
    return;
  }
  if (bf16)
    stream_product(x.data_ptr<float>(), bf16_bits(w), y.data_ptr<float>(), m, in, out, kind, bf16_twin(kernel));
  else
    stream_product(x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>(), m, in, out, kind, kernel);
}

template <typename W, typename K>
void stream_walks(const float* x, const W* w, float* y, int64_t m, int64_t in, int64_t out, int64_t kind, K kernel) {
  // grain: about 64 KB of weight per task, so threads split a weight but never work on crumbs
  const int64_t grain = std::max<int64_t>(1, (64 * 1024 / static_cast<int64_t>(sizeof(W))) / std::max<int64_t>(in, 1));
  at::parallel_for(0, out, grain, [&](int64_t begin, int64_t end) {
    kernel(x, w, y, static_cast<int>(m), begin, end, in, out, kind);
  });
}

void stream_product(const float* x, const float* w, float* y, int64_t m, int64_t in, int64_t out, int64_t kind,
                    Kernel kernel) {
  // A plan keys its forms by shape, not dtype: where a float32 weight has the shape of bfloat16 ones the plan gave an
  // AMX form (a STANDALONE Mixtral draft beside its target, say), it gets the first walk (stream_linear, which takes
  // the form from its caller, refuses instead)
  stream_walks(x, w, y, m, in, out, is_amx(kind) ? int64_t{kLockstep} : kind, kernel);
}

void stream_product(const float* x, const uint16_t* w, float* y, int64_t m, int64_t in, int64_t out, int64_t kind,
                    KernelBf16 kernel) {
  if (is_amx(kind)) return amx_product(x, w, y, m, in, out, kind);
  stream_walks(x, w, y, m, in, out, kind, kernel);
}

// The walks whose hits run whole on a thread each at two threads and more (expert_forward): those measured ahead so
// against each product split across two threads, four MoE layers of moe-fine x48's shapes (bfloat16, top-4).
// 2-core AMD EPYC with AVX2 only (Zen 3), whole / split at one token and at eight, medians of 6 rounds
// (bench/results/avx2-threads-s70/walks_across.py): kSplit4 0.78 / 0.83, kSplit8 0.95 / 0.92, kSequentialHw
// 0.89 / 0.94; kSequential 0.93 / 0.95, the lockstep walks 1.00-1.05 / 0.95-0.98. 2-core AMD EPYC with AVX-512 (Zen
// 4, one token, sixtieth session, bench/results/openmp-s60/moe_threads.txt): kSequentialHw ahead whole, kLockstep and
// kSequential behind (12.2-13.9 ms against 11.5-11.7, 7.81-7.95 against 7.48-7.62). Taken: the walks ahead
// wherever measured (kSequentialHw on both hosts; the split walks, which this host's plans chose at one row, here
// only); the others stay split.
inline bool whole_ahead(int64_t kind) { return kind == kSplit4 || kind == kSplit8 || kind == kSequentialHw; }

// act [m, inter] = silu(gate) * up of gate_up [m, 2 * inter] (gate the first half of each row)
void silu_gate(const float* gate_up, float* act, int64_t m, int64_t inter) {
  for (int64_t r = 0; r < m; ++r)
    for (int64_t i = 0; i < inter; ++i) {
      const float g = gate_up[r * 2 * inter + i];
      act[r * inter + i] = g / (1.0f + std::exp(-g)) * gate_up[r * 2 * inter + inter + i];
    }
}

// One expert hit's m <= kMaxRows rows through both products as stream walks (kind13, kind2: KINDS walks) on the
// calling thread: its rows gathered from x, silu(gate) * up, the result to each hit's slot of slot_out. The weights
// are float32 (w13f, w2f) or bfloat16 (w13h, w2h), the other pair null; the buffers hold m rows each.
void walk_hit(const float* x, const std::vector<int64_t>& hit, int64_t k, int64_t hidden, int64_t inter, int64_t m,
              float* rows, float* gate_up, float* act, float* down, float* slot_out, const float* w13f,
              const float* w2f, const uint16_t* w13h, const uint16_t* w2h, int64_t kind13, int64_t kind2,
              Kernel kernel, KernelBf16 kernel_bf16) {
  for (int64_t r = 0; r < m; ++r) std::memcpy(rows + r * hidden, x + (hit[r] / k) * hidden, hidden * sizeof(float));
  if (w13h)
    kernel_bf16(rows, w13h, gate_up, static_cast<int>(m), 0, 2 * inter, hidden, 2 * inter, kind13);
  else
    kernel(rows, w13f, gate_up, static_cast<int>(m), 0, 2 * inter, hidden, 2 * inter, kind13);
  silu_gate(gate_up, act, m, inter);
  if (w2h)
    kernel_bf16(act, w2h, down, static_cast<int>(m), 0, hidden, inter, hidden, kind2);
  else
    kernel(act, w2f, down, static_cast<int>(m), 0, hidden, inter, hidden, kind2);
  for (int64_t r = 0; r < m; ++r) std::memcpy(slot_out + hit[r] * hidden, down + r * hidden, hidden * sizeof(float));
}

// The expert forward of stream_moe (below, which says what it computes and why) and of decode_moe.cpp.
torch::Tensor expert_forward(const torch::Tensor& x, const torch::Tensor& w13, const torch::Tensor& w2,
                             const torch::Tensor& topk_ids, const torch::Tensor& topk_weights, const std::string& isa,
                             at::IntArrayRef kinds13, at::IntArrayRef kinds2) {
  const int64_t tokens = x.size(0), hidden = x.size(1), experts = w13.size(0), inter = w13.size(1) / 2;
  for (const auto kinds : {kinds13, kinds2})
    for (const int64_t kind : kinds)
      TORCH_CHECK(kind >= kWeightMajor && kind < kKinds, "stream_moe: unknown kind ", kind);
  const int64_t k = topk_ids.size(1);
  const auto ids = topk_ids.to(torch::kLong).contiguous();
  const int64_t* idp = ids.data_ptr<int64_t>();
  // float32 weights are summed below slot by slot, which skips a slot of weight 0: its expert is not run for it (a
  // verify's out-of-budget slots, moe_sglang/expert_budget.py: redirected to an in-budget expert at weight 0, since
  // SGLang's MoE paths need k distinct ids per token; run, they cost the expert rows the budget was meant to save)
  const bool f32_weights = topk_weights.scalar_type() == torch::kFloat32;
  const auto weights = f32_weights ? topk_weights.contiguous() : topk_weights;
  const float* wp = f32_weights ? weights.data_ptr<float>() : nullptr;
  std::vector<std::vector<int64_t>> slots(experts);  // expert -> flat (t * k + j) in token order
  for (int64_t s = 0; s < tokens * k; ++s) {
    TORCH_CHECK(idp[s] >= 0 && idp[s] < experts, "stream_moe: expert id ", idp[s], " out of [0, ", experts, ")");
    if (wp && wp[s] == 0.0f) continue;
    slots[idp[s]].push_back(s);
  }
  const auto xc = x.contiguous();
  const auto w13c = w13.contiguous();
  const auto w2c = w2.contiguous();
  auto per_slot = torch::empty({tokens * k, hidden}, xc.options());
  float* slot_out = per_slot.data_ptr<float>();
  const float* xp = xc.data_ptr<float>();
  const bool bf16 = bf16_weights(w13c, w2c);
  const float* w13p = bf16 ? nullptr : w13c.data_ptr<float>();
  const float* w2p = bf16 ? nullptr : w2c.data_ptr<float>();
  const uint16_t* w13h = bf16 ? bf16_bits(w13c) : nullptr;
  const uint16_t* w2h = bf16 ? bf16_bits(w2c) : nullptr;
  const Kernel kernel = pick(isa);
  const KernelBf16 kernel_bf16 = pick_bf16(isa);
  // an expert hit's rows and what they become (the stream forms): torch's allocations, so rows start 64-byte aligned
  // as in the tensor path (a std::vector's 16-byte alignment split the kernels' vector loads: x48's layer 4 % slower)
  torch::Tensor rows_t, gate_up_t, act_t, down_t;
  float *rows = nullptr, *gate_up = nullptr, *act = nullptr, *down = nullptr;
  const auto buffers = [&] {  // at most one hit per (token, slot): sized once per call, at its first walked hit
    if (rows) return;
    rows_t = torch::empty({tokens * k, hidden}, xc.options());
    gate_up_t = torch::empty({tokens * k, 2 * inter}, xc.options());
    act_t = torch::empty({tokens * k, inter}, xc.options());
    down_t = torch::empty({tokens * k, hidden}, xc.options());
    rows = rows_t.data_ptr<float>(), gate_up = gate_up_t.data_ptr<float>();
    act = act_t.data_ptr<float>(), down = down_t.data_ptr<float>();
  };
  // Whole experts side by side, one thread's share of them each, where the intra-op threads are more than one and
  // both products of a hit are walks of at most kMaxRows rows in a form `whole_ahead` takes: per thread a whole
  // weight after another in one parallel region per layer, not every product cut across the threads in a region of
  // its own. Only as many as divide evenly among the threads (a walk's time is its weight's bytes, whatever its 1-16
  // rows); the rest below, each product split. One thread runs the loop below as before.
  std::vector<int64_t> walked;  // experts run side by side, in id order
  const int64_t threads = at::in_parallel_region() ? 1 : at::get_num_threads();
  if (threads > 1) {
    for (int64_t e = 0; e < experts; ++e) {
      const int64_t m = static_cast<int64_t>(slots[e].size());
      const int64_t kind13 = form_for(kinds13, m), kind2 = form_for(kinds2, m);
      if (m >= 1 && m <= kMaxRows && whole_ahead(kind13) && whole_ahead(kind2))
        walked.push_back(e);
    }
    walked.resize(walked.size() / threads * threads);
  }
  if (!walked.empty()) {
    std::vector<int64_t> base(walked.size() + 1, 0);  // each walked expert's first row in the buffers
    for (size_t i = 0; i < walked.size(); ++i) base[i + 1] = base[i] + static_cast<int64_t>(slots[walked[i]].size());
    buffers();
    for (const int64_t e : walked) {  // the hits' profiler events (their weights' bytes), here on the calling thread
      RECORD_FUNCTION("moe_serve::stream_moe_expert",
                      std::vector<c10::IValue>({torch::empty({static_cast<int64_t>(slots[e].size()), hidden},
                                                             xc.options()),
                                                w13c[e], w2c[e]}));
    }
    at::parallel_for(0, static_cast<int64_t>(walked.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t e = walked[i];
        const auto& hit = slots[e];
        const int64_t m = static_cast<int64_t>(hit.size()), b = base[i];
        walk_hit(xp, hit, k, hidden, inter, m, rows + b * hidden, gate_up + b * 2 * inter, act + b * inter,
                 down + b * hidden, slot_out, bf16 ? nullptr : w13p + e * 2 * inter * hidden,
                 bf16 ? nullptr : w2p + e * hidden * inter, bf16 ? w13h + e * 2 * inter * hidden : nullptr,
                 bf16 ? w2h + e * hidden * inter : nullptr, form_for(kinds13, m), form_for(kinds2, m), kernel,
                 kernel_bf16);
      }
    });
  }
  size_t next_walked = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const auto& hit = slots[e];
    const int64_t m = static_cast<int64_t>(hit.size());
    if (m == 0) continue;
    if (next_walked < walked.size() && walked[next_walked] == e) {
      ++next_walked;
      continue;
    }
    const int64_t kind13 = form_for(kinds13, m), kind2 = form_for(kinds2, m);
    // one profiler event per expert hit with the weights it reads (bench/_profile_trace.py counts their bytes); the
    // inputs are made only while a profiler asks for them
    RECORD_FUNCTION("moe_serve::stream_moe_expert",
                    std::vector<c10::IValue>({torch::empty({m, hidden}, xc.options()), w13c[e], w2c[e]}));
    // bfloat16 weights past the plan's rows: the walks over pieces of at most kMaxRows rows (the weight read once a
    // piece) up to kChunkedRows rows, where F.linear needs a float32 copy of the weight first (read 2 bytes, write 4,
    // read 4 again per weight); past them BLAS's GEMM on that copy is the faster
    const bool chunked = bf16 && m > kMaxRows && m <= kChunkedRows && all_walks(kinds13) && all_walks(kinds2);
    // unless the plan's forms for kMaxRows rows are AMX tile forms: then every row count past them stays on the tiles
    // in one product per weight (the kernel runs the rows in pieces of 16 under each weight block, so the weight is
    // read once): x48's experts on a 2-core Intel Xeon with AMX, 1 thread, w13 0.64-0.66x the time of the pieces at
    // 17-32 rows and 0.38-0.51x of F.linear past them, w2 0.85-0.93x and 0.38-0.55x (bench/results/amx-rows-s62)
    const int64_t tiles13 = form_for(kinds13, kMaxRows), tiles2 = form_for(kinds2, kMaxRows);
    const bool tiles = bf16 && m > kMaxRows && is_amx(tiles13) && is_amx(tiles2);
    if ((kind13 >= 0 && kind2 >= 0 && m <= kMaxRows) || chunked || tiles) {
      // both products stream walks: on plain buffers, without a tensor op per hit (at a decode's 1-2 rows per
      // expert those ops cost more than the products of moe-fine's small experts)
      buffers();
      for (int64_t r = 0; r < m; ++r)
        std::memcpy(rows + r * hidden, xp + (hit[r] / k) * hidden, hidden * sizeof(float));
      for (int64_t c = 0; c < m; c += tiles ? m : kMaxRows) {
        const int64_t piece = tiles ? m : std::min<int64_t>(kMaxRows, m - c);
        const int64_t kind = tiles ? tiles13 : form_for(kinds13, piece);
        if (bf16)
          stream_product(rows + c * hidden, w13h + e * 2 * inter * hidden, gate_up + c * 2 * inter, piece, hidden,
                         2 * inter, kind, kernel_bf16);
        else
          stream_product(rows + c * hidden, w13p + e * 2 * inter * hidden, gate_up + c * 2 * inter, piece, hidden,
                         2 * inter, kind, kernel);
      }
      silu_gate(gate_up, act, m, inter);
      for (int64_t c = 0; c < m; c += tiles ? m : kMaxRows) {
        const int64_t piece = tiles ? m : std::min<int64_t>(kMaxRows, m - c);
        const int64_t kind = tiles ? tiles2 : form_for(kinds2, piece);
        if (bf16)
          stream_product(act + c * inter, w2h + e * hidden * inter, down + c * hidden, piece, inter, hidden, kind,
                         kernel_bf16);
        else
          stream_product(act + c * inter, w2p + e * hidden * inter, down + c * hidden, piece, inter, hidden, kind,
                         kernel);
      }
      for (int64_t r = 0; r < m; ++r)
        std::memcpy(slot_out + hit[r] * hidden, down + r * hidden, hidden * sizeof(float));
      continue;
    }
    auto index = torch::empty({m}, torch::kLong);
    int64_t* ip = index.data_ptr<int64_t>();
    for (int64_t r = 0; r < m; ++r) ip[r] = hit[r] / k;
    const auto hit_rows = xc.index_select(0, index);
    auto hit_gate_up = torch::empty({m, 2 * inter}, xc.options());
    planned_product(hit_rows, w13c[e], hit_gate_up, kind13, kernel);
    const auto hit_act = at::silu(hit_gate_up.narrow(1, 0, inter)).mul_(hit_gate_up.narrow(1, inter, inter));
    auto hit_down = torch::empty({m, hidden}, xc.options());
    planned_product(hit_act, w2c[e], hit_down, kind2, kernel);
    for (int64_t r = 0; r < m; ++r) ip[r] = hit[r];
    per_slot.index_copy_(0, index, hit_down);
  }
  if (wp) {  // the weighted sum over a token's slots, in slot order (a slot of weight 0 was not run: it adds nothing)
    auto out = torch::empty({tokens, hidden}, xc.options());
    float* op = out.data_ptr<float>();
    for (int64_t t = 0; t < tokens; ++t) {
      float* o = op + t * hidden;
      const float* first = slot_out + t * k * hidden;
      if (wp[t * k] == 0.0f)
        std::fill(o, o + hidden, 0.0f);
      else
        for (int64_t i = 0; i < hidden; ++i) o[i] = first[i] * wp[t * k];
      for (int64_t j = 1; j < k; ++j) {
        const float* slot = first + j * hidden;
        const float w = wp[t * k + j];
        if (w == 0.0f) continue;
        for (int64_t i = 0; i < hidden; ++i) o[i] += slot[i] * w;
      }
    }
    return out;
  }
  return per_slot.view({tokens, k, hidden})
      .to(topk_weights.scalar_type())
      .mul_(topk_weights.unsqueeze(-1))
      .sum(1)
      .to(xc.scalar_type());
}

}  // namespace moe_serve_stream

namespace {

using namespace moe_serve_stream;

torch::Tensor stream_linear(const torch::Tensor& x, const torch::Tensor& w, c10::string_view isa_view, int64_t kind) {
  const std::string isa(isa_view);
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2, "stream_linear: x [m, in] and w [out, in] expected");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 &&
                  (w.scalar_type() == torch::kFloat32 || w.scalar_type() == torch::kBFloat16),
              "stream_linear: x float32 and w float32 or bfloat16 expected, got ", x.scalar_type(), " and ",
              w.scalar_type());
  TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu(), "stream_linear: CPU tensors only");
  TORCH_CHECK(x.size(1) == w.size(1), "stream_linear: x has ", x.size(1), " features, w expects ", w.size(1));
  TORCH_CHECK(kind >= 0 && kind < kKinds, "stream_linear: unknown kind ", kind, " (0..", kKinds - 1, ")");
  TORCH_CHECK(x.size(0) >= 1 && (x.size(0) <= kMaxRows || is_amx(kind)), "stream_linear: 1..", kMaxRows,
              " rows (any number in the AMX forms), got ", x.size(0));
  check_isa(isa, "stream_linear");
  TORCH_CHECK(!is_amx(kind) || w.scalar_type() == torch::kBFloat16,
              "stream_linear: the AMX forms multiply bfloat16 weights only");
  const auto xc = x.contiguous();
  const auto wc = w.contiguous();
  auto y = torch::empty({xc.size(0), wc.size(0)}, xc.options());
  planned_product(xc, wc, y, kind, pick(isa));
  return y;
}

// out[t] = sum_j weights[t, j] * down_e(silu(gate_e(x[t])) * up_e(x[t])), e = ids[t, j]: the expert forward of a MoE
// layer (SiLU gating, router weights applied after, no biases) in one call. Rows are grouped by expert (experts in
// increasing id, rows in token order, as SGLang's moe_forward_native sorts them); each expert hit multiplies its m rows
// by w13[e] and w2[e] in the form kinds13[m - 1] / kinds2[m - 1] (beyond their length: F.linear). Each (t, j) result
// is kept and the k of a token summed in slot order, weighted, as moe_forward_native does. One call instead of a
// dozen Python-dispatched ops per expert hit: at a decode's 16 expert hits per token (moe-fine x48, 4 layers, top-4)
// those were about a millisecond of a ~16 ms step. Where both products of a hit are stream walks they run on plain
// buffers, without the half-dozen tensor ops a hit cost here too, and the weighted sum is a loop (2-core AMD EPYC with
// AVX-512, 1 thread, bench/results/decode-attention-s34/stream_moe_ab.json: a moe-fine layer 62 -> 35 us per call at
// one token top-4, 337 -> 202 at 8; an x48 layer, its weights from memory, the same within 1-2 %).
torch::Tensor stream_moe(const torch::Tensor& x, const torch::Tensor& w13, const torch::Tensor& w2,
                         const torch::Tensor& topk_ids, const torch::Tensor& topk_weights, c10::string_view isa_view,
                         at::IntArrayRef kinds13, at::IntArrayRef kinds2) {
  const std::string isa(isa_view);
  TORCH_CHECK(x.dim() == 2 && w13.dim() == 3 && w2.dim() == 3, "stream_moe: x [T, H], w13 [E, 2I, H], w2 [E, H, I]");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "stream_moe: x must be float32, got ", x.scalar_type());
  bf16_weights(w13, w2);  // both float32 or both bfloat16 (multiplied in float32)
  TORCH_CHECK(x.device().is_cpu() && w13.device().is_cpu() && w2.device().is_cpu(), "stream_moe: CPU tensors only");
  const int64_t tokens = x.size(0), hidden = x.size(1), experts = w13.size(0), inter = w13.size(1) / 2;
  TORCH_CHECK(w13.size(2) == hidden && w13.size(1) == 2 * inter && w2.size(0) == experts && w2.size(1) == hidden &&
                  w2.size(2) == inter,
              "stream_moe: w13 ", w13.sizes(), " and w2 ", w2.sizes(), " do not fit x ", x.sizes());
  TORCH_CHECK(topk_ids.dim() == 2 && topk_ids.size(0) == tokens && topk_weights.sizes() == topk_ids.sizes(),
              "stream_moe: topk_ids and topk_weights [T, k] expected");
  check_isa(isa, "stream_moe");
  return expert_forward(x, w13, w2, topk_ids, topk_weights, isa, kinds13, kinds2);
}

}  // namespace

// The threads an at::parallel_for of this library runs on: torch's intra-op threads where the library was compiled
// with OpenMP (ATen's parallel_for is a header template whose `omp parallel` is compiled into the caller: built
// without -fopenmp it runs every range on the calling thread, whatever torch.set_num_threads says), else 1.
int64_t stream_threads() {
#ifdef INTRA_OP_PARALLEL
  return at::get_num_threads();
#else
  return 1;
#endif
}

// torch.ops.moe_serve.*: through the dispatcher, so the torch profiler records the products with their shapes
// (bench/_profile_trace.py counts them as expert GEMMs).
TORCH_LIBRARY(moe_serve, library) {
  library.def("stream_linear(Tensor x, Tensor w, str isa, int kind=0) -> Tensor");
  library.def("stream_best_isa() -> str", &best_isa);
  library.def("stream_amx_ready() -> bool", &amx_ready);
  library.def("stream_threads() -> int", &stream_threads);
  library.def(
      "stream_moe(Tensor x, Tensor w13, Tensor w2, Tensor topk_ids, Tensor topk_weights, str isa, int[] kinds13, "
      "int[] kinds2) -> Tensor");
}

TORCH_LIBRARY_IMPL(moe_serve, CPU, library) {
  library.impl("stream_linear", &stream_linear);
  library.impl("stream_moe", &stream_moe);
}
