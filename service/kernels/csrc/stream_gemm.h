// What stream_gemm.cpp shares with the other ops of the library (decode_attention.cpp): the product of a few rows in
// the form a plan chose, and the ISA the CPU runs.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace moe_serve_stream {

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
