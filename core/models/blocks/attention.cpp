// Causal attention. On LibTorch 2.x the fused scaled_dot_product_attention kernel is used; on 1.13 the scores
// are computed with one baddbmm into a cached additive causal mask (no separate scale, mask and copy passes).
#include "core/models/blocks/attention.h"

#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include <torch/version.h>

namespace routelab {
namespace {

/// (Tq, Tk) additive mask: 0 where key j <= query i + (Tk - Tq), -inf elsewhere; cached per shape/device/dtype.
torch::Tensor causal_bias(std::int64_t tq, std::int64_t tk, const torch::TensorOptions& opts) {
  static std::mutex mutex;
  static std::map<std::tuple<std::int64_t, std::int64_t, int, int, int>, torch::Tensor> cache;
  const auto key = std::make_tuple(tq, tk, static_cast<int>(opts.device().type()), opts.device().index(),
                                   static_cast<int>(c10::typeMetaToScalarType(opts.dtype())));
  std::lock_guard lock(mutex);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  auto mask = torch::full({tq, tk}, -std::numeric_limits<float>::infinity(), opts).triu(tk - tq + 1);
  if (cache.size() > 64) cache.clear();
  cache.emplace(key, mask);
  return mask;
}

}  // namespace

torch::Tensor repeat_kv(const torch::Tensor& x, std::int64_t n_rep) {
  if (n_rep == 1) return x;
  const auto B = x.size(0), Hkv = x.size(1), T = x.size(2), hd = x.size(3);
  return x.unsqueeze(2).expand({B, Hkv, n_rep, T, hd}).reshape({B, Hkv * n_rep, T, hd});
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               double dropout, bool training) {
  const auto B = q.size(0), H = q.size(1), Tq = q.size(2), hd = q.size(3), Tk = k.size(2);
  const auto kf = repeat_kv(k, H / k.size(1));
  const auto vf = repeat_kv(v, H / v.size(1));
#if TORCH_VERSION_MAJOR >= 2
  if (Tq == Tk) return at::scaled_dot_product_attention(q, kf, vf, {}, training ? dropout : 0.0, /*is_causal=*/true);
#endif
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const auto q3 = q.reshape({B * H, Tq, hd});
  const auto k3 = kf.reshape({B * H, Tk, hd});
  const auto v3 = vf.reshape({B * H, Tk, hd});
  // scores = mask + scale * q k^T in one kernel: (B*H, Tq, Tk)
  auto scores = torch::baddbmm(causal_bias(Tq, Tk, q.options()), q3, k3.transpose(1, 2), /*beta=*/1.0, /*alpha=*/scale);
  auto probs = torch::softmax(scores, -1);
  if (training && dropout > 0) probs = torch::dropout(probs, dropout, true);
  return torch::bmm(probs, v3).view({B, H, Tq, hd});
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(AttentionOptions options_) : options(std::move(options_)) {
  reset();
}

void CausalSelfAttentionImpl::reset() {
  const auto C = options.n_embd(), hd = head_dim();
  qkv = register_module("qkv", torch::nn::Linear(
                                   torch::nn::LinearOptions(C, (options.n_head() + 2 * kv_heads()) * hd).bias(options.bias())));
  proj = register_module("proj", torch::nn::Linear(torch::nn::LinearOptions(C, C).bias(options.bias())));
  if (options.rope()) rope = Rope(hd, options.max_positions(), options.rope_theta());
}

CausalSelfAttentionImpl::QKV CausalSelfAttentionImpl::project(const torch::Tensor& x, const torch::Tensor& positions) {
  const auto B = x.size(0), T = x.size(1), H = options.n_head(), Hkv = kv_heads(), hd = head_dim();
  const auto fused = qkv(x);                                              // (B, T, (H + 2Hkv) hd)
  auto q = fused.narrow(-1, 0, H * hd).view({B, T, H, hd}).transpose(1, 2);             // (B, H, T, hd)
  auto k = fused.narrow(-1, H * hd, Hkv * hd).view({B, T, Hkv, hd}).transpose(1, 2);    // (B, Hkv, T, hd)
  auto v = fused.narrow(-1, (H + Hkv) * hd, Hkv * hd).view({B, T, Hkv, hd}).transpose(1, 2);
  if (rope.defined()) std::tie(q, k) = rope.apply(q, k, positions);
  return {q, k, v};
}

torch::Tensor CausalSelfAttentionImpl::output(const torch::Tensor& heads) {
  const auto B = heads.size(0), T = heads.size(2);
  return proj(heads.transpose(1, 2).reshape({B, T, options.n_embd()}));  // (B, T, C)
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& positions) {
  const auto [q, k, v] = project(x, positions);
  return output(causal_attention(q, k, v, options.dropout(), is_training()));
}

torch::Tensor CausalSelfAttentionImpl::value_only(const torch::Tensor& x) {
  const auto B = x.size(0), T = x.size(1), H = options.n_head(), Hkv = kv_heads(), hd = head_dim();
  const auto w_v = qkv->weight.narrow(0, (H + Hkv) * hd, Hkv * hd);                     // (Hkv hd, C)
  const auto b_v = qkv->bias.defined() ? qkv->bias.narrow(0, (H + Hkv) * hd, Hkv * hd) : torch::Tensor();
  const auto v = torch::nn::functional::linear(x, w_v, b_v).view({B, T, Hkv, hd}).transpose(1, 2);
  return output(repeat_kv(v, H / Hkv));
}

}  // namespace routelab
