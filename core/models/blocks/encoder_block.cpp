// Post-LN encoder block: nn.MultiheadAttention's initialisation (xavier-uniform projections, zero biases) and
// the masked softmax written out, so a subset of queries can attend over the whole sequence.
#include "core/models/blocks/encoder_block.h"

#include <cmath>

#include "core/models/blocks/attention.h"
#include "core/models/blocks/part_scope.h"
#include "core/util/errors.h"

namespace routelab {

torch::Tensor sinusoidal_positions(std::int64_t T, std::int64_t d) {
  const auto position = torch::arange(T, torch::kFloat).unsqueeze(1);                               // (T, 1)
  const auto div = torch::exp(torch::arange(0, d, 2, torch::kFloat) * (-std::log(10000.0) / double(d)));  // (ceil(d/2))
  auto pe = torch::zeros({T, d});
  pe.index_put_({torch::indexing::Slice(), torch::indexing::Slice(0, torch::indexing::None, 2)},
                torch::sin(position * div));
  pe.index_put_({torch::indexing::Slice(), torch::indexing::Slice(1, torch::indexing::None, 2)},
                torch::cos(position * div.narrow(0, 0, d / 2)));
  return pe;  // (T, d)
}

EncoderBlockImpl::EncoderBlockImpl(EncoderBlockOptions options_) : options(std::move(options_)) { reset(); }

void EncoderBlockImpl::reset() {
  const auto C = options.n_embd();
  if (options.n_head() <= 0 || C % options.n_head() != 0)
    throw ConfigError("model.n_head: " + std::to_string(options.n_head()) + " does not divide n_embd " +
                      std::to_string(C));
  const auto F = options.d_ff() > 0 ? options.d_ff() : 4 * C;
  q = register_module("q", torch::nn::Linear(torch::nn::LinearOptions(C, C)));
  kv = register_module("kv", torch::nn::Linear(torch::nn::LinearOptions(C, 2 * C)));
  out = register_module("out", torch::nn::Linear(torch::nn::LinearOptions(C, C)));
  norm1 = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C})));
  norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({C})));
  ff1 = register_module("ff1", torch::nn::Linear(torch::nn::LinearOptions(C, F)));
  ff2 = register_module("ff2", torch::nn::Linear(torch::nn::LinearOptions(F, C)));
  // nn.MultiheadAttention: xavier-uniform over the fused (3C, C) in-projection, zero in/out biases.
  torch::NoGradGuard no_grad;
  const double bound = std::sqrt(6.0 / double(C + 3 * C));
  q->weight.uniform_(-bound, bound);
  kv->weight.uniform_(-bound, bound);
  q->bias.zero_();
  kv->bias.zero_();
  out->bias.zero_();
}

torch::Tensor EncoderBlockImpl::attend(const torch::Tensor& xq, const torch::Tensor& x, const torch::Tensor& key_mask) {
  ROUTELAB_PART("attention");
  const auto B = x.size(0), T = x.size(1), C = x.size(2), K = xq.size(1);
  const auto H = options.n_head(), hd = C / H;
  const auto query = linear(xq, q).view({B, K, H, hd}).transpose(1, 2);  // (B, H, K, hd)
  const auto keys_values = linear(x, kv).chunk(2, -1);
  const auto key = keys_values[0].view({B, T, H, hd}).transpose(1, 2);    // (B, H, T, hd)
  const auto value = keys_values[1].view({B, T, H, hd}).transpose(1, 2);  // (B, H, T, hd)
  auto scores = torch::matmul(query, key.transpose(-2, -1)) / std::sqrt(double(hd));  // (B, H, K, T)
  // A large finite negative instead of -inf: a padding query row of a compaction stays finite (never NaN).
  scores = scores.masked_fill(key_mask.logical_not().view({B, 1, 1, T}), -1e9);
  auto probs = torch::softmax(scores, -1);
  if (is_training() && options.attn_dropout() > 0) probs = torch::dropout(probs, options.attn_dropout(), true);
  const auto heads = torch::matmul(probs, value).transpose(1, 2).reshape({B, K, C});  // (B, K, C)
  auto update = linear(heads, out);
  if (options.attn_output_dropout() && is_training() && options.dropout() > 0)
    update = torch::dropout(update, options.dropout(), true);
  return ROUTELAB_IN_PART("norm", norm1(xq + update));  // (B, K, C)
}

torch::Tensor EncoderBlockImpl::feed_forward(const torch::Tensor& h1) {
  ROUTELAB_PART("mlp");
  const bool drop = is_training() && options.dropout() > 0;
  auto hidden = torch::relu(linear(h1, ff1));
  if (drop) hidden = torch::dropout(hidden, options.dropout(), true);
  auto update = linear(hidden, ff2);
  if (drop) update = torch::dropout(update, options.dropout(), true);
  return ROUTELAB_IN_PART("norm", norm2(h1 + update));
}

torch::Tensor EncoderBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& key_mask) {
  return feed_forward(attend(x, x, key_mask));
}

torch::Tensor EncoderBlockImpl::forward_rows(const torch::Tensor& x, const torch::Tensor& key_mask, const Compaction& rows) {
  const auto B = x.size(0), C = x.size(2);
  if (rows.total == 0) return torch::zeros({0, C}, x.options());
  const auto h1 = attend(gather_rows(x, rows), x, key_mask);                 // (B, K, C)
  auto h1_rows = h1.reshape({B * rows.max_len, C});                          // (n, C): padding rows dropped
  if (rows.real.defined()) h1_rows = h1_rows.index_select(0, rows.real);
  return feed_forward(h1_rows);                                               // (n, C)
}

}  // namespace routelab
