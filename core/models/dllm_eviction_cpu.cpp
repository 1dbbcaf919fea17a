// D-LLM's evicting attention on the CPU through the pieces of RouteLab's CPU attention kernel
// (core/models/blocks/cpu_attention_kernel.h): the dense kernel's causal query blocks and one single-threaded BLAS
// product per head and block, with the keys' execute flags applied to each block's probabilities.
#include <cmath>

#include <ATen/record_function.h>

#include "core/models/blocks/attention.h"
#include "core/models/blocks/cpu_attention_kernel.h"
#include "core/models/blocks/cpu_softmax.h"
#include "core/models/dllm_eviction.h"
#include "core/util/process.h"

namespace routelab {
namespace {

using namespace cpu_attention;

/// Each of `count` rows of `width` holds the causal softmax of its scores (0 on future keys). Rewritten in place as
/// R = softmax / (sum_j softmax_j w_j + eps), the official renormalisation of the flagged probabilities (the
/// softmax's own denominator cancels: eps multiplies it, as in the chunked form), and P = R w written to `p`.
/// `log_norm`, when given, receives each row's log(sum_j softmax_j w_j + eps).
void weigh_rows(float* r, float* p, std::int64_t count, std::int64_t width, const float* w, float eps,
                float* log_norm = nullptr) {
  for (std::int64_t row = 0; row < count; ++row, r += width, p += width) {
    double mass = 0;  // the row's probability on executed keys
    for (std::int64_t j = 0; j < width; ++j) mass += static_cast<double>(r[j]) * w[j];
    const auto inverse = static_cast<float>(1.0 / (mass + eps));
    if (log_norm) log_norm[row] = static_cast<float>(std::log(mass + eps));
    for (std::int64_t j = 0; j < width; ++j) {
      r[j] *= inverse;
      p[j] = r[j] * w[j];
    }
  }
}

/// The backward of weigh_rows and the softmax for rows of R and P = R w, with `d` holding dP = dO V^T on entry:
/// Delta = rowsum(P dP), and `d` becomes dS = R (w (dP - Delta) - eps Delta) (the gradient of the scores before
/// their scale); `dw`, when given, gains each key's sum over the rows of R (dP - Delta).
void weigh_rows_backward(const float* r, const float* p, float* d, std::int64_t count, std::int64_t width,
                         const float* w, float eps, float* dw) {
  for (std::int64_t row = 0; row < count; ++row, r += width, p += width, d += width) {
    double delta = 0;
    for (std::int64_t j = 0; j < width; ++j) delta += static_cast<double>(p[j]) * d[j];
    const auto dl = static_cast<float>(delta);
    for (std::int64_t j = 0; j < width; ++j) {
      const float centred = d[j] - dl;
      if (dw) dw[j] += r[j] * centred;
      d[j] = r[j] * (w[j] * centred - eps * dl);
    }
  }
}

/// q, k, v (B, H, T, hd) fp32 with inner stride 1, flags w (B, T). Forward as CpuCausalAttention (attention.cpp) with
/// each block's softmax rows weighed (weigh_rows); where a gradient is wanted (`keep`), R, the causal half of
/// (B, H, T, T), is saved for the backward as that kernel saves its probabilities (or recomputed there from each
/// row's log(softmax normaliser x (mass + eps)), as that kernel recomputes its own), and P = R w rebuilt from it;
/// without, each block's R lives in a buffer of one block.
class CpuEvictingAttention : public torch::autograd::Function<CpuEvictingAttention> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& w, Eviction eviction, bool keep) {
    const auto B = q.size(0), H = q.size(1), T = q.size(2), hd = q.size(3);
    const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
    const auto eps = static_cast<float>(eviction == Eviction::Multiplicative ? kEvictionRenormaliseEps : 0.0);
    // Priced and counted at the full square, as the dense kernel is (its one input: the products' multiply-adds).
    const double square = static_cast<double>(B) * static_cast<double>(T) * static_cast<double>(T);
    const std::vector<c10::IValue> work = {c10::IValue(2.0 * static_cast<double>(H * hd) * square)};
    RECORD_FUNCTION(kCpuAttentionEvent, work);
    const auto weights = eviction_key_weights(w, eviction).contiguous();  // (B, T)
    const CausalBlocks shape(T, T);
    const auto P = shape.packed();
    const bool recompute = keep && recompute_probabilities(cpu_eviction_saved_bytes(B, H, T));
    // R of every block, or each row's log-normaliser (B, H, T); nothing without a backward
    auto held = !keep      ? torch::Tensor()
                : recompute ? torch::empty({B, H, T}, q.options())
                            : torch::empty({B * H * P}, q.options());
    auto out = torch::empty({B, T, H, hd}, q.options()).transpose(1, 2);  // (B, H, T, hd) over (B, T, H, hd)
    const auto G = softmax_group(H, T);
    const bool fused = fused_softmax_active();
    parallel_for_as_caller(0, B * (H / G), 1, [&](std::int64_t begin, std::int64_t end) {
      const auto room = G * shape.block * T;
      auto scores = torch::empty({room}, q.options());  // one block's scores, then its P
      const auto block_r = recompute || !keep ? torch::empty({room}, q.options()) : torch::Tensor();
      const auto log_norm = recompute ? torch::empty({G * shape.block}, q.options()) : torch::Tensor();
      for (std::int64_t i = begin; i < end; ++i) {
        const auto b = i / (H / G), h0 = (i % (H / G)) * G;
        const auto* wb = weights.data_ptr<float>() + b * T;
        const auto group = (b * H + h0) * P;
        for (std::int64_t x = 0; x < shape.count(); ++x) {
          const auto s = shape.start(x), e = shape.end(x), r = e - s;
          if (!recompute) {
            auto rb = keep ? held.narrow(0, group + G * shape.offset(x), G * r * e).view({G, r, e})
                           : block_r.narrow(0, 0, G * r * e).view({G, r, e});
            block_softmax(q, k, b, h0, G, s, e, scale, scores, rb, fused);
            weigh_rows(rb.data_ptr<float>(), scores.data_ptr<float>(), G * r, e, wb, eps);
          } else {
            const auto lse = held[b].narrow(0, h0, G).narrow(1, s, r);  // (G, r): the softmax's, then R's
            probabilities_from_lse(q, k, b, h0, G, s, e, scale, scores, lse, /*fill=*/true,
                                   block_r.narrow(0, 0, G * r * e).view({G, r, e}), fused);
            weigh_rows(block_r.data_ptr<float>(), scores.data_ptr<float>(), G * r, e, wb, eps,
                       log_norm.data_ptr<float>());
            lse.add_(log_norm.narrow(0, 0, G * r).view({G, r}));
          }
          for (std::int64_t g = 0; g < G; ++g)  // O = P V
            gemm(false, false, {scores.data_ptr<float>() + g * r * e, r, e, e}, head(v, b, h0 + g, e),
                 rows(out, b, h0 + g, s, r), 1.0f);
        }
      }
    });
    if (!keep) return out;
    ctx->save_for_backward({q, k, v, weights, held});
    ctx->saved_data["recompute"] = recompute;
    ctx->saved_data["eviction"] = static_cast<std::int64_t>(eviction);
    ctx->saved_data["flags_type"] = static_cast<std::int64_t>(w.scalar_type());
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &weights = saved[3], &held = saved[4];
    const bool recompute = ctx->saved_data["recompute"].toBool();
    const bool multiplicative = static_cast<Eviction>(ctx->saved_data["eviction"].toInt()) == Eviction::Multiplicative;
    const auto eps = static_cast<float>(multiplicative ? kEvictionRenormaliseEps : 0.0);
    const auto d_out = grads[0].stride(3) == 1 ? grads[0] : grads[0].contiguous();  // (B, H, T, hd)
    const auto B = q.size(0), H = q.size(1), T = q.size(2), hd = q.size(3);
    const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
    RECORD_FUNCTION(kCpuAttentionBackwardEvent, std::vector<c10::IValue>{});
    const auto make = [&] { return torch::empty({B, T, H, hd}, q.options()).transpose(1, 2); };
    auto dq = make(), dk = make(), dv = make();
    const CausalBlocks shape(T, T);
    const auto P = shape.packed();
    const auto G = softmax_group(H, T);
    const bool fused = fused_softmax_active();
    // The flags' gradient per work item (sequence, head group), summed over the groups after the loop.
    auto dw_items = multiplicative ? torch::zeros({B * (H / G), T}, q.options()) : torch::Tensor();
    parallel_for_as_caller(0, B * (H / G), 1, [&](std::int64_t begin, std::int64_t end) {
      const auto scratch = G * shape.block * T;
      auto p = torch::empty({scratch}, q.options());
      auto d = torch::empty({scratch}, q.options());
      const auto block_r = recompute ? torch::empty({scratch}, q.options()) : torch::Tensor();
      for (std::int64_t i = begin; i < end; ++i) {
        const auto b = i / (H / G), h0 = (i % (H / G)) * G;
        const auto* wb = weights.data_ptr<float>() + b * T;
        auto* dw = dw_items.defined() ? dw_items.data_ptr<float>() + i * T : nullptr;
        const auto group = (b * H + h0) * P;
        // The last block first: it reaches every key, so its dK and dV products write rows [0, T) and the earlier
        // blocks add to the rows they reach.
        for (auto x = shape.count() - 1; x >= 0; --x) {
          const auto s = shape.start(x), e = shape.end(x), r = e - s;
          const float accumulate = x == shape.count() - 1 ? 0.0f : 1.0f;
          const float* rb = nullptr;
          if (recompute) {  // R = exp(scores - log-normaliser); d is free until dP below
            probabilities_from_lse(q, k, b, h0, G, s, e, scale, d, held[b].narrow(0, h0, G).narrow(1, s, r),
                                   /*fill=*/false, block_r.narrow(0, 0, G * r * e).view({G, r, e}), fused);
            rb = block_r.data_ptr<float>();
          } else {
            rb = held.data_ptr<float>() + group + G * shape.offset(x);
          }
          auto* pb = p.data_ptr<float>();
          for (std::int64_t a = 0; a < G * r; ++a)  // P = R w
            for (std::int64_t j = 0; j < e; ++j) pb[a * e + j] = rb[a * e + j] * wb[j];
          for (std::int64_t g = 0; g < G; ++g) {
            const auto gi = rows(d_out, b, h0 + g, s, r);
            gemm(true, false, {p.data_ptr<float>() + g * r * e, r, e, e}, gi, head(dv, b, h0 + g, e), 1.0f,
                 accumulate);                                                                     // dV += P^T dO
            gemm(false, true, gi, head(v, b, h0 + g, e), {d.data_ptr<float>() + g * r * e, r, e, e}, 1.0f);  // dP
          }
          weigh_rows_backward(rb, pb, d.data_ptr<float>(), G * r, e, wb, eps, dw);  // dP -> dS
          for (std::int64_t g = 0; g < G; ++g) {
            const Mat dsg{d.data_ptr<float>() + g * r * e, r, e, e};
            gemm(false, false, dsg, head(k, b, h0 + g, e), rows(dq, b, h0 + g, s, r), scale);  // dQ = scale dS K
            gemm(true, false, dsg, rows(q, b, h0 + g, s, r), head(dk, b, h0 + g, e), scale,
                 accumulate);  // dK += scale dS^T Q
          }
        }
      }
    });
    torch::Tensor dw;
    if (multiplicative) {
      const auto flags_type = static_cast<torch::ScalarType>(ctx->saved_data["flags_type"].toInt());
      dw = dw_items.view({B, H / G, T}).sum(1).to(flags_type);
    }
    return {dq, dk, dv, dw, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

double cpu_eviction_saved_bytes(std::int64_t B, std::int64_t H, std::int64_t T) {
  return kept_probabilities_bytes(B, H, T);
}

bool cpu_eviction_active(const torch::Device& device) {
  static const bool off = switched_off_in_environment("ROUTELAB_CPU_EVICTION");
  return device.is_cpu() && !off;
}

torch::Tensor evicting_attention_cpu(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& w, Eviction eviction) {
  TORCH_CHECK(q.device().is_cpu() && k.sizes() == q.sizes() && v.sizes() == q.sizes() && w.size(1) == q.size(2),
              "evicting_attention_cpu: q, k and v of one shape on the CPU, flags for every position");
  const auto fp32 = [](const torch::Tensor& t) {
    const auto f = t.to(torch::kFloat);
    return f.stride(3) == 1 ? f : f.contiguous();
  };
  const bool keep = torch::GradMode::is_enabled() &&
                    (q.requires_grad() || k.requires_grad() || v.requires_grad() || w.requires_grad());
  return CpuEvictingAttention::apply(fp32(q), fp32(k), fp32(v), w, eviction, keep).to(v.scalar_type());
}

}  // namespace routelab
