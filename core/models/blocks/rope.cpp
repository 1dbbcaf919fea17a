// RoPE tables: inv_freq_i = theta^(-2i/hd); angle = pos * inv_freq; cos/sin duplicated over both halves.
#include "core/models/blocks/rope.h"

#include <cmath>
#include <numbers>

#include "core/models/blocks/fused_rope.h"
#include "core/util/errors.h"

namespace routelab {

RopeScaling parse_rope_scaling(const std::string& text) {
  if (text == "none") return RopeScaling::None;
  if (text == "linear") return RopeScaling::Linear;
  if (text == "yarn") return RopeScaling::Yarn;
  throw ConfigError("model.rope_scaling: '" + text + "' is not one of none, linear, yarn");
}

RopeFrequencies rope_frequencies(std::int64_t head_dim, double theta, RopeScaling scaling, double factor,
                                 std::int64_t original_positions) {
  const auto dims = torch::arange(0, head_dim, 2, torch::kDouble);                     // (hd/2): 2i
  const auto inv_freq = torch::pow(theta, -dims / static_cast<double>(head_dim));      // theta^(-2i/hd)
  if (scaling == RopeScaling::None || factor <= 1.0) return {inv_freq, 1.0};
  if (scaling == RopeScaling::Linear) return {inv_freq / factor, 1.0};
  // YaRN: dimensions that rotate more than beta_fast times over the original context keep their frequency
  // (extrapolate), those rotating fewer than beta_slow times are interpolated by 1/s, a linear ramp between.
  if (original_positions <= 0)
    throw ConfigError("model.rope_original_context: YaRN needs the training context (> 0)");
  const double hd = static_cast<double>(head_dim);
  auto correction_dim = [&](double rotations) {  // the dimension index that makes `rotations` turns
    return hd * std::log(static_cast<double>(original_positions) / (rotations * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(theta));
  };
  const double low = std::max(0.0, std::floor(correction_dim(32.0)));
  const double high = std::min(hd - 1.0, std::ceil(correction_dim(1.0)));
  const auto index = torch::arange(0, head_dim / 2, torch::kDouble);
  const auto ramp = ((index - low) / std::max(high - low, 1e-3)).clamp(0.0, 1.0);  // 0: extrapolate, 1: interpolate
  const auto mixed = inv_freq * (1.0 - ramp) + (inv_freq / factor) * ramp;
  return {mixed, 0.1 * std::log(factor) + 1.0};
}

Rope::Rope(std::int64_t head_dim, std::int64_t max_positions, double theta, RopeScaling scaling, double factor,
           std::int64_t original_positions) {
  const auto [inv_freq, mscale] = rope_frequencies(head_dim, theta, scaling, factor, original_positions);  // (hd/2)
  const auto pos = torch::arange(max_positions, torch::kDouble);                                          // (P)
  const auto angles = torch::outer(pos, inv_freq);                                                       // (P, hd/2)
  const auto full = torch::cat({angles, angles}, -1);                                                    // (P, hd)
  cos_ = (full.cos() * mscale).to(torch::kFloat);
  sin_ = (full.sin() * mscale).to(torch::kFloat);
}

void Rope::follow(const torch::Device& device) const {
  if (cos_.device() != device) {  // moved once, on the first forward on a new device
    cos_ = cos_.to(device);
    sin_ = sin_.to(device);
  }
}

std::pair<torch::Tensor, torch::Tensor> Rope::tables(const torch::Tensor& positions, const torch::Tensor& like) const {
  // Callers check positions < max_positions() once per forward (no host sync per layer here).
  follow(like.device());
  auto cos = cos_.index_select(0, positions.reshape(-1));
  auto sin = sin_.index_select(0, positions.reshape(-1));
  const auto hd = cos_.size(1);
  if (positions.dim() == 1) {  // (T, hd) -> broadcast over (B, H)
    cos = cos.view({1, 1, -1, hd});
    sin = sin.view({1, 1, -1, hd});
  } else {  // (B, T, hd) -> (B, 1, T, hd)
    cos = cos.view({positions.size(0), 1, positions.size(1), hd});
    sin = sin.view({positions.size(0), 1, positions.size(1), hd});
  }
  return {cos.to(like.scalar_type()), sin.to(like.scalar_type())};
}

namespace {
torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const auto half = x.size(-1) / 2;
  const auto x1 = x.narrow(-1, 0, half);
  const auto x2 = x.narrow(-1, half, half);
  return x * cos + torch::cat({-x2, x1}, -1) * sin;
}
}  // namespace

torch::Tensor Rope::apply(const torch::Tensor& x, const torch::Tensor& positions) const {
  if (fused_rope_applies(x)) {
    follow(x.device());
    return fused_rope(x, cos_, sin_, positions.contiguous());
  }
  const auto [cos, sin] = tables(positions, x);
  return rotate(x, cos, sin);
}

std::pair<torch::Tensor, torch::Tensor> Rope::apply(const torch::Tensor& q, const torch::Tensor& k,
                                                    const torch::Tensor& positions) const {
  if (fused_rope_applies(q) && fused_rope_applies(k)) {  // on a GPU: one pass each, from the projection's layout
    follow(q.device());
    const auto p = positions.contiguous();
    return {fused_rope(q, cos_, sin_, p), fused_rope(k, cos_, sin_, p)};
  }
  const auto [cos, sin] = tables(positions, q);
  return {rotate(q, cos, sin), rotate(k, cos, sin)};
}

}  // namespace routelab
