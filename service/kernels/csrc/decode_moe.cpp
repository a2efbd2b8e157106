// One decode step's MoE sublayer of a Mixtral-shaped layer in one call: RMSNorm, the router product, softmax top-k
// routing, the experts (stream_gemm.cpp's expert forward) and the residual add.
//
// Why: at a decode's 1-8 rows the sublayer around the expert products is a few tens of microseconds of arithmetic
// spelled as a dozen Python-dispatched torch ops and calls (the norm's five ops, the router product, SGLang's
// routing function, its post-processing, the MoE hook chain, the residual add). The products keep the form the
// engine's plans chose for their row count (stream_gemm.h planned_product for the router, the expert forward's
// kinds for the experts).
//
// Arithmetic as the path it replaces (target_forward.py -> inline_moe.py): x = h * rsqrt(mean(h^2) + eps) * w;
// logits = x @ router^T; SGLang's fused_topk_torch_native: p = softmax(logits) in float32 (the max subtracted), the
// top_k largest in decreasing order (ties to the lower expert id), with `renormalize` divided by their sum +
// renorm_eps; out = h + sum_j w[t, j] * expert_{ids[t, j]}(x[t]). Sums run in another order than torch's: results
// agree to float rounding, not bit for bit.

#include <torch/library.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "stream_gemm.h"

namespace {

using namespace moe_serve_stream;

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> decode_moe(
    const torch::Tensor& h, const torch::Tensor& norm_w, double eps, const torch::Tensor& router_w, int64_t top_k,
    bool renormalize, double renorm_eps, const torch::Tensor& w13, const torch::Tensor& w2, c10::string_view isa_view,
    at::IntArrayRef kinds_router, at::IntArrayRef kinds13, at::IntArrayRef kinds2) {
  const std::string isa(isa_view);
  check_isa(isa, "decode_moe");
  for (const torch::Tensor* t : {&h, &norm_w, &router_w, &w13, &w2})
    TORCH_CHECK(t->device().is_cpu(), "decode_moe: CPU tensors expected");
  for (const torch::Tensor* t : {&h, &norm_w, &router_w})
    TORCH_CHECK(t->scalar_type() == torch::kFloat32, "decode_moe: h, norm and router weights must be float32");
  TORCH_CHECK(w13.scalar_type() == w2.scalar_type() &&
                  (w13.scalar_type() == torch::kFloat32 || w13.scalar_type() == torch::kBFloat16),
              "decode_moe: expert weights must both be float32 or both bfloat16 (multiplied in float32)");
  TORCH_CHECK(h.dim() == 2 && h.size(0) >= 1, "decode_moe: h must be [T, hidden], got ", h.sizes());
  const int64_t tokens = h.size(0), hidden = h.size(1);
  TORCH_CHECK(norm_w.dim() == 1 && norm_w.size(0) == hidden, "decode_moe: norm weight must be [", hidden, "]");
  TORCH_CHECK(router_w.dim() == 2 && router_w.size(1) == hidden && router_w.size(0) >= 1,
              "decode_moe: router weight ", router_w.sizes(), " is not [experts, ", hidden, "]");
  const int64_t experts = router_w.size(0);
  TORCH_CHECK(w13.dim() == 3 && w2.dim() == 3 && w13.size(0) == experts && w2.size(0) == experts &&
                  w13.size(2) == hidden && w13.size(1) % 2 == 0 && w2.size(1) == hidden &&
                  w2.size(2) == w13.size(1) / 2,
              "decode_moe: w13 ", w13.sizes(), " and w2 ", w2.sizes(), " do not fit ", experts, " experts over ",
              hidden);
  TORCH_CHECK(top_k >= 1 && top_k <= experts, "decode_moe: top_k ", top_k, " outside 1..", experts);

  const Vec vec = vec_for(isa);
  const auto hc = h.contiguous();
  const auto norm_wc = norm_w.contiguous();  // kept: a pointer into a temporary's copy would dangle
  auto x = torch::empty({tokens, hidden}, hc.options());
  rms_norm_rows(vec, hc.data_ptr<float>(), norm_wc.data_ptr<float>(), x.data_ptr<float>(), tokens, hidden,
                static_cast<float>(eps));
  auto logits = torch::empty({tokens, experts}, hc.options());
  planned_product(x, router_w.contiguous(), logits, form_for(kinds_router, tokens), pick(isa));

  auto weights = torch::empty({tokens, top_k}, hc.options());
  auto ids = torch::empty({tokens, top_k}, torch::kLong);
  const float* lp = logits.data_ptr<float>();
  float* wp = weights.data_ptr<float>();
  int64_t* ip = ids.data_ptr<int64_t>();
  std::vector<float> p(experts);
  std::vector<int64_t> order(experts);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* l = lp + t * experts;
    const float top = *std::max_element(l, l + experts);
    float total = 0.0f;
    for (int64_t e = 0; e < experts; ++e) total += (p[e] = std::exp(l[e] - top));
    for (int64_t e = 0; e < experts; ++e) p[e] /= total;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                      [&](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float kept = 0.0f;
    for (int64_t j = 0; j < top_k; ++j) kept += p[order[j]];
    const float denominator = renormalize ? kept + static_cast<float>(renorm_eps) : 1.0f;
    for (int64_t j = 0; j < top_k; ++j) {
      ip[t * top_k + j] = order[j];
      wp[t * top_k + j] = p[order[j]] / denominator;
    }
  }
  auto out = expert_forward(x, w13, w2, ids, weights, isa, kinds13, kinds2);
  return {out.add_(hc), weights, ids};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(moe_serve, library) {
  library.def(
      "decode_moe(Tensor h, Tensor norm_w, float eps, Tensor router_w, int top_k, bool renormalize, float renorm_eps, "
      "Tensor w13, Tensor w2, str isa, int[] kinds_router, int[] kinds13, int[] kinds2) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(moe_serve, CPU, library) { library.impl("decode_moe", &decode_moe); }
