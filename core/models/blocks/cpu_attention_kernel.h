// The pieces of RouteLab's CPU attention kernel (attention.cpp) that the other CPU attention kernels reuse (D-LLM's
// evicting attention, core/models/dllm_eviction_cpu.cpp): fp32 matrices inside tensors' storage, one single-threaded
// BLAS product each, and the causal query blocks with their packed probability layout. A kernel's parallel loop
// (parallel_for_as_caller) must sit in a translation unit compiled with OpenMP (core/CMakeLists.txt).
#pragma once
#include <algorithm>
#include <cstdint>

#include <torch/torch.h>

namespace routelab::cpu_attention {

/// A row-major fp32 matrix inside a tensor's storage: rows x cols, `ld` elements from one row to the next.
struct Mat {
  float* data;
  std::int64_t rows, cols, ld;
};

/// Head h of batch b of a 4-D fp32 tensor indexed (b, h, row, col) with inner stride 1: its first n rows.
Mat head(const torch::Tensor& t, std::int64_t b, std::int64_t h, std::int64_t n);
/// Rows `count` from row `start` of head h of batch b (as head(), from a later row).
Mat rows(const torch::Tensor& t, std::int64_t b, std::int64_t h, std::int64_t start, std::int64_t count);

/// C = alpha op(A) op(B) + beta C, row-major (beta 0: C is overwritten). The same BLAS sgemm ATen calls, without
/// ATen's per-call dispatch and tensor bookkeeping (a few microseconds each, against ~10 us for one 128 x 128 x 32
/// product). Inside a kernel's parallel loop the OpenMP BLAS runs single-threaded.
void gemm(bool ta, bool tb, const Mat& A, const Mat& B, Mat C, float alpha, float beta = 0.0f);

/// Query rows per block on sequences longer than one block. 128 rather than 256 (at T 1024, 9/16 of the square
/// instead of 5/8): a dense training step 12-18% faster at T 1024 on two threads, even at T 2048 (B 4, 2026-11-28).
/// 64 was slower: twice the BLAS and softmax calls.
inline constexpr std::int64_t kCausalBlockRows = 128;

/// Whether bf16 and fp16 attention on the CPU goes through RouteLab's fp32 kernels, up-cast (exact) and the result
/// rounded back, as the fused kernels compute inside. ROUTELAB_CPU_ATTENTION_UPCAST=0 sends it to LibTorch's kernels
/// again (for comparisons; read once).
bool upcast_enabled();

/// ROUTELAB_CAUSAL_BLOCKS=0 computes the whole square again (for comparisons; read once).
bool causal_blocks_enabled();

/// The query blocks of a causal sequence of n rows in a batch padded to T: block i holds rows [start(i), end(i))
/// and scores them against keys [0, end(i)) only, so a long sequence computes about n^2 / 2 + n kCausalBlockRows / 2
/// (query, key) pairs instead of n^2. Where T is at most one block, every sequence is one block (the whole square).
/// The block size follows T, not n, so that no sequence of the batch needs more room than a full one: each head's
/// blocks lie one after another in a packed buffer, block i's (rows, end(i)) scores at offset(i).
struct CausalBlocks {
  std::int64_t n, block;
  CausalBlocks(std::int64_t length, std::int64_t padded)
      : n(length),
        block(padded <= kCausalBlockRows || !causal_blocks_enabled() ? std::max<std::int64_t>(padded, 1)
                                                                      : kCausalBlockRows) {}
  std::int64_t count() const { return (n + block - 1) / block; }
  std::int64_t start(std::int64_t i) const { return i * block; }
  std::int64_t end(std::int64_t i) const { return std::min(n, (i + 1) * block); }
  /// Floats before block i (every earlier block is full: only the last may be short).
  std::int64_t offset(std::int64_t i) const { return block * block * i * (i + 1) / 2; }
  /// Floats of every block of one head.
  std::int64_t packed() const { return n == 0 ? 0 : offset(count() - 1) + (n - start(count() - 1)) * n; }
};

/// Row a of the (rows, end) scores of a block starting at query `start` sees keys [0, start + a]: the rest -inf.
void mask_causal(const Mat& m, std::int64_t start);

/// The causal scores of rows [s, e) of heads h0 .. h0 + G - 1 of sequence b against keys [0, e): scale Q K^T of
/// each head into `scores` as (G, e - s, e) fp32 (room for G (e - s) e floats), future keys at -inf where `mask`.
void block_scores(const torch::Tensor& q, const torch::Tensor& k, std::int64_t b, std::int64_t h0, std::int64_t G,
                  std::int64_t s, std::int64_t e, float scale, const torch::Tensor& scores, bool mask = true);

/// The causal softmax of rows [s, e) of heads h0 .. h0 + G - 1 of sequence b against keys [0, e), written to `probs`
/// (G, e - s, e) fp32, zero on future keys: scale Q K^T of each head into `scores` (room for G (e - s) e floats),
/// then the row loops of cpu_softmax.h where `fused` (fused_softmax_active(), read before the parallel loop), else
/// future keys at -inf and one ATen softmax call for the G heads.
void block_softmax(const torch::Tensor& q, const torch::Tensor& k, std::int64_t b, std::int64_t h0, std::int64_t G,
                   std::int64_t s, std::int64_t e, float scale, const torch::Tensor& scores, torch::Tensor probs,
                   bool fused);

/// Row block [s, e) of head group (b, h0)'s probabilities written to `probs` (G, e - s, e) as exp(scores - lse),
/// with `lse` the rows' log-sum-exps, (G, e - s) (a strided view of (B, H, T) rows): read from it (`fill` false:
/// a backward recomputing what its forward computed) or written to it first (`fill` true: the softmax, its rows'
/// log-sum-exps kept). `scores` is the thread's scratch, as in block_scores; `fused` as in block_softmax.
void probabilities_from_lse(const torch::Tensor& q, const torch::Tensor& k, std::int64_t b, std::int64_t h0,
                            std::int64_t G, std::int64_t s, std::int64_t e, float scale, const torch::Tensor& scores,
                            const torch::Tensor& lse, bool fill, torch::Tensor probs, bool fused);

/// dS = P (dP - rowsum(dP P)) of a block of query rows from `s`, each (G, rows, e): zero on future keys; `fused` as
/// in block_softmax (else ATen's softmax backward, which gives the same zeros: P is zero there).
void block_softmax_backward(const torch::Tensor& d_probs, const torch::Tensor& probs, torch::Tensor d_scores,
                            std::int64_t s, bool fused);

/// The bytes of one call's probabilities over every causal block, (B H) CausalBlocks(T, T).packed() floats: what a
/// kernel keeps for its backward where it keeps them (the dense kernel's softmax, D-LLM's R).
double kept_probabilities_bytes(std::int64_t B, std::int64_t H, std::int64_t T);
/// ROUTELAB_CPU_ATTENTION_KEEP_MB in bytes (default 256 MiB; read once): the probabilities a CPU attention call keeps
/// for its backward at most (RecomputeCpuAttention in attention.h).
std::int64_t kept_probabilities_limit();
/// Whether a call whose probabilities would take `kept_bytes` recomputes them in its backward instead: past
/// kept_probabilities_limit, or while a RecomputeCpuAttention is alive on this thread.
bool recompute_probabilities(double kept_bytes);

/// Heads handled per softmax call: every head of a sequence when their (n, n) scores fit in 4 M floats (one call
/// instead of H), else one.
std::int64_t softmax_group(std::int64_t H, std::int64_t T);

}  // namespace routelab::cpu_attention
