// Forward FLOPs of the pieces of a Transformer layer (2 FLOPs per multiply-add), so every layer can price
// what it actually did from its routing decisions. No Torch: the cost engine and the GUI share these.
#pragma once
#include <cstdint>

namespace routelab {

/// The matrix shapes of one Transformer layer.
struct LayerShape {
  std::int64_t d = 0;          ///< model width
  std::int64_t d_kv = 0;       ///< key/value width (n_kv_head * head_dim)
  std::int64_t d_ff = 0;       ///< MLP inner width
  bool gated_mlp = true;       ///< SwiGLU (three d x d_ff matrices) or GELU (two)
};

/// y = x W^T over `tokens` rows of width `in` into width `out`.
inline double linear_flops(double tokens, double in, double out) { return 2.0 * tokens * in * out; }

/// Scores q k^T and the weighted sum p v over the full square of each sequence: 4 * d * sum_b k_b^2.
/// The causal half is not subtracted (dense kernels compute the square); `sum_sq` is sum over sequences of
/// (tokens attending)^2, so attention over k routed tokens costs O(k^2), not O(T^2).
inline double attention_core_flops(double sum_sq, const LayerShape& s) { return 4.0 * sum_sq * static_cast<double>(s.d); }

inline double qkv_flops(double tokens, const LayerShape& s) { return linear_flops(tokens, s.d, s.d + 2.0 * s.d_kv); }
inline double q_k_flops(double tokens, const LayerShape& s) { return linear_flops(tokens, s.d, s.d + s.d_kv); }
inline double v_flops(double tokens, const LayerShape& s) { return linear_flops(tokens, s.d, s.d_kv); }
inline double out_proj_flops(double tokens, const LayerShape& s) { return linear_flops(tokens, s.d, s.d); }
inline double mlp_flops(double tokens, const LayerShape& s) {
  return linear_flops(tokens, s.d, (s.gated_mlp ? 2.0 : 1.0) * s.d_ff) + linear_flops(tokens, s.d_ff, s.d);
}

/// A dense pre-norm layer over `batch` sequences of `seq` tokens.
inline double dense_layer_flops(double batch, double seq, const LayerShape& s) {
  const double tokens = batch * seq;
  return qkv_flops(tokens, s) + attention_core_flops(batch * seq * seq, s) + out_proj_flops(tokens, s) +
         mlp_flops(tokens, s);
}

/// A whole block (attention + MLP) run on a compacted subset: `tokens` rows, `sum_sq` = sum_b k_b^2.
inline double block_flops(double tokens, double sum_sq, const LayerShape& s) {
  return qkv_flops(tokens, s) + attention_core_flops(sum_sq, s) + out_proj_flops(tokens, s) + mlp_flops(tokens, s);
}

}  // namespace routelab
