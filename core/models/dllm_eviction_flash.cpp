// D-LLM's evicting attention through LibTorch's flash attention (LibTorch >= 2.3), or on a GPU through cuDNN's fused
// attention (LibTorch >= 2.6, opted into with ROUTELAB_EVICTION_CUDNN=1) or, in fp32, memory-efficient attention: the
// eviction rides in two extra head dimensions, and the flags' gradient in the padding columns of the one fused
// backward.
#include <cmath>
#include <optional>
#include <vector>

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/version.h>

#include "core/models/blocks/attention.h"
#include "core/models/blocks/part_scope.h"
#include "core/models/dllm_eviction.h"
#include "core/util/optional_kernel.h"
#include "core/util/process.h"

namespace routelab {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define ROUTELAB_FLASH_EVICTION 1
#endif
// cuDNN's fused attention with grouped key/value heads, as ATen ops with their backward (LibTorch 2.6 and later).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)
#define ROUTELAB_CUDNN_EVICTION 1
#endif

namespace {

/// An evicted key's weight, 2^-40 (its log, -27.7): small enough to leave every output unchanged (a relative 1e-12
/// per unit of the row's executed mass), and large enough that the single backward's dv of an evicted key, divided by
/// it, still gives the key's sum over queries of R dO that the flags' gradient needs (bf16 and fp32 both represent it).
const double kEvictedLogWeight = -40.0 * std::log(2.0);

/// The head size flash attention runs at: the real one plus the two eviction columns, to a multiple of 8.
std::int64_t flash_eviction_head_dim(std::int64_t head_dim) { return (head_dim + 2 + 7) / 8 * 8; }

#ifdef ROUTELAB_FLASH_EVICTION

/// x (B, H, T, hd) followed by the columns `extra` (B, H, T, 2) and zeros up to `padded`: one concatenation (the
/// zeros a broadcast column block), each element written once.
torch::Tensor with_columns(const torch::Tensor& x, const torch::Tensor& extra, std::int64_t padded) {
  const auto B = x.size(0), H = x.size(1), T = x.size(2);
  const auto rest = padded - x.size(3) - (extra.defined() ? 2 : 0);
  std::vector<torch::Tensor> parts{x};
  if (extra.defined()) parts.push_back(extra.to(x.scalar_type()));
  if (rest > 0) parts.push_back(torch::zeros({1, 1, 1, rest}, x.options()).expand({B, H, T, rest}));
  return torch::cat(parts, 3);
}

/// k or v (B, Hkv, T, d) as `kernel` takes them for H query heads: repeated to them for the memory-efficient kernel
/// (repeat_kv), as they are for the others (grouped heads served natively).
torch::Tensor kernel_heads(const torch::Tensor& x, EvictionKernel kernel, std::int64_t H) {
  return kernel == EvictionKernel::Efficient ? repeat_kv(x, H / x.size(1)) : x;
}

/// x (fp32) as a pair of `type` values whose sum is x to about 2^-16 relative (hi = x rounded, lo = the rest),
/// stacked on a last dimension of 2.
torch::Tensor split_pair(const torch::Tensor& x, torch::ScalarType type) {
  const auto hi = x.to(type);
  return torch::stack({hi, (x - hi.to(torch::kFloat)).to(type)}, -1);
}

/// One fused forward's results that its backward needs (the random state only matters with dropout, unused here).
struct FlashForward {
  torch::Tensor out, lse, cum_q, cum_k, seed, offset;
  std::int64_t max_q = 0, max_k = 0;
  EvictionKernel kernel = EvictionKernel::Flash;  ///< the GPU kernel that ran it (its backward then too)
};

/// A fused forward's results on a GPU (flash attention's and cuDNN's begin with the same eight, in one order).
template <typename Results>
FlashForward gpu_forward(const Results& r, EvictionKernel kernel) {
  FlashForward f;
  f.out = std::get<0>(r);
  f.lse = std::get<1>(r);
  f.cum_q = std::get<2>(r);
  f.cum_k = std::get<3>(r);
  f.max_q = std::get<4>(r).expect_int();
  f.max_k = std::get<5>(r).expect_int();
  f.seed = std::get<6>(r);
  f.offset = std::get<7>(r);
  f.kernel = kernel;
  return f;
}

/// The fused forward of `kernel` where q is on a GPU, else LibTorch's CPU flash attention. k and v have q's heads for
/// the memory-efficient kernel.
FlashForward flash_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale,
                           EvictionKernel kernel) {
#ifdef ROUTELAB_CUDNN_EVICTION
  if (q.is_cuda() && kernel == EvictionKernel::Cudnn)
    return gpu_forward(at::_scaled_dot_product_cudnn_attention(q, k, v, std::nullopt, /*compute_log_sumexp=*/true, 0.0,
                                                               /*is_causal=*/true, /*return_debug_mask=*/false, scale),
                       kernel);
#else
  TORCH_CHECK(!(q.is_cuda() && kernel == EvictionKernel::Cudnn),
              "evicting_attention_flash: cuDNN's attention needs LibTorch 2.6 or later");
#endif
  if (q.is_cuda() && kernel == EvictionKernel::Efficient) {
    FlashForward f;
    std::tie(f.out, f.lse, f.seed, f.offset) = at::_scaled_dot_product_efficient_attention(
        q, k, v, /*attn_bias=*/std::nullopt, /*compute_log_sumexp=*/true, 0.0, /*is_causal=*/true, scale);
    f.kernel = kernel;
    return f;
  }
  if (q.is_cuda())
    return gpu_forward(at::_scaled_dot_product_flash_attention(q, k, v, 0.0, /*is_causal=*/true, false, scale), kernel);
  FlashForward f;
  f.kernel = kernel;
  std::tie(f.out, f.lse) = at::_scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, /*is_causal=*/true, {}, scale);
  return f;
}

/// The fused backward of q, k, v for the forward `f` (by the same kernel), with upstream gradient g. -> dq, dk, dv
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> flash_backward(const FlashForward& f, const torch::Tensor& g,
                                                                       const torch::Tensor& q, const torch::Tensor& k,
                                                                       const torch::Tensor& v, double scale) {
#ifdef ROUTELAB_CUDNN_EVICTION
  if (q.is_cuda() && f.kernel == EvictionKernel::Cudnn)
    return at::_scaled_dot_product_cudnn_attention_backward(g, q, k, v, f.out, f.lse, f.seed, f.offset,
                                                            /*attn_bias=*/torch::Tensor(), f.cum_q, f.cum_k, f.max_q,
                                                            f.max_k, 0.0, /*is_causal=*/true, scale);
#endif
  if (q.is_cuda() && f.kernel == EvictionKernel::Efficient) {
    const auto [dq, dk, dv, dbias] = at::_scaled_dot_product_efficient_attention_backward(
        g, q, k, v, /*attn_bias=*/torch::Tensor(), f.out, f.lse, f.seed, f.offset, 0.0, {true, true, true, false},
        /*is_causal=*/true, scale);
    return {dq, dk, dv};
  }
  if (q.is_cuda())
    return at::_scaled_dot_product_flash_attention_backward(g, q, k, v, f.out, f.lse, f.cum_q, f.cum_k, f.max_q, f.max_k,
                                                            0.0, /*is_causal=*/true, f.seed, f.offset, scale);
  return at::_scaled_dot_product_flash_attention_for_cpu_backward(g, q, k, v, f.out, f.lse, 0.0, /*is_causal=*/true,
                                                                  {}, scale);
}

/// Causal flash attention in which key j's scores gain log w_j: q carries two columns of ones, k the pair
/// (hi, lo) of log(w_j) / scale, so softmax(s + log w) = a w / sum_j a w with a = exp(s - max s), the official
/// multiplicative form without its 1e-6 in the denominator (a relative 1e-6 / m, m the row's softmax mass on
/// executed keys), and the additive form for flags 0/1. Evicted keys (w = 0, or w < 0.5 additive) weigh
/// kEvictedLogWeight's 2^-40 instead of 0. k and v may have fewer heads than q (grouped heads, served natively).
///
/// One fused backward gives every gradient (that of the forward's `kernel`). With R = exp(s - lse) over
/// every causal key (lse the rows' log-normaliser), the flags' gradient (multiplicative) is dw_j = sum over heads and
/// queries i of R_ij (dO_i . v_j - Delta_i), Delta_i = dO_i . O_i. The upstream rows carry -Delta_i as a hi/lo pair in
/// the padding columns (where v and O are 0, so dq, dk and flash's own Delta are unchanged), and the padding of dv_j
/// becomes sum_i P_ij (dO_i, -Delta_i) with P_ij = R_ij w~_j, w~ the weight flash saw: dotted with (v_j, 1, 1) and
/// divided by w~_j, it is dw_j, evicted keys included. Their dk and dv, w~_j times R's sums where the exact ones are 0,
/// are zeroed. The memory-efficient kernel takes k and v repeated to every query head (repeated again for the
/// backward, not kept), and their gradients are summed back over each group.
class FlashEvictingAttentionFunction : public torch::autograd::Function<FlashEvictingAttentionFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& w, Eviction eviction,
                               EvictionKernel kernel) {
    // Autocast off: both passes run in the inputs' dtype, and the backward sees the forward's scores.
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto B = q.size(0), H = q.size(1), Hkv = k.size(1), T = q.size(2), hd = q.size(3);
    const auto padded = flash_eviction_head_dim(hd);
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    const auto type = q.scalar_type();
    TORCH_CHECK(k.scalar_type() == type && v.scalar_type() == type,
                "evicting_attention_flash: queries, keys and values must share one dtype");
    // An evicted key's 2^-40 and its gradient sums need fp32's exponent range (bf16 has it, fp16 does not).
    TORCH_CHECK(type == torch::kBFloat16 || type == torch::kFloat,
                "evicting_attention_flash: takes bf16 or fp32 (fp16 cannot hold an evicted key's weight)");
    const auto flags = w.detach().to(torch::kFloat);
    const bool multiplicative = eviction == Eviction::Multiplicative;
    const auto kept = multiplicative ? flags.gt(0.0) : flags.ge(0.5);  // (B, T): keys not evicted
    const auto log_w = multiplicative ? flags.clamp_min(0.0).log().clamp_min(kEvictedLogWeight)
                                      : torch::where(kept, 0.0, kEvictedLogWeight).to(torch::kFloat);
    const auto key_columns = split_pair(log_w / scale, type).view({B, 1, T, 2}).expand({B, Hkv, T, 2});
    const auto qp = with_columns(q, torch::ones({1, 1, 1, 2}, q.options()).expand({B, H, T, 2}), padded);
    const auto kp = with_columns(k, key_columns, padded);
    const auto vp = with_columns(v, torch::Tensor(), padded);
    const auto f = flash_forward(qp, kernel_heads(kp, kernel, H), kernel_heads(vp, kernel, H), scale, kernel);
    ctx->save_for_backward({qp, kp, vp, f.out, f.lse, kept});
    ctx->saved_data["cum_q"] = f.cum_q;
    ctx->saved_data["cum_k"] = f.cum_k;
    ctx->saved_data["seed"] = f.seed;
    ctx->saved_data["offset"] = f.offset;
    ctx->saved_data["max_q"] = f.max_q;
    ctx->saved_data["max_k"] = f.max_k;
    ctx->saved_data["kernel"] = static_cast<std::int64_t>(f.kernel);
    ctx->saved_data["eviction"] = static_cast<std::int64_t>(eviction);
    ctx->saved_data["flags_type"] = static_cast<std::int64_t>(w.scalar_type());
    return f.out.narrow(3, 0, hd);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto saved = ctx->get_saved_variables();
    const auto &qp = saved[0], &kp = saved[1], &vp = saved[2], &kept = saved[5];
    FlashForward f;
    f.out = saved[3];
    f.lse = saved[4];
    f.cum_q = ctx->saved_data["cum_q"].toTensor();
    f.cum_k = ctx->saved_data["cum_k"].toTensor();
    f.seed = ctx->saved_data["seed"].toTensor();
    f.offset = ctx->saved_data["offset"].toTensor();
    f.max_q = ctx->saved_data["max_q"].toInt();
    f.max_k = ctx->saved_data["max_k"].toInt();
    f.kernel = static_cast<EvictionKernel>(ctx->saved_data["kernel"].toInt());
    const bool multiplicative = static_cast<Eviction>(ctx->saved_data["eviction"].toInt()) == Eviction::Multiplicative;
    const auto B = qp.size(0), H = qp.size(1), Hkv = kp.size(1), T = qp.size(2), hd = grads[0].size(3),
               padded = qp.size(3);
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    const auto type = qp.scalar_type();
    const auto g = grads[0].to(type);  // (B, H, T, hd)
    torch::Tensor upstream;
    if (multiplicative) {
      // fp32 products (the bf16 factor promoted inside the product, not copied first)
      const auto delta = (g.to(torch::kFloat) * f.out.narrow(3, 0, hd)).sum(-1);  // (B, H, T)
      upstream = with_columns(g, split_pair(-delta, type), padded);
    } else {
      upstream = with_columns(g, torch::Tensor(), padded);
    }
    auto [dq, dk, dv] = flash_backward(f, upstream, qp, kernel_heads(kp, f.kernel, H), kernel_heads(vp, f.kernel, H),
                                       scale);
    if (dk.size(1) != Hkv) {  // the memory-efficient kernel's, one a query head: summed over each group
      dk = dk.unflatten(1, {Hkv, H / Hkv}).sum(2);
      dv = dv.unflatten(1, {Hkv, H / Hkv}).sum(2);
    }
    // dk, dv (B, Hkv, T, padded)
    torch::Tensor dw;
    if (multiplicative) {
      // The weight flash saw, from the key columns as it summed them: hi + lo in fp32, times the scale.
      const auto seen = kp.select(1, 0).narrow(2, hd, 2).to(torch::kFloat).sum(-1).mul(scale).exp();  // (B, T)
      const auto sums = dv.narrow(3, 0, hd + 2).to(torch::kFloat);
      const auto per_head = (sums.narrow(3, 0, hd) * vp.narrow(3, 0, hd)).sum(-1) +
                            sums.narrow(3, hd, 2).sum(-1);  // (B, Hkv, T)
      const auto flags_type = static_cast<torch::ScalarType>(ctx->saved_data["flags_type"].toInt());
      dw = per_head.sum(1).div(seen).to(flags_type);  // (B, T)
    }
    const auto keep = kept.view({B, 1, T, 1}).to(type);
    return {dq.narrow(3, 0, hd).contiguous(), dk.narrow(3, 0, hd) * keep, dv.narrow(3, 0, hd) * keep, dw,
            torch::Tensor(), torch::Tensor()};
  }
};

/// Given up after a failed call (a GPU without flash attention's kernels): the chunked form runs then.
OptionalKernel& flash_eviction_kernel() {
  static OptionalKernel kernel("ROUTELAB_FLASH_EVICTION", "D-LLM's flash eviction attention", "the chunked form runs");
  return kernel;
}

/// The flash form on memory-efficient attention (fp32 on a GPU), given up after a failed call: the chunked form runs
/// then.
OptionalKernel& efficient_eviction_kernel() {
  static OptionalKernel kernel("ROUTELAB_EFFICIENT_EVICTION",
                               "D-LLM's eviction attention on memory-efficient attention", "the chunked form runs");
  return kernel;
}

/// The flash form on cuDNN's kernel, given up after a failed forward: flash attention's kernel runs it then.
OptionalKernel& cudnn_eviction_kernel() {
  static OptionalKernel kernel("ROUTELAB_EVICTION_CUDNN", "D-LLM's eviction attention on cuDNN",
                               "flash attention runs it");
  return kernel;
}

#endif

}  // namespace

bool flash_eviction_available() {
#ifdef ROUTELAB_FLASH_EVICTION
  return true;
#else
  return false;
#endif
}

bool flash_eviction_active(const torch::Device& device, torch::ScalarType type, std::int64_t head_dim) {
#ifdef ROUTELAB_FLASH_EVICTION
  return device.is_cuda() && flash_eviction_kernel().usable() &&
         type == torch::kBFloat16 && flash_eviction_head_dim(head_dim) <= 256;
#else
  (void)device, (void)type, (void)head_dim;
  return false;
#endif
}

bool efficient_eviction_active(const torch::Device& device, torch::ScalarType type, std::int64_t head_dim) {
#ifdef ROUTELAB_FLASH_EVICTION
  return device.is_cuda() && efficient_eviction_kernel().usable() && type == torch::kFloat &&
         flash_eviction_head_dim(head_dim) <= 256;
#else
  (void)device, (void)type, (void)head_dim;
  return false;
#endif
}

bool cudnn_eviction_available() {
#ifdef ROUTELAB_CUDNN_EVICTION
  return true;
#else
  return false;
#endif
}

bool cudnn_eviction_active(const torch::Device& device) {
#ifdef ROUTELAB_CUDNN_EVICTION
  static const bool opted_in = switched_on_in_environment("ROUTELAB_EVICTION_CUDNN");
  return opted_in && device.is_cuda() && cudnn_eviction_kernel().usable();
#else
  (void)device;
  return false;
#endif
}

double flash_eviction_pairs(std::int64_t B, std::int64_t T, std::int64_t head_dim) {
  // Priced as the dense model's flash call is (the whole square), at the padded head size.
  return static_cast<double>(B) * static_cast<double>(T) * static_cast<double>(T) *
         static_cast<double>(flash_eviction_head_dim(head_dim)) / static_cast<double>(head_dim);
}

torch::Tensor evicting_attention_flash(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       const torch::Tensor& w, Eviction eviction, EvictionKernel kernel) {
#ifdef ROUTELAB_FLASH_EVICTION
  TORCH_CHECK(k.size(2) == q.size(2) && v.size(2) == q.size(2) && w.size(1) == q.size(2),
              "evicting_attention_flash: queries, keys, values and flags must cover the same positions");
  TORCH_CHECK(k.size(1) == v.size(1) && k.size(1) > 0 && q.size(1) % k.size(1) == 0,
              "evicting_attention_flash: the query heads must be a multiple of the key/value heads");
  return FlashEvictingAttentionFunction::apply(q, k, v, w, eviction, kernel);
#else
  (void)q, (void)k, (void)v, (void)w, (void)eviction, (void)kernel;
  throw std::runtime_error("evicting_attention_flash needs LibTorch 2.3 or later (flash attention)");
#endif
}

torch::Tensor evicting_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& w, Eviction eviction, double* pairs) {
  ROUTELAB_PART("attention");
  const auto B = q.size(0), H = q.size(1), T = q.size(2);
#ifdef ROUTELAB_FLASH_EVICTION
  const auto hd = q.size(3);
  const auto attend = [&](EvictionKernel kernel) {
    return [&, kernel] { return evicting_attention_flash(q, k, v, w, eviction, kernel); };
  };
  std::optional<torch::Tensor> out;
  if (flash_eviction_active(q.device(), q.scalar_type(), hd)) {
    if (cudnn_eviction_active(q.device())) out = cudnn_eviction_kernel().attempt(attend(EvictionKernel::Cudnn));
    if (!out) out = flash_eviction_kernel().attempt(attend(EvictionKernel::Flash));
  } else if (efficient_eviction_active(q.device(), q.scalar_type(), hd)) {
    out = efficient_eviction_kernel().attempt(attend(EvictionKernel::Efficient));
  }
  if (out) {
    if (pairs) *pairs = flash_eviction_pairs(B, T, hd);
    return *out;
  }
#endif
  const auto all_heads = [&](const torch::Tensor& x) { return repeat_kv(x, H / x.size(1)); };
  if (cpu_eviction_active(q.device())) {
    if (pairs) *pairs = static_cast<double>(B) * static_cast<double>(T) * static_cast<double>(T);
    return evicting_attention_cpu(q, all_heads(k), all_heads(v), w, eviction);
  }
  if (pairs) *pairs = evicting_attention_pairs(B, H, T);
  return evicting_attention_chunked(q, all_heads(k), all_heads(v), w, eviction);
}

}  // namespace routelab
