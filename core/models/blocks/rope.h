// Rotary position embeddings (RoFormer / Llama "rotate half" form) with cos/sin tables gathered by
// position, so compacted (routed) tokens keep the phases of their original positions. Context extension for
// evaluation beyond the training length: linear position interpolation (Chen et al. 2023) or YaRN (Peng et al.
// 2023: per-frequency interpolation ramp between beta_fast 32 and beta_slow 1 rotations over the original
// context, and attention temperature sqrt(1/t) = 0.1 ln(s) + 1 folded into cos and sin).
#pragma once
#include <torch/torch.h>

namespace routelab {

enum class RopeScaling { None, Linear, Yarn };

/// "none", "linear", "yarn"; throws ConfigError("model.rope_scaling: ...") otherwise.
RopeScaling parse_rope_scaling(const std::string& text);

/// The angles' inverse frequencies and the cos/sin magnitude of a scaled RoPE (exposed for tests).
struct RopeFrequencies {
  torch::Tensor inv_freq;  ///< (hd/2) double
  double mscale = 1.0;     ///< YaRN's attention temperature factor, 1 otherwise
};
/// `factor` s >= 1 stretches the usable context s times; `original_positions` is the training context (YaRN).
RopeFrequencies rope_frequencies(std::int64_t head_dim, double theta, RopeScaling scaling, double factor,
                                 std::int64_t original_positions);

class Rope {
 public:
  Rope() = default;
  Rope(std::int64_t head_dim, std::int64_t max_positions, double theta, RopeScaling scaling = RopeScaling::None,
       double factor = 1.0, std::int64_t original_positions = 0);

  /// x: (B, H, T, hd); positions: (T) or (B, T) int64 absolute positions. Returns x rotated (on a GPU by RouteLab's
  /// kernel, fused_rope.h, in one pass computed in fp32; elsewhere by LibTorch's ops in x's type).
  torch::Tensor apply(const torch::Tensor& x, const torch::Tensor& positions) const;
  /// Rotates q and k with the same positions (one table gather for both).
  std::pair<torch::Tensor, torch::Tensor> apply(const torch::Tensor& q, const torch::Tensor& k,
                                                const torch::Tensor& positions) const;
  bool defined() const { return cos_.defined(); }
  std::int64_t max_positions() const { return cos_.defined() ? cos_.size(0) : 0; }

 private:
  /// The tables moved to `device` (once, on the first forward there).
  void follow(const torch::Device& device) const;
  std::pair<torch::Tensor, torch::Tensor> tables(const torch::Tensor& positions, const torch::Tensor& like) const;
  mutable torch::Tensor cos_, sin_;  // (max_positions, hd), each half repeated; follow the input's device
};

}  // namespace routelab
