// D-LLM's training-time attention: causal attention in which skipped tokens are evicted as keys, computed over query
// chunks so that no (B, H, T, T) tensor is ever held (the materialised form keeps five of them per layer for the
// backward: 10 GB a layer at the 360M shape, batch 8 x 2048).
#pragma once
#include <cstdint>

#include <torch/torch.h>

namespace routelab {

/// How a skipped token is hidden as a key from the queries of its layer during training.
enum class Eviction {
  /// official: attention probabilities times the key's execute flag, renormalised (router gets a gradient)
  Multiplicative,
  /// DTRNet port: -inf on skipped keys before the softmax (no gradient through the mask)
  Additive,
};

/// The attention of D-LLM's training form (official model_train.py), with q (B, H, T, hd), k and v (B, H, T, hd)
/// (already repeated to H heads) and w (B, T) the keys' execute flags:
///  - Multiplicative: P = softmax(causal scores) * w, renormalised by (row sum + 1e-6); w gets the gradient of P.
///  - Additive: keys with w < 0.5 masked to -inf before the softmax; w gets no gradient.
/// Scores and probabilities are fp32 whatever q's dtype (the materialised form casts them so); the product with v
/// runs in v's dtype. -> (B, H, T, hd) in v's dtype.
///
/// Computed query chunk by query chunk against the keys up to the chunk's last position (the causal half only); the
/// backward recomputes each chunk's scores from q, k and the saved per-row log-normaliser, flash-attention style, so
/// the memory held for the backward is O(B H T hd) rather than O(B H T^2). `query_chunk` rows per chunk; 0 picks
/// a quarter of T (at least 256 rows), fewer where one chunk's (B, H, rows, T) fp32 scores would pass 256 MB. Attention dropout is not supported here
/// (evicting_attention_materialised takes it).
torch::Tensor evicting_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& w, Eviction eviction, std::int64_t query_chunk = 0);

/// The query rows of one chunk of evicting_attention for q of shape (B, H, T, hd) when `query_chunk` are asked (0:
/// the automatic size).
std::int64_t evicting_attention_chunk_rows(std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t query_chunk = 0);
/// The (query, key) score pairs per head that evicting_attention computes over a batch of B sequences (each chunk's
/// rows against the keys up to its last row): B T^2 in one chunk, towards B T^2 / 2 in many. What a trace prices.
double evicting_attention_pairs(std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t query_chunk = 0);

/// The same attention materialised at once (every (B, H, T, T) intermediate kept by autograd), with attention
/// dropout `dropout` when > 0: the form D-LLM trains with when dropout is on, and the reference of the tests.
torch::Tensor evicting_attention_materialised(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                              const torch::Tensor& w, Eviction eviction, double dropout = 0.0);

}  // namespace routelab
