// The bidirectional post-LN Transformer encoder block of torch.nn.TransformerEncoderLayer (ReLU FFN), with
// padding keys masked, runnable on every token or only on a compacted subset of query tokens (their keys and
// values still cover the whole sequence). Used by TAGAT's experts and the vanilla classifier (TAGAT).
#pragma once
#include <torch/torch.h>

#include "core/models/blocks/routing.h"

namespace routelab {

struct EncoderBlockOptions {
  EncoderBlockOptions(std::int64_t n_embd, std::int64_t n_head) : n_embd_(n_embd), n_head_(n_head) {}
  TORCH_ARG(std::int64_t, n_embd);
  TORCH_ARG(std::int64_t, n_head);
  /// FFN hidden width; 0 means 4 n_embd
  TORCH_ARG(std::int64_t, d_ff) = 0;
  /// dropout after the FFN's ReLU and after its output projection (and on the attention update); 0.1 by default
  TORCH_ARG(double, dropout) = 0.1;
  /// dropout on the attention probabilities (torch's encoder layer uses its dropout there too); 0 by default
  TORCH_ARG(double, attn_dropout) = 0.0;
  /// dropout on the attention output before the first residual (torch's encoder layer: dropout1); false by default
  TORCH_ARG(bool, attn_output_dropout) = false;
};

/// The fixed sinusoidal table of "Attention is all you need" (TAGAT Listing 2): (T, d), sin on even
/// channels, cos on odd ones.
torch::Tensor sinusoidal_positions(std::int64_t T, std::int64_t d);

/// h1 = LN1(x + MHA(x, x, x; padding keys masked)); out = LN2(h1 + FFN(h1)), FFN = d -> d_ff -> ReLU -> d.
class EncoderBlockImpl : public torch::nn::Module {
 public:
  explicit EncoderBlockImpl(EncoderBlockOptions options);
  void reset();

  /// x (B, T, C), key_mask (B, T) bool (true = real token) -> (B, T, C), every position a query.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& key_mask);
  /// Only the queries `rows` (a compaction of x's positions): -> (rows.total, C), the valid compacted rows in
  /// order (sequence by sequence, positions ascending). Queries and the FFN cost rows.total tokens (attention
  /// rows.max_len per sequence); keys and values are computed for the whole sequence.
  torch::Tensor forward_rows(const torch::Tensor& x, const torch::Tensor& key_mask, const Compaction& rows);

  EncoderBlockOptions options;
  torch::nn::Linear q{nullptr};    // C -> C
  torch::nn::Linear kv{nullptr};   // C -> 2C (keys and values)
  torch::nn::Linear out{nullptr};  // C -> C (W_O)
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  torch::nn::Linear ff1{nullptr};  // C -> d_ff
  torch::nn::Linear ff2{nullptr};  // d_ff -> C

 private:
  /// queries xq (B, K, C) over keys/values of x (B, T, C) -> the residual-normed h1 (B, K, C).
  torch::Tensor attend(const torch::Tensor& xq, const torch::Tensor& x, const torch::Tensor& key_mask);
  torch::Tensor feed_forward(const torch::Tensor& h1);  // (..., C) -> (..., C), both residuals applied
};
TORCH_MODULE(EncoderBlock);

}  // namespace routelab
