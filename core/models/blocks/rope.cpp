// RoPE tables: inv_freq_i = theta^(-2i/hd); angle = pos * inv_freq; cos/sin duplicated over both halves.
#include "core/models/blocks/rope.h"

namespace routelab {

Rope::Rope(std::int64_t head_dim, std::int64_t max_positions, double theta) {
  const auto inv_freq =
      torch::pow(theta, -torch::arange(0, head_dim, 2, torch::kDouble) / static_cast<double>(head_dim));  // (hd/2)
  const auto pos = torch::arange(max_positions, torch::kDouble);                                          // (P)
  const auto angles = torch::outer(pos, inv_freq);                                                       // (P, hd/2)
  const auto full = torch::cat({angles, angles}, -1);                                                    // (P, hd)
  cos_ = full.cos().to(torch::kFloat);
  sin_ = full.sin().to(torch::kFloat);
}

std::pair<torch::Tensor, torch::Tensor> Rope::tables(const torch::Tensor& positions, const torch::Tensor& like) const {
  // Callers check positions < max_positions() once per forward (no host sync per layer here).
  if (cos_.device() != like.device()) {  // moved once, on the first forward on a new device
    cos_ = cos_.to(like.device());
    sin_ = sin_.to(like.device());
  }
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
  const auto [cos, sin] = tables(positions, x);
  return rotate(x, cos, sin);
}

std::pair<torch::Tensor, torch::Tensor> Rope::apply(const torch::Tensor& q, const torch::Tensor& k,
                                                    const torch::Tensor& positions) const {
  const auto [cos, sin] = tables(positions, q);
  return {rotate(q, cos, sin), rotate(k, cos, sin)};
}

}  // namespace routelab
