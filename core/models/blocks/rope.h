// Rotary position embeddings (RoFormer / Llama "rotate half" form) with cos/sin tables gathered by
// position, so compacted (routed) tokens keep the phases of their original positions.
#pragma once
#include <torch/torch.h>

namespace routelab {

class Rope {
 public:
  Rope() = default;
  Rope(std::int64_t head_dim, std::int64_t max_positions, double theta);

  /// x: (B, H, T, hd); positions: (T) or (B, T) int64 absolute positions. Returns x rotated.
  torch::Tensor apply(const torch::Tensor& x, const torch::Tensor& positions) const;
  /// Rotates q and k with the same positions (one table gather for both).
  std::pair<torch::Tensor, torch::Tensor> apply(const torch::Tensor& q, const torch::Tensor& k,
                                                const torch::Tensor& positions) const;
  bool defined() const { return cos_.defined(); }
  std::int64_t max_positions() const { return cos_.defined() ? cos_.size(0) : 0; }

 private:
  std::pair<torch::Tensor, torch::Tensor> tables(const torch::Tensor& positions, const torch::Tensor& like) const;
  mutable torch::Tensor cos_, sin_;  // (max_positions, hd), each half repeated; follow the input's device
};

}  // namespace routelab
