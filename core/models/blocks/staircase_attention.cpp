// The staircase kernel: a torch::autograd::Function whose forward and backward run blocks of kStaircaseRows query
// rows as direct BLAS products (cpu_attention::gemm) and the dense kernel's row softmax over each row's entries
// (cpu_softmax.h) in a parallel loop over (batch, head); compiled with OpenMP (core/CMakeLists.txt).
#include "core/models/blocks/staircase_attention.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/models/blocks/attention.h"
#include "core/models/blocks/cpu_attention_kernel.h"
#include "core/models/blocks/cpu_softmax.h"

namespace routelab {
namespace {

/// Query rows a block of the staircase kernel scores together: each block scores the entries up to its widest row's
/// end. Smaller blocks waste less of the staircase (32 rows: about 1/16 of a step of 256 rows' pairs beyond the
/// exact half, 64: 1/8) but make more, smaller products; the two timed alike on two threads (2026-12-01).
constexpr std::int64_t kStaircaseRows = 32;

/// softmax(scale q k^T) v on CPU in fp32 for q (B, H, Tq, hd) and k, v (B, Hkv, N, hd), inner strides 1, whose
/// entries are ordered so that query row i of sequence b sees exactly entries [0, lens[b][i]) (lens (B, Tq) int64):
/// a staircase when the rows are ordered by position. Only the first rows[b] rows are computed (the rest, and a row
/// that sees nothing, get zeros). Query rows go in blocks of kStaircaseRows, each block scoring the entries up to
/// its widest row's end with the rest of each row masked, so about half of the rectangle is computed where the
/// causal rule hides half. Parallel over (batch, head) like CpuStoreAttention, one BLAS product per block and step
/// of the product (cpu_attention::gemm); the probabilities it keeps are each block's (r, e) scores, packed at the
/// start of the block's rows in a (B, H, Tq N) buffer.
class CpuStaircaseAttention : public torch::autograd::Function<CpuStaircaseAttention> {
 public:
  /// The entries block [r0, r0 + r) of a sequence scores: its rows' widest end.
  static std::int64_t block_end(const std::int64_t* lens, std::int64_t r0, std::int64_t r) {
    return *std::max_element(lens + r0, lens + r0 + r);
  }

  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& lens, std::vector<std::int64_t> rows) {
    using namespace cpu_attention;
    const auto B = q.size(0), H = q.size(1), Tq = q.size(2), hd = q.size(3), N = k.size(2);
    const auto n_rep = H / k.size(1), R = kStaircaseRows;
    const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
    const float hidden = -std::numeric_limits<float>::infinity();
    // The products bypass ATen's matmul ops: one profiler event carrying the multiply-adds, priced over the real
    // rows' rectangle as the dense kernel prices its square (core/cost/flop_counter.h reads it).
    double pairs = 0;
    for (const auto n : rows) pairs += static_cast<double>(n) * static_cast<double>(N);
    const std::vector<c10::IValue> work = {c10::IValue(2.0 * static_cast<double>(H * hd) * pairs)};
    RECORD_FUNCTION(kCpuAttentionEvent, work);
    auto probs = torch::empty({B, H, Tq * N}, q.options());
    auto out = torch::zeros({B, Tq, H, hd}, q.options()).transpose(1, 2);  // (B, H, Tq, hd) over (B, Tq, H, hd)
    const auto* len = lens.data_ptr<std::int64_t>();
    const bool fused = fused_softmax_active();
    parallel_for_as_caller(0, B * H, 1, [&](std::int64_t begin, std::int64_t end) {
      auto scores_buf = torch::empty({R * N}, q.options());
      for (std::int64_t i = begin; i < end; ++i) {
        const auto b = i / H, h = i % H, n = rows[static_cast<std::size_t>(b)];
        const auto* row_len = len + b * Tq;
        for (std::int64_t r0 = 0; r0 < n; r0 += R) {
          const auto r = std::min(R, n - r0), e = block_end(row_len, r0, r);
          if (e == 0) continue;
          auto scores = scores_buf.narrow(0, 0, r * e).view({r, e});
          const Mat sc{scores.data_ptr<float>(), r, e, e};
          gemm(false, true, cpu_attention::rows(q, b, h, r0, r), head(k, b, h / n_rep, e), sc, scale);  // scale Q K^T
          float* p_data = probs.data_ptr<float>() + i * Tq * N + r0 * N;
          if (fused) {  // each row's entries only (cpu_softmax.h)
            softmax_visible(sc.data, p_data, r, e, row_len + r0);
          } else {
            for (std::int64_t j = 0; j < r; ++j) {
              const auto seen = std::max<std::int64_t>(row_len[r0 + j], 0);
              std::fill(sc.data + j * e + seen, sc.data + (j + 1) * e, seen > 0 ? hidden : 0.0f);  // zeroed below
            }
            auto p = torch::from_blob(p_data, {r, e}, q.options());
            at::_softmax_out(p, scores, -1, false);
            for (std::int64_t j = 0; j < r; ++j)
              if (row_len[r0 + j] <= 0) std::fill(p_data + j * e, p_data + (j + 1) * e, 0.0f);
          }
          gemm(false, false, Mat{p_data, r, e, e}, head(v, b, h / n_rep, e), cpu_attention::rows(out, b, h, r0, r),
               1.0f);  // O = P V
        }
      }
    });
    ctx->save_for_backward({q, k, v, probs, lens});
    ctx->saved_data["rows"] = rows;
    return out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    using namespace cpu_attention;
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &probs = saved[3], &lens = saved[4];
    const auto rows = ctx->saved_data["rows"].toIntVector();
    RECORD_FUNCTION(kCpuAttentionBackwardEvent, std::vector<c10::IValue>{});  // its ATen ops nest inside
    const auto d_out = grads[0].stride(3) == 1 ? grads[0] : grads[0].contiguous();  // (B, H, Tq, hd)
    const auto B = q.size(0), H = q.size(1), Tq = q.size(2), hd = q.size(3), Hkv = k.size(1), N = k.size(2);
    const auto n_rep = H / Hkv, R = kStaircaseRows;
    const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
    auto dq = torch::zeros({B, Tq, H, hd}, q.options()).transpose(1, 2);
    // Per query head; the heads sharing a key/value head are summed afterwards (no two threads write one buffer).
    auto dk = torch::zeros({B, H, N, hd}, q.options()), dv = torch::zeros({B, H, N, hd}, q.options());
    const auto* len = lens.data_ptr<std::int64_t>();
    const bool fused = fused_softmax_active();
    parallel_for_as_caller(0, B * H, 1, [&](std::int64_t begin, std::int64_t end) {
      auto d_probs_buf = torch::empty({R * N}, q.options()), d_scores_buf = torch::empty({R * N}, q.options());
      for (std::int64_t i = begin; i < end; ++i) {
        const auto b = i / H, h = i % H, n = rows[static_cast<std::size_t>(b)];
        for (std::int64_t r0 = 0; r0 < n; r0 += R) {
          const auto r = std::min(R, n - r0), e = block_end(len + b * Tq, r0, r);
          if (e == 0) continue;
          const auto qi = cpu_attention::rows(q, b, h, r0, r), gi = cpu_attention::rows(d_out, b, h, r0, r);
          const auto ki = head(k, b, h / n_rep, e), vi = head(v, b, h / n_rep, e);
          float* p_data = probs.data_ptr<float>() + i * Tq * N + r0 * N;
          const auto d_probs = d_probs_buf.narrow(0, 0, r * e).view({r, e});
          auto d_scores = d_scores_buf.narrow(0, 0, r * e).view({r, e});
          const Mat pi{p_data, r, e, e}, dp{d_probs.data_ptr<float>(), r, e, e};
          const Mat ds{d_scores.data_ptr<float>(), r, e, e};
          gemm(true, false, pi, gi, head(dv, b, h, e), 1.0f, 1.0f);  // dV += P^T dO
          gemm(false, true, gi, vi, dp, 1.0f);                       // dP = dO V^T
          if (fused)
            softmax_backward_visible(dp.data, p_data, ds.data, r, e, len + b * Tq + r0);
          else
            at::_softmax_backward_data_out(d_scores, d_probs, torch::from_blob(p_data, {r, e}, q.options()), -1,
                                           torch::kFloat);
          gemm(false, false, ds, ki, cpu_attention::rows(dq, b, h, r0, r), scale);  // dQ = scale dS K
          gemm(true, false, ds, qi, head(dk, b, h, e), scale, 1.0f);              // dK += scale dS^T Q
        }
      }
    });
    const auto group = [&](const torch::Tensor& g) { return g.view({B, Hkv, n_rep, N, hd}).sum(2); };
    return {dq, group(dk), group(dv), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool staircase_attention_runs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double dropout,
                              bool training) {
  const auto type = q.scalar_type();
  return q.device().is_cpu() && !(training && dropout > 0) && k.scalar_type() == type && v.scalar_type() == type &&
         (type == torch::kFloat ||
          ((type == torch::kBFloat16 || type == torch::kHalf) && cpu_attention::upcast_enabled()));
}

torch::Tensor cpu_staircase_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& lens, const std::vector<std::int64_t>& rows) {
  const auto fp32 = [](const torch::Tensor& t) { return t.to(torch::kFloat).contiguous(); };
  const auto out = CpuStaircaseAttention::apply(fp32(q), fp32(k), fp32(v), lens.to(torch::kLong).contiguous(), rows);
  return out.to(q.scalar_type());
}

}  // namespace routelab
