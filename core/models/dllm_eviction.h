// D-LLM's training-time attention: causal attention in which skipped tokens are evicted as keys, computed through
// flash attention on a GPU and over query chunks elsewhere, so that no (B, H, T, T) tensor is ever held (the
// materialised form keeps five of them per layer for the backward: 10 GB a layer at the 360M shape, batch 8 x 2048).
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

/// Official model_train.py: probs / (probs.sum(-1) + 1e-6).
inline constexpr double kEvictionRenormaliseEps = 1e-6;

/// (B, T) fp32, detached: the weight each key's probability is multiplied by. Multiplicative: w itself (its gradient
/// is taken separately); additive: 1 for w >= 0.5, else 0 (the -inf mask, no gradient).
torch::Tensor eviction_key_weights(const torch::Tensor& w, Eviction eviction);

/// The attention of D-LLM's training form (official model_train.py), with q (B, H, T, hd), k and v (B, Hkv, T, hd)
/// (Hkv dividing H: query head h reads key/value head h / (H / Hkv), as repeat_kv) and w (B, T) the keys' execute
/// flags:
///  - Multiplicative: P = softmax(causal scores) * w, renormalised by (row sum + 1e-6); w gets the gradient of P.
///  - Additive: keys with w < 0.5 masked to -inf before the softmax; w gets no gradient.
/// Where flash_eviction_active (a GPU, bf16) it runs evicting_attention_flash, where efficient_eviction_active (a
/// GPU, fp32) the same form on memory-efficient attention, on the CPU evicting_attention_cpu (cpu_eviction_active),
/// else evicting_attention_chunked: none of them holds the whole (B, H, T, T). `pairs`, when
/// given, receives the (query, key) score pairs per head the kernel computed over the batch (a trace's price).
/// -> (B, H, T, hd) in v's dtype.
torch::Tensor evicting_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& w, Eviction eviction, double* pairs = nullptr);

/// The form of the CPU (cpu_eviction_active): the causal query blocks and direct BLAS products of RouteLab's CPU
/// attention kernel (core/models/blocks/cpu_attention_kernel.h), each block's softmax rows weighed by the keys'
/// flags and renormalised, R = softmax / (sum_j softmax_j w_j + eps), P = R w (the official form, its 1e-6 included;
/// additive: flags 0/1, no eps, the masked softmax). For the backward it keeps R, the causal half of the
/// (B, H, T, T) probabilities, where the dense kernel would keep its own (cpu_eviction_saved_bytes within
/// ROUTELAB_CPU_ATTENTION_KEEP_MB: RecomputeCpuAttention in attention.h), else each row's log-normaliser
/// (R = exp(scores - lse - log(mass + eps))), the backward recomputing R block by block. q, k and v of one shape
/// (B, H, T, hd), any floating type, computed in fp32 and returned in v's dtype; priced at the full square as the
/// dense kernel (B T^2 pairs).
torch::Tensor evicting_attention_cpu(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& w, Eviction eviction);
/// The bytes of R for q (B, H, T, hd): what evicting_attention_cpu keeps for its backward where it keeps R.
double cpu_eviction_saved_bytes(std::int64_t B, std::int64_t H, std::int64_t T);
/// Whether evicting_attention takes evicting_attention_cpu on `device`: the CPU, unless ROUTELAB_CPU_EVICTION=0 (the
/// chunked form always, for comparisons; read once).
bool cpu_eviction_active(const torch::Device& device);

/// The chunked form, in LibTorch ops on any device, with k and v of H heads. Scores and probabilities are fp32
/// whatever q's dtype (the materialised form casts them so); the product with v runs in v's dtype.
///
/// Computed query chunk by query chunk against the keys up to the chunk's last position (the causal half only); the
/// backward recomputes each chunk's scores from q, k and the saved per-row log-normaliser, flash-attention style, so
/// the memory held for the backward is O(B H T hd) rather than O(B H T^2). `query_chunk` rows per chunk; 0 picks
/// a quarter of T (at least 256 rows), fewer where one chunk's (B, H, rows, T) fp32 scores would pass 256 MB. Attention dropout is not supported here
/// (evicting_attention_materialised takes it).
torch::Tensor evicting_attention_chunked(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                         const torch::Tensor& w, Eviction eviction, std::int64_t query_chunk = 0);

/// The fused attention kernel of the flash form on a GPU: PyTorch's flash attention (FlashAttention-2; its head sizes
/// come in steps of 32, so a head of 64 plus the two eviction columns, padded to 72, runs as 96), cuDNN's fused
/// attention (LibTorch >= 2.6; head sizes in steps of 8, the kernel LibTorch picks for the dense model on Hopper), or
/// PyTorch's memory-efficient attention (xFormers' CUTLASS kernels, the kernel LibTorch picks for the dense model in
/// fp32: it takes fp32 as well as bf16, but no grouped heads, so k and v are repeated to every query head for each
/// pass and their gradients summed back over each group; on the CPU the same repetition runs around LibTorch's CPU
/// flash attention).
enum class EvictionKernel { Flash, Cudnn, Efficient };

/// The form through LibTorch's flash attention (LibTorch >= 2.3; on a GPU in bf16, or in fp32 on memory-efficient
/// attention; on the CPU in bf16 or fp32; fp16 cannot hold an evicted key's weight): the eviction as an additive
/// log w_j on each key's scores, carried by two extra head dimensions, and every gradient, the flags' included, from
/// one fused backward (dllm_eviction_flash.cpp). q, k and v share one dtype; k and v may have fewer heads than q
/// (grouped heads, served without repeat_kv's copies but by EvictionKernel::Efficient). The multiplicative form leaves
/// out the official 1e-6 in the denominator (a relative 1e-6 / m, m a row's softmax mass on executed keys), and an
/// evicted key keeps a weight of 2^-40 (a relative 2^-40 (1 - m) / m of the output). Throws where LibTorch has no
/// flash attention.
/// `kernel`: the fused attention it runs on a GPU (on the CPU, LibTorch's CPU flash attention either way).
torch::Tensor evicting_attention_flash(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       const torch::Tensor& w, Eviction eviction,
                                       EvictionKernel kernel = EvictionKernel::Flash);
/// Whether this LibTorch has the flash attention evicting_attention_flash calls (2.3 or later).
bool flash_eviction_available();
/// Whether evicting_attention takes the flash form for q of this device, dtype and head size: a GPU, bf16, head
/// size + 2 at most 256, ROUTELAB_FLASH_EVICTION not 0, and no earlier flash call failed.
bool flash_eviction_active(const torch::Device& device, torch::ScalarType type, std::int64_t head_dim);
/// Whether evicting_attention takes the flash form on memory-efficient attention (EvictionKernel::Efficient) for q
/// of this device, dtype and head size: a GPU, fp32 (where flash attention takes none), head size + 2 at most 256,
/// LibTorch 2.3 or later, ROUTELAB_EFFICIENT_EVICTION not 0, and no earlier call failed (the chunked form runs then).
bool efficient_eviction_active(const torch::Device& device, torch::ScalarType type, std::int64_t head_dim);
/// Whether this LibTorch has the cuDNN attention ops EvictionKernel::Cudnn calls (2.6 or later).
bool cudnn_eviction_available();
/// Whether evicting_attention runs the flash form on cuDNN's kernel (EvictionKernel::Cudnn) on `device`: a GPU,
/// LibTorch 2.6 or later, ROUTELAB_EVICTION_CUDNN=1 (an opt-in until its time and gradients are measured on a GPU:
/// `bench eviction` prints both kernels), and no earlier cuDNN call failed (flash attention's kernel runs then).
bool cudnn_eviction_active(const torch::Device& device);
/// The score pairs per head the flash form is priced at over B sequences of T: the whole square, as the dense
/// model's flash call, scaled by the padded head size over the real one.
double flash_eviction_pairs(std::int64_t B, std::int64_t T, std::int64_t head_dim);

/// The query rows of one chunk of evicting_attention_chunked for q of shape (B, H, T, hd) when `query_chunk` are
/// asked (0: the automatic size).
std::int64_t evicting_attention_chunk_rows(std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t query_chunk = 0);
/// The (query, key) score pairs per head that evicting_attention_chunked computes over a batch of B sequences (each
/// chunk's rows against the keys up to its last row): B T^2 in one chunk, towards B T^2 / 2 in many. What a trace prices.
double evicting_attention_pairs(std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t query_chunk = 0);

/// The same attention materialised at once (every (B, H, T, T) intermediate kept by autograd; k and v of H heads),
/// with attention dropout `dropout` when > 0: the form D-LLM trains with when dropout is on, and the reference of the
/// tests.
torch::Tensor evicting_attention_materialised(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                              const torch::Tensor& w, Eviction eviction, double dropout = 0.0);

}  // namespace routelab
