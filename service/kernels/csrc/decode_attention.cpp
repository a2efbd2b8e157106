// One decode step's attention sublayer of a Llama / Mixtral-shaped layer in one call: RMSNorm, the fused QKV product,
// NeoX rope on q and k, the new K/V written to their pool slots, attention of each request's query over its slots
// (its committed positions' slots from the request table, then the new token's), the output product and the residual
// add. `chain_attention` is the same over several rows per request that form a chain (a chain's verify, a draft
// model's catch-up): row j of a request's block sees the request's committed slots and rows 0..j of its block.
//
// Why: at a decode's 1-8 rows the sublayer's arithmetic is a few tens of microseconds, and the torch ops that spell
// it (a dozen per layer, each dispatched from Python) cost more than that: in a py-spy of a plain batch-1 moe-fine
// step (2-core AMD EPYC with AVX-512, 2026-11-28) the lines of the direct forward outside the MoE and the LM head
// took ~38 % of the step's samples. The products keep the form the engine's plan chose for their row count
// (stream_gemm.h planned_product); the norm, rope and attention are loops over the few rows here.
//
// Arithmetic as the torch path's (target_forward.py): x * rsqrt(mean(x^2) + eps) * w; rope x1 c - x2 s | x2 c + x1 s
// from the cos / sin halves of SGLang's cos_sin_cache row at the position; softmax(q k^T * scale) v per head with
// the max subtracted; GQA by query-head groups. Sums run in another order than torch's: results agree to float
// rounding, not bit for bit.

#include <ATen/Parallel.h>
#include <torch/library.h>
#include <torch/torch.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "stream_gemm.h"

namespace {

using namespace moe_serve_stream;

// x [d] rotated in place, NeoX style: the two halves as one complex number at the angles of cs = [cos | sin]
// (d / 2 each)
void rotate(float* x, const float* cs, int64_t d) {
  const int64_t half = d / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float x1 = x[i], x2 = x[i + half], c = cs[i], s = cs[half + i];
    x[i] = x1 * c + x2 * -s;
    x[i + half] = x2 * c + x1 * s;
  }
}

void check_rows(const torch::Tensor& t, int64_t rows, const char* name) {
  TORCH_CHECK(t.dim() == 1 && t.size(0) == rows, "decode_attention: ", name, " must be [", rows, "], got ", t.sizes());
}

// Which keys each row of a sublayer call sees: its request's row of req_to_token, that request's committed keys
// (positions 0..prefix-1, their slots from the table) and the rows start..itself of the call (their slots from loc).
struct Rows {
  std::vector<int64_t> table_row, prefix, start;
};

torch::Tensor sublayer(const torch::Tensor& h, const torch::Tensor& norm_w, double eps, const torch::Tensor& qkv_w,
                       const torch::Tensor& o_w, const torch::Tensor& cos_sin_cache, const torch::Tensor& positions,
                       torch::Tensor k_buffer, torch::Tensor v_buffer, const torch::Tensor& loc,
                       const torch::Tensor& req_to_token, const Rows& rows_of, int64_t heads, int64_t kv_heads,
                       double scale, const std::string& isa, at::IntArrayRef kinds_qkv, at::IntArrayRef kinds_o);

// The rows of requests laid end to end, request b's ext_lens[b] rows after its prefix_lens[b] committed tokens.
Rows chain_rows(const torch::Tensor& pool_rows, const torch::Tensor& prefix_lens, const torch::Tensor& ext_lens,
                int64_t context) {
  const auto table_rows = pool_rows.to(torch::kLong).contiguous();
  const auto prefixes = prefix_lens.to(torch::kLong).contiguous();
  const auto exts = ext_lens.to(torch::kLong).contiguous();
  Rows rows_of;
  int64_t start = 0;
  for (int64_t b = 0; b < pool_rows.size(0); ++b) {
    const int64_t prefix = prefixes.data_ptr<int64_t>()[b], ext = exts.data_ptr<int64_t>()[b];
    TORCH_CHECK(prefix >= 0 && ext >= 1 && prefix + ext <= context, "decode_attention: request ", b, " with ", prefix,
                " committed and ", ext, " new tokens does not fit a context of ", context);
    for (int64_t j = 0; j < ext; ++j) {
      rows_of.table_row.push_back(table_rows.data_ptr<int64_t>()[b]);
      rows_of.prefix.push_back(prefix);
      rows_of.start.push_back(start);
    }
    start += ext;
  }
  return rows_of;
}

torch::Tensor decode_attention(const torch::Tensor& h, const torch::Tensor& norm_w, double eps,
                               const torch::Tensor& qkv_w, const torch::Tensor& o_w,
                               const torch::Tensor& cos_sin_cache, const torch::Tensor& positions,
                               torch::Tensor k_buffer, torch::Tensor v_buffer, const torch::Tensor& loc,
                               const torch::Tensor& req_to_token, const torch::Tensor& pool_rows,
                               const torch::Tensor& seq_lens, int64_t heads, int64_t kv_heads, double scale,
                               c10::string_view isa_view, at::IntArrayRef kinds_qkv, at::IntArrayRef kinds_o) {
  const std::string isa(isa_view);
  check_isa(isa, "decode_attention");
  TORCH_CHECK(h.dim() == 2 && h.size(0) >= 1, "decode_attention: h must be [B, hidden]");
  const int64_t batch = h.size(0);
  check_rows(pool_rows, batch, "pool_rows");
  check_rows(seq_lens, batch, "seq_lens");
  const auto lens = seq_lens.to(torch::kLong).contiguous();
  for (int64_t b = 0; b < batch; ++b)
    TORCH_CHECK(lens.data_ptr<int64_t>()[b] >= 1 && lens.data_ptr<int64_t>()[b] <= req_to_token.size(-1),
                "decode_attention: sequence length ", lens.data_ptr<int64_t>()[b], " outside 1..",
                req_to_token.size(-1));
  // a decode is a chain of one row per request after its seq_len - 1 committed tokens
  const Rows rows_of = chain_rows(pool_rows, lens - 1, torch::ones_like(lens), req_to_token.size(-1));
  return sublayer(h, norm_w, eps, qkv_w, o_w, cos_sin_cache, positions, k_buffer, v_buffer, loc, req_to_token,
                  rows_of, heads, kv_heads, scale, isa, kinds_qkv, kinds_o);
}

torch::Tensor chain_attention(const torch::Tensor& h, const torch::Tensor& norm_w, double eps,
                              const torch::Tensor& qkv_w, const torch::Tensor& o_w,
                              const torch::Tensor& cos_sin_cache, const torch::Tensor& positions,
                              torch::Tensor k_buffer, torch::Tensor v_buffer, const torch::Tensor& loc,
                              const torch::Tensor& req_to_token, const torch::Tensor& pool_rows,
                              const torch::Tensor& prefix_lens, const torch::Tensor& ext_lens, int64_t heads,
                              int64_t kv_heads, double scale, c10::string_view isa_view, at::IntArrayRef kinds_qkv,
                              at::IntArrayRef kinds_o) {
  const std::string isa(isa_view);
  check_isa(isa, "decode_attention");
  TORCH_CHECK(h.dim() == 2 && h.size(0) >= 1, "decode_attention: h must be [T, hidden]");
  TORCH_CHECK(pool_rows.dim() == 1 && pool_rows.size(0) >= 1, "decode_attention: pool_rows must be [B]");
  const int64_t requests = pool_rows.size(0);
  check_rows(prefix_lens, requests, "prefix_lens");
  check_rows(ext_lens, requests, "ext_lens");
  const Rows rows_of = chain_rows(pool_rows, prefix_lens, ext_lens, req_to_token.size(-1));
  TORCH_CHECK(static_cast<int64_t>(rows_of.start.size()) == h.size(0), "decode_attention: ext_lens add up to ",
              rows_of.start.size(), " rows, h has ", h.size(0));
  return sublayer(h, norm_w, eps, qkv_w, o_w, cos_sin_cache, positions, k_buffer, v_buffer, loc, req_to_token,
                  rows_of, heads, kv_heads, scale, isa, kinds_qkv, kinds_o);
}

torch::Tensor sublayer(const torch::Tensor& h, const torch::Tensor& norm_w, double eps, const torch::Tensor& qkv_w,
                       const torch::Tensor& o_w, const torch::Tensor& cos_sin_cache, const torch::Tensor& positions,
                       torch::Tensor k_buffer, torch::Tensor v_buffer, const torch::Tensor& loc,
                       const torch::Tensor& req_to_token, const Rows& rows_of, int64_t heads, int64_t kv_heads,
                       double scale, const std::string& isa, at::IntArrayRef kinds_qkv, at::IntArrayRef kinds_o) {
  const torch::Tensor &k_in = k_buffer, &v_in = v_buffer;
  for (const torch::Tensor* t : {&h, &norm_w, &qkv_w, &o_w, &cos_sin_cache, &k_in, &v_in})
    TORCH_CHECK(t->scalar_type() == torch::kFloat32 && t->device().is_cpu(), "decode_attention: float32 CPU tensors");
  const int64_t batch = h.size(0), hidden = h.size(1), dim = cos_sin_cache.size(1);  // batch: rows of the call
  TORCH_CHECK(heads >= 1 && kv_heads >= 1 && heads % kv_heads == 0, "decode_attention: ", heads,
              " query heads do not group over ", kv_heads, " KV heads");
  TORCH_CHECK(cos_sin_cache.dim() == 2 && dim % 2 == 0, "decode_attention: cos_sin_cache must be [positions, even D]");
  const int64_t q_size = heads * dim, kv_size = kv_heads * dim;
  TORCH_CHECK(norm_w.dim() == 1 && norm_w.size(0) == hidden, "decode_attention: norm weight must be [", hidden, "]");
  TORCH_CHECK(qkv_w.dim() == 2 && qkv_w.size(0) == q_size + 2 * kv_size && qkv_w.size(1) == hidden,
              "decode_attention: qkv weight ", qkv_w.sizes(), " does not fit ", heads, "+2x", kv_heads, " heads of ",
              dim, " over ", hidden);
  TORCH_CHECK(o_w.dim() == 2 && o_w.size(0) == hidden && o_w.size(1) == q_size, "decode_attention: o weight ",
              o_w.sizes(), " is not [", hidden, ", ", q_size, "]");
  TORCH_CHECK(k_buffer.dim() == 3 && k_buffer.size(1) == kv_heads && k_buffer.size(2) == dim &&
                  k_buffer.sizes() == v_buffer.sizes() && k_buffer.is_contiguous() && v_buffer.is_contiguous(),
              "decode_attention: K and V pools must be contiguous [slots, ", kv_heads, ", ", dim, "]");
  TORCH_CHECK(req_to_token.dim() == 2 && req_to_token.scalar_type() == torch::kInt32 && req_to_token.is_contiguous(),
              "decode_attention: req_to_token must be a contiguous int32 [rows, context]");
  check_rows(positions, batch, "positions");
  check_rows(loc, batch, "loc");

  const auto pos = positions.to(torch::kLong).contiguous();
  const auto locs = loc.to(torch::kLong).contiguous();
  const int64_t *posp = pos.data_ptr<int64_t>(), *locp = locs.data_ptr<int64_t>();
  const int64_t *rowp = rows_of.table_row.data(), *prefixp = rows_of.prefix.data(), *startp = rows_of.start.data();
  const int64_t slots = k_buffer.size(0), context = req_to_token.size(1);
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK(posp[b] >= 0 && posp[b] < cos_sin_cache.size(0), "decode_attention: position ", posp[b],
                " outside the rope table");
    TORCH_CHECK(locp[b] >= 0 && locp[b] < slots, "decode_attention: slot ", locp[b], " outside the pool");
    TORCH_CHECK(rowp[b] >= 0 && rowp[b] < req_to_token.size(0), "decode_attention: request row ", rowp[b],
                " outside req_to_token");
    TORCH_CHECK(prefixp[b] >= 0 && prefixp[b] <= context, "decode_attention: ", prefixp[b],
                " committed tokens outside 0..", context);
  }
  const Vec vec = vec_for(isa);
  const Kernel kernel = pick(isa);
  const auto hc = h.contiguous();
  const float* hp = hc.data_ptr<float>();
  const auto norm_wc = norm_w.contiguous();  // kept: a pointer into a temporary's copy would dangle
  const float* nw = norm_wc.data_ptr<float>();

  // RMSNorm
  auto x = torch::empty({batch, hidden}, hc.options());
  float* xp = x.data_ptr<float>();
  rms_norm_rows(vec, hp, nw, xp, batch, hidden, static_cast<float>(eps));
  // QKV, rope, the new K/V into their slots
  auto qkv = torch::empty({batch, q_size + 2 * kv_size}, hc.options());
  planned_product(x, qkv_w.contiguous(), qkv, form_for(kinds_qkv, batch), kernel);
  float* qkvp = qkv.data_ptr<float>();
  const auto cache = cos_sin_cache.contiguous();
  const float* csp = cache.data_ptr<float>();
  float *kb = k_buffer.data_ptr<float>(), *vb = v_buffer.data_ptr<float>();
  for (int64_t b = 0; b < batch; ++b) {
    float* row = qkvp + b * (q_size + 2 * kv_size);
    for (int64_t head = 0; head < heads + kv_heads; ++head) rotate(row + head * dim, csp + posp[b] * dim, dim);
    std::memcpy(kb + locp[b] * kv_size, row + q_size, kv_size * sizeof(float));
    std::memcpy(vb + locp[b] * kv_size, row + q_size + kv_size, kv_size * sizeof(float));
  }
  // attention: each (request, query head) over the request's slots
  auto out = torch::empty({batch, q_size}, hc.options());
  float* op = out.data_ptr<float>();
  const int32_t* r2t = req_to_token.data_ptr<int32_t>();
  const int64_t group = heads / kv_heads;
  std::vector<int64_t> bad(batch * heads, -1);  // a slot outside the pool per task, reported after the loop
  at::parallel_for(0, batch * heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t task = begin; task < end; ++task) {
      // row b sees its request's committed keys, then the rows of its block up to itself
      const int64_t b = task / heads, head = task % heads, g = head / group, prefix = prefixp[b];
      const int64_t n = prefix + (b - startp[b]) + 1;
      const int32_t* slot = r2t + rowp[b] * context;
      const float* q = qkvp + b * (q_size + 2 * kv_size) + head * dim;
      float* o = op + b * q_size + head * dim;
      scores.resize(n);
      float top = -INFINITY;
      // key i's slot: the request table's for the committed ones, loc for the call's rows (a decode's new token)
      const auto at = [&](int64_t i) -> int64_t { return i < prefix ? slot[i] : locp[startp[b] + i - prefix]; };
      for (int64_t i = 0; i < n; ++i) {
        if (at(i) < 0 || at(i) >= slots) {
          bad[task] = at(i);
          break;
        }
        scores[i] = vec.dot(q, kb + at(i) * kv_size + g * dim, dim) * static_cast<float>(scale);
        top = std::max(top, scores[i]);
      }
      std::fill(o, o + dim, 0.0f);
      if (bad[task] != -1) continue;
      float total = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        const float p = std::exp(scores[i] - top);
        total += p;
        vec.axpy(o, p, vb + at(i) * kv_size + g * dim, dim);
      }
      for (int64_t i = 0; i < dim; ++i) o[i] /= total;
    }
  });
  for (int64_t task = 0; task < batch * heads; ++task)
    TORCH_CHECK(bad[task] == -1, "decode_attention: row ", task / heads, " has slot ", bad[task],
                " outside the pool");
  // output product and residual
  auto y = torch::empty({batch, hidden}, hc.options());
  planned_product(out, o_w.contiguous(), y, form_for(kinds_o, batch), kernel);
  return y.add_(hc);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(moe_serve, library) {
  library.def(
      "decode_attention(Tensor h, Tensor norm_w, float eps, Tensor qkv_w, Tensor o_w, Tensor cos_sin_cache, "
      "Tensor positions, Tensor(a!) k_buffer, Tensor(b!) v_buffer, Tensor loc, Tensor req_to_token, Tensor pool_rows, "
      "Tensor seq_lens, int heads, int kv_heads, float scale, str isa, int[] kinds_qkv, int[] kinds_o) -> Tensor");
  library.def(
      "chain_attention(Tensor h, Tensor norm_w, float eps, Tensor qkv_w, Tensor o_w, Tensor cos_sin_cache, "
      "Tensor positions, Tensor(a!) k_buffer, Tensor(b!) v_buffer, Tensor loc, Tensor req_to_token, Tensor pool_rows, "
      "Tensor prefix_lens, Tensor ext_lens, int heads, int kv_heads, float scale, str isa, int[] kinds_qkv, "
      "int[] kinds_o) -> Tensor");
}

TORCH_LIBRARY_IMPL(moe_serve, CPU, library) {
  library.impl("decode_attention", &decode_attention);
  library.impl("chain_attention", &chain_attention);
}
