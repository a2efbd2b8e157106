// y[m, out] = x[m, in] @ w[out, in]^T for a weight kept as bfloat16 and float32 rows (any m: past 16 in pieces of 16
// under each weight block), on AMX tiles, with the float32 rows' values kept whole: the stream kernel's `kAmx` form
// (stream_gemm.h).
//
// Why: the stream walks (stream_gemm.cpp) read a weight once at any row count, but past a few rows they are bound by
// their multiply-adds, not by the bytes: on a 2-core AMD EPYC with AVX-512, 1 thread, an x48 expert's w13 read at
// 21-23 GB/s at one row and 8.4-8.7 at eight (bench/results/bf16-experts-s44/output-cd5309f.txt), so a verify's or
// a batch's several rows per expert cost several decodes' time. AMX's tile product (TDPBF16PS) does 512 bfloat16
// multiply-adds a cycle where an AVX-512 FMA does 16 float32 ones, but it multiplies bfloat16 by bfloat16.
//
// Exactly as float32: each float32 row value is split into three bfloat16 parts hi + mid + lo == x (each part the
// top 8 significant bits of what the parts before it left, so the split is exact for every finite normal value),
// and the weight, kept as bfloat16, is one operand of all three tile products. A bfloat16 x bfloat16 product has at
// most 16 significant bits, so each of the 3 * in products is exact in float32, and the tile product adds them into
// float32 accumulators with round-to-nearest: the sum of the same exact products as the float32 walks, added in
// another order (so equal to float rounding, not bit for bit; the same rule as the walks against F.linear). Values
// whose parts fall below float32's normal range are flushed to zero by the tile unit (|x| below ~1e-33 loses its
// low parts); a non-finite x is its own hi part. Three tile products per 32 weights still run faster than memory
// delivers the weight: 8 rows of an x48 expert's w13 at 17.9 GB/s where the best walk read 9.8
// (bench/results/amx-s47/forms_ab.txt, 2-core Intel Xeon with AMX, 1 thread).
//
// Layout: the weight is tile A as it lies in memory (16 output features x 32 bfloat16 weights per tile, the row
// stride the weight's), x's parts are tile B, packed once per product in the pairs layout tile products read
// ([32 / 2 pairs][m rows][2]; past 16 rows one such layout per piece of 16, the last zero-padded), and the
// accumulator C is 16 features x m rows (stored transposed into y). Two
// feature blocks run side by side (tiles C0 C1, A0 A1, B_hi B_mid B_lo: 7 of the 8 tiles). Features past the last
// whole block and weights past the last whole 32 go through a zero-padded copy of the block's tile, so every output
// is computed the same way whatever the threads' split (the blocks are the unit of work).
//
// AMX needs the CPU (CPUID AMX-TILE and AMX-BF16) and the kernel's permission for the tile state
// (arch_prctl(ARCH_REQ_XCOMP_PERM), Linux 5.16+), asked once per process; `amx_ready()` is both.

#include <ATen/Parallel.h>
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "stream_gemm.h"

namespace {

constexpr int64_t kBlock = 16;  // output features per tile (its rows)
constexpr int64_t kChunk = 32;  // bfloat16 weights per tile row (64 bytes)
constexpr int kParts = 3;       // hi, mid, lo
constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;  // <asm/prctl.h>, not in every libc's headers

bool cpu_has_amx_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return ((d >> 22) & 1) && ((d >> 24) & 1);  // AMX-BF16, AMX-TILE
}

struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// rows[0..15] (16 dwords each) transposed in place: rows[p] holds what was column p (three rounds of shuffles)
__attribute__((target("avx512f"))) void transpose16(__m512i* rows) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(rows[2 * i], rows[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(rows[2 * i], rows[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // u[4i + j], 128-bit lane L: rows 4i..4i+3 of column 4L + j
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88), v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xDD);
    const __m512i w0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88);
    const __m512i w1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xDD);
    rows[j] = _mm512_shuffle_i32x4(v0, w0, 0x88);
    rows[4 + j] = _mm512_shuffle_i32x4(v1, w1, 0x88);
    rows[8 + j] = _mm512_shuffle_i32x4(v0, w0, 0xDD);
    rows[12 + j] = _mm512_shuffle_i32x4(v1, w1, 0xDD);
  }
}

// x [m, in] (m <= ld <= 16) -> parts [kParts][chunks][kChunk / 2][ld] dwords, each the bfloat16 bits of a pair of
// x's values (chunk c, pair p: values 2p, 2p + 1 of the chunk; zero past in, and in the columns of rows m..ld): per
// chunk, each row's 32 values split into their parts (truncations: v - part is exact, and the last part is all that is
// left; a non-finite value is its own hi part), then a row-to-column transpose into the pairs layout
__attribute__((target("avx512f"))) void pack_rows(const float* x, int64_t m, int64_t ld, int64_t in, int64_t chunks,
                                                  uint32_t* parts) {
  const int64_t part_size = chunks * (kChunk / 2) * ld;
  const __m512i top = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)), exponent = _mm512_set1_epi32(0x7F800000);
  const __mmask16 row_mask = static_cast<__mmask16>((1u << ld) - 1);
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t k0 = c * kChunk, n = std::min(kChunk, in - k0);
    const auto lo_mask = static_cast<__mmask16>(n >= 16 ? 0xFFFFu : (1u << n) - 1);
    const auto hi_mask = static_cast<__mmask16>(n >= 32 ? 0xFFFFu : (n > 16 ? (1u << (n - 16)) - 1 : 0u));
    __m512i words[kParts][16];
    for (int64_t r = 0; r < 16; ++r) {
      if (r >= m) {
        for (int q = 0; q < kParts; ++q) words[q][r] = _mm512_setzero_si512();
        continue;
      }
      __m512 a = _mm512_maskz_loadu_ps(lo_mask, x + r * in + k0), b = _mm512_maskz_loadu_ps(hi_mask, x + r * in + k0 + 16);
      const __mmask16 finite_a = _mm512_cmpneq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(a), exponent), exponent);
      const __mmask16 finite_b = _mm512_cmpneq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(b), exponent), exponent);
      for (int q = 0; q < kParts; ++q) {
        const __m512i ai = _mm512_castps_si512(a), bi = _mm512_castps_si512(b);
        const __m256i ha = _mm512_cvtepi32_epi16(_mm512_srli_epi32(ai, 16));
        const __m256i hb = _mm512_cvtepi32_epi16(_mm512_srli_epi32(bi, 16));
        words[q][r] = _mm512_inserti64x4(_mm512_castsi256_si512(ha), hb, 1);
        a = _mm512_maskz_sub_ps(finite_a, a, _mm512_castsi512_ps(_mm512_and_si512(ai, top)));
        b = _mm512_maskz_sub_ps(finite_b, b, _mm512_castsi512_ps(_mm512_and_si512(bi, top)));
      }
    }
    for (int q = 0; q < kParts; ++q) {
      transpose16(words[q]);
      for (int64_t p = 0; p < 16; ++p)
        _mm512_mask_storeu_epi32(parts + q * part_size + (c * 16 + p) * ld, row_mask, words[q][p]);
    }
  }
}

// C (16 features x m floats, row stride ld) into y [m, out] at features j..j + rows: transposed in registers, each
// of y's rows written as one line (y's rows lie out * 4 bytes apart, a multiple of 4 KB for x48's w13, so written
// feature by feature the 13th row already evicted the first from its L1 set: 2.8x the time of 12 rows, in cache,
// a scratch timing of the forty-seventh session)
__attribute__((target("avx512f"))) void store_block(const float* c_out, float* y, int64_t m, int64_t ld, int64_t out,
                                                    int64_t j, int64_t rows) {
  const __mmask16 row_mask = static_cast<__mmask16>((1u << m) - 1);
  const __mmask16 feature_mask = static_cast<__mmask16>(rows >= 16 ? 0xFFFFu : (1u << rows) - 1);
  __m512i block[16];
  for (int i = 0; i < 16; ++i) block[i] = _mm512_maskz_loadu_epi32(row_mask, c_out + i * ld);
  transpose16(block);
  for (int64_t r = 0; r < m; ++r) _mm512_mask_storeu_epi32(y + r * out + j, feature_mask, block[r]);
}

// the weights of features [j, j + kBlock) and chunk c as tile A reads them: straight from the weight where the block
// is whole, else from `pad` (zero past the weight's features and in)
const uint16_t* tile_a(const uint16_t* w, int64_t j, int64_t c, int64_t in, int64_t out, uint16_t* pad,
                       int64_t* stride) {
  const int64_t k = c * kChunk;
  if (j + kBlock <= out && k + kChunk <= in) {
    *stride = in * 2;
    return w + j * in + k;
  }
  std::memset(pad, 0, kBlock * kChunk * sizeof(uint16_t));
  const int64_t rows = std::min(kBlock, out - j), cols = std::min(kChunk, in - k);
  for (int64_t i = 0; i < rows; ++i) std::memcpy(pad + i * kChunk, w + (j + i) * in + k, cols * sizeof(uint16_t));
  *stride = kChunk * 2;
  return pad;
}

// Feature blocks [block_begin, block_end) of y, two at a time, for every piece of x's rows (pieces of ld rows, the
// last one m's remainder; their parts laid out one piece after another, each ld columns wide): under a pair of
// blocks the pieces run one after another, so a prefill's many rows read each weight block from memory once and
// from cache after (its 2 x 16 rows of w13's 256 weights, 16 KB, stay in L1). PF: prefetch the next two blocks'
// weights into L2 as the first piece reads these (an address-order stream of the rows they span), else the hardware
// prefetchers alone.
template <bool PF>
__attribute__((target("amx-tile,amx-bf16,avx512f"))) void amx_blocks(const uint32_t* parts, const uint16_t* w, float* y,
                                                              int64_t m, int64_t ld, int64_t in, int64_t out,
                                                              int64_t chunks, int64_t block_begin, int64_t block_end) {
  TileConfig config;
  const auto row_bytes = static_cast<uint16_t>(ld * 4);  // C: ld floats; B: ld pairs of bfloat16
  for (int t : {0, 1, 4, 5, 6}) config.rows[t] = kBlock, config.colsb[t] = row_bytes;
  for (int t : {2, 3}) config.rows[t] = kBlock, config.colsb[t] = kChunk * 2;
  _tile_loadconfig(&config);
  const int64_t part_size = chunks * (kChunk / 2) * ld, b_size = (kChunk / 2) * ld;  // dwords
  const int64_t pieces = (m + ld - 1) / ld;
  alignas(64) uint16_t pad0[kBlock * kChunk], pad1[kBlock * kChunk];
  alignas(64) float c_out[kBlock * kBlock];
  const int64_t span = 2 * kBlock * in;                           // bfloat16 of two blocks' rows
  const int64_t ahead_per_chunk = (span * 2 + chunks - 1) / chunks;  // bytes of the next two blocks per chunk
  for (int64_t b = block_begin; b < block_end; b += 2) {
    const bool two = b + 1 < block_end;
    const int64_t j0 = b * kBlock, j1 = j0 + kBlock;
    const char* next = reinterpret_cast<const char*>(w + (j0 + 2 * kBlock) * in);
    const char* last = reinterpret_cast<const char*>(w + out * in);
    for (int64_t piece = 0; piece < pieces; ++piece) {
      const uint32_t* piece_parts = parts + piece * kParts * part_size;
      _tile_zero(0);
      _tile_zero(1);
      for (int64_t c = 0; c < chunks; ++c) {
        if (PF && piece == 0)
          for (int64_t off = c * ahead_per_chunk; off < (c + 1) * ahead_per_chunk; off += 64)
            if (next + off < last) _mm_prefetch(next + off, _MM_HINT_T1);
        int64_t stride0 = 0, stride1 = 0;
        _tile_loadd(2, tile_a(w, j0, c, in, out, pad0, &stride0), stride0);
        if (two) _tile_loadd(3, tile_a(w, j1, c, in, out, pad1, &stride1), stride1);
        const uint32_t* bc = piece_parts + c * b_size;
        _tile_loadd(4, bc, row_bytes);
        _tile_loadd(5, bc + part_size, row_bytes);
        _tile_loadd(6, bc + 2 * part_size, row_bytes);
        _tile_dpbf16ps(0, 2, 4);
        _tile_dpbf16ps(0, 2, 5);
        _tile_dpbf16ps(0, 2, 6);
        if (two) {
          _tile_dpbf16ps(1, 3, 4);
          _tile_dpbf16ps(1, 3, 5);
          _tile_dpbf16ps(1, 3, 6);
        }
      }
      const int64_t rows = std::min(ld, m - piece * ld);
      for (int blk = 0; blk < (two ? 2 : 1); ++blk) {
        if (blk == 0)
          _tile_stored(0, c_out, row_bytes);
        else
          _tile_stored(1, c_out, row_bytes);
        const int64_t j = blk == 0 ? j0 : j1;
        store_block(c_out, y + piece * ld * out, rows, ld, out, j, std::min(kBlock, out - j));
      }
    }
  }
  _tile_release();
}

}  // namespace

namespace moe_serve_stream {

bool amx_ready() {
  static const bool ready = cpu_has_amx_bf16() && syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return ready;
}

void amx_product(const float* x, const uint16_t* w, float* y, int64_t m, int64_t in, int64_t out, int64_t kind) {
  TORCH_CHECK(amx_ready(), "stream_gemm: this CPU (or its kernel) cannot run the AMX form");
  TORCH_CHECK(m >= 1, "stream_gemm: the AMX form takes 1 row or more, got ", m);
  const int64_t chunks = (in + kChunk - 1) / kChunk, blocks = (out + kBlock - 1) / kBlock;
  // up to 16 rows one piece of exactly m columns; more in pieces of 16 (the last zero-padded to 16: one tile shape)
  const int64_t ld = std::min<int64_t>(m, kBlock), pieces = (m + ld - 1) / ld;
  const int64_t piece_size = kParts * chunks * (kChunk / 2) * ld;  // dwords
  // every element is written by pack_rows: no zero fill (a 16-row w2 product's parts are 440 KB)
  const std::unique_ptr<uint32_t[]> parts(new uint32_t[pieces * piece_size]);
  for (int64_t piece = 0; piece < pieces; ++piece)
    pack_rows(x + piece * ld * in, std::min(ld, m - piece * ld), ld, in, chunks, parts.get() + piece * piece_size);
  // the pieces in groups whose parts stay in L2 (~1 MB) while every block of the weight passes under them: a w2 of
  // x48 (4608 weights a feature) has 442 KB of parts a piece, which all 8 pieces of 128 rows would push out to be
  // read again for each pair of blocks; w13's 24 KB a piece go all in one group
  const int64_t group = std::max<int64_t>(1, (int64_t{1} << 20) / (piece_size * 4));
  // grain: about 64 KB of weight per task, in whole blocks
  const int64_t grain = std::max<int64_t>(2, (64 * 1024 / 2) / std::max<int64_t>(in * kBlock, 1));
  for (int64_t first = 0; first < pieces; first += group) {
    const uint32_t* group_parts = parts.get() + first * piece_size;
    float* group_y = y + first * ld * out;
    const int64_t group_m = std::min(m - first * ld, group * ld);
    at::parallel_for(0, blocks, grain, [&](int64_t begin, int64_t end) {
      if (kind == kAmxPrefetch)
        amx_blocks<true>(group_parts, w, group_y, group_m, ld, in, out, chunks, begin, end);
      else
        amx_blocks<false>(group_parts, w, group_y, group_m, ld, in, out, chunks, begin, end);
    });
  }
}

}  // namespace moe_serve_stream
