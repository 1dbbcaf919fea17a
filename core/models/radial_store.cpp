// Radial Networks' unified KV store (§5.2) and its attention: the store's visibility rule, the masked attention over
// the whole store (on the CPU a fused kernel over the masked rectangle), and the causal staircase a routing step of
// the parallel forward scores (blocks/staircase_attention.h).
#include "core/models/radial.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/models/blocks/attention.h"
#include "core/models/blocks/part_scope.h"
#include "core/models/blocks/staircase_attention.h"

namespace routelab {
void UnifiedKVStore::append(const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& entry_position,
                            std::int64_t entry_step, const torch::Tensor& entry_valid) {
  const auto steps = torch::full_like(entry_position, entry_step);  // (B, n)
  if (!keys.defined()) {
    keys = k, values = v, position = entry_position, step = steps, valid = entry_valid;
    return;
  }
  keys = torch::cat({keys, k}, 2);
  values = torch::cat({values, v}, 2);
  position = torch::cat({position, entry_position}, 1);
  step = torch::cat({step, steps}, 1);
  valid = torch::cat({valid, entry_valid}, 1);
}

torch::Tensor UnifiedKVStore::visible(const torch::Tensor& q_position, const torch::Tensor& q_step) const {
  // (B, 1, N) against (B, Tq, 1): a later token's entries (position > t) and later steps' entries stay hidden.
  return valid.unsqueeze(1)
      .logical_and(position.unsqueeze(1).le(q_position.unsqueeze(2)))
      .logical_and(step.unsqueeze(1).le(q_step.unsqueeze(2)));  // (B, Tq, N)
}

namespace {

/// The (rows, cols) matrix of head h of batch b in a 4-D tensor indexed (b, h, row, col) with any strides.
torch::Tensor head_matrix(const torch::Tensor& t, std::int64_t b, std::int64_t h) {
  return t.as_strided({t.size(2), t.size(3)}, {t.stride(2), t.stride(3)},
                      t.storage_offset() + b * t.stride(0) + h * t.stride(1));
}

/// softmax(scale q k^T + bias) v on CPU in fp32 for q (B, H, Tq, hd), k, v (B, Hkv, N, hd) and an additive bias
/// (B, Tq, N) (0 visible, -inf hidden, at least one visible entry per row). Only the first rows[b] queries of
/// sequence b are computed (the rest are padding and get zeros). Like the causal kernel in blocks/attention.cpp,
/// it parallelises over (batch, head) with one GEMM per head on strided views and keeps one score buffer per
/// thread, so the masked (Tq, N) problem costs no more full-size temporaries than the probabilities it saves.
class CpuStoreAttention : public torch::autograd::Function<CpuStoreAttention> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& bias, std::vector<std::int64_t> rows) {
    const auto B = q.size(0), H = q.size(1), Tq = q.size(2), hd = q.size(3), N = k.size(2);
    const auto n_rep = H / k.size(1);
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    auto probs = torch::empty({B, H, Tq, N}, q.options());
    auto out = torch::zeros({B, Tq, H, hd}, q.options()).transpose(1, 2);  // (B, H, Tq, hd) over (B, Tq, H, hd)
    parallel_for_as_caller(0, B * H, 1, [&](std::int64_t begin, std::int64_t end) {
      auto scores_buf = torch::empty({Tq * N}, q.options());
      for (std::int64_t i = begin; i < end; ++i) {
        const auto b = i / H, h = i % H, n = rows[static_cast<std::size_t>(b)];
        if (n == 0) continue;
        const auto qi = head_matrix(q, b, h).narrow(0, 0, n);
        const auto ki = head_matrix(k, b, h / n_rep), vi = head_matrix(v, b, h / n_rep);
        auto scores = scores_buf.narrow(0, 0, n * N).view({n, N});
        at::addmm_out(scores, bias[b].narrow(0, 0, n), qi, ki.t(), /*beta=*/1.0, /*alpha=*/scale);
        auto pi = head_matrix(probs, b, h).narrow(0, 0, n);
        at::_softmax_out(pi, scores, -1, false);
        auto oi = head_matrix(out, b, h).narrow(0, 0, n);
        at::mm_out(oi, pi, vi);
      }
    });
    ctx->save_for_backward({q, k, v, probs});
    ctx->saved_data["rows"] = rows;
    return out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &probs = saved[3];
    const auto rows = ctx->saved_data["rows"].toIntVector();
    const auto& d_out = grads[0];  // (B, H, Tq, hd)
    const auto B = q.size(0), H = q.size(1), Tq = q.size(2), hd = q.size(3), Hkv = k.size(1), N = k.size(2);
    const auto n_rep = H / Hkv;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    auto dq = torch::zeros({B, Tq, H, hd}, q.options()).transpose(1, 2);
    // Per query head; the heads sharing a key/value head are summed afterwards (no two threads write one buffer).
    auto dk = torch::zeros({B, H, N, hd}, q.options()), dv = torch::zeros({B, H, N, hd}, q.options());
    parallel_for_as_caller(0, B * H, 1, [&](std::int64_t begin, std::int64_t end) {
      auto d_probs_buf = torch::empty({Tq * N}, q.options());
      auto d_scores_buf = torch::empty({Tq * N}, q.options());
      for (std::int64_t i = begin; i < end; ++i) {
        const auto b = i / H, h = i % H, n = rows[static_cast<std::size_t>(b)];
        if (n == 0) continue;
        const auto qi = head_matrix(q, b, h).narrow(0, 0, n), gi = head_matrix(d_out, b, h).narrow(0, 0, n);
        const auto ki = head_matrix(k, b, h / n_rep), vi = head_matrix(v, b, h / n_rep);
        const auto pi = head_matrix(probs, b, h).narrow(0, 0, n);
        auto d_probs = d_probs_buf.narrow(0, 0, n * N).view({n, N});
        auto d_scores = d_scores_buf.narrow(0, 0, n * N).view({n, N});
        auto dvi = head_matrix(dv, b, h), dki = head_matrix(dk, b, h), dqi = head_matrix(dq, b, h).narrow(0, 0, n);
        at::mm_out(dvi, pi.t(), gi);      // dV = P^T dO
        at::mm_out(d_probs, gi, vi.t());  // dP = dO V^T
        at::_softmax_backward_data_out(d_scores, d_probs, pi, -1, pi.scalar_type());
        at::addmm_out(dqi, dqi, d_scores, ki, /*beta=*/0.0, /*alpha=*/scale);      // dQ = scale dS K
        at::addmm_out(dki, dki, d_scores.t(), qi, /*beta=*/0.0, /*alpha=*/scale);  // dK = scale dS^T Q
      }
    });
    const auto group = [&](const torch::Tensor& g) { return g.view({B, Hkv, n_rep, N, hd}).sum(2); };
    return {dq, group(dk), group(dv), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor unified_attention(const torch::Tensor& q, const UnifiedKVStore& store, const torch::Tensor& visible,
                                double dropout, bool training, const std::vector<std::int64_t>& rows, double* pairs) {
  ROUTELAB_PART("attention");
  const auto B = q.size(0), H = q.size(1), Tq = q.size(2), hd = q.size(3);
  const auto N = static_cast<double>(store.size());
  // A query that sees nothing (a padding row) would make a NaN softmax: it attends to every entry instead and its
  // output is zeroed, so it passes neither values nor gradients.
  const auto any = visible.any(-1, /*keepdim=*/true);                              // (B, Tq, 1)
  const auto hidden = visible.logical_or(any.logical_not()).logical_not();         // (B, Tq, N)
  const bool dropping = training && dropout > 0;
  torch::Tensor out;
  if (q.device().is_cpu() && !dropping && q.scalar_type() == torch::kFloat &&
      store.keys.scalar_type() == torch::kFloat && store.values.scalar_type() == torch::kFloat &&
      q.stride(3) == 1 && store.keys.stride(3) == 1 && store.values.stride(3) == 1) {
    const auto bias = torch::zeros(hidden.sizes(), q.options())
                          .masked_fill_(hidden, -std::numeric_limits<float>::infinity());  // (B, Tq, N)
    const auto run = rows.empty() ? std::vector<std::int64_t>(static_cast<std::size_t>(B), Tq) : rows;
    if (pairs) {  // the kernel scores the real rows of each sequence only
      *pairs = 0;
      for (const auto n : run) *pairs += static_cast<double>(n) * N;
    }
    out = CpuStoreAttention::apply(q, store.keys, store.values, bias, run);
  } else {
    if (pairs) *pairs = static_cast<double>(B * Tq) * N;  // the batched products score the padding rows too
    const auto k = repeat_kv(store.keys, H / store.keys.size(1));  // (B, H, N, hd)
    const auto v = repeat_kv(store.values, H / store.values.size(1));
    const auto scaled_q = q * (1.0 / std::sqrt(static_cast<double>(hd)));
    auto scores = torch::matmul(scaled_q, k.transpose(-2, -1)).to(torch::kFloat);  // (B, H, Tq, N)
    scores = scores.masked_fill(hidden.unsqueeze(1), -std::numeric_limits<float>::infinity());
    auto probs = torch::softmax(scores, -1);
    if (dropping) probs = torch::dropout(probs, dropout, true);
    out = torch::matmul(probs.to(v.scalar_type()), v);  // (B, H, Tq, hd)
  }
  return out * any.unsqueeze(1).to(out.scalar_type());
}

torch::Tensor unified_attention_to_position(const torch::Tensor& q, const UnifiedKVStore& store,
                                            const torch::Tensor& q_position, const std::vector<std::int64_t>& rows,
                                            double* pairs) {
  ROUTELAB_PART("attention");
  const auto B = q.size(0), Hkv = store.keys.size(1), N = store.size(), hd = q.size(3);
  // Entries by position, padding last: query row i then sees the first lens[b][i] of them.
  const auto key = store.position.masked_fill(store.valid.logical_not(), std::numeric_limits<std::int64_t>::max());
  const auto [sorted, order] = key.sort(/*stable=*/true, 1, false);                                   // (B, N)
  const auto lens = torch::searchsorted(sorted, q_position.contiguous(), false, /*right=*/true).contiguous();
  const auto by_position = order.view({B, 1, N, 1}).expand({B, Hkv, N, hd});
  if (pairs) {  // priced as the rectangle of the real rows, as dense attention's causal blocks are priced as the square
    *pairs = 0;
    for (const auto n : rows) *pairs += static_cast<double>(n) * static_cast<double>(N);
  }
  return cpu_staircase_attention(q, store.keys.gather(2, by_position), store.values.gather(2, by_position), lens, rows);
}

}  // namespace routelab
