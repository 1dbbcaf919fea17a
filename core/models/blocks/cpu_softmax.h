// The causal softmax of the CPU attention kernels (attention.cpp, dllm_eviction_cpu.cpp) over rows of fp32 scores:
// row a of a block of query rows starting at query `start` sees keys [0, start + a] (at most `cols`), and its
// probabilities past them are zero. On CPUs with AVX-512 one pass over each row's visible keys finds its maximum,
// one writes exp(x - max) and sums it, one scales: no -inf fill of the future keys, no exp of them (half of a causal
// square), no ATen call per block. Elsewhere the kernels keep ATen's softmax over masked rows (fused_softmax_active).
#pragma once
#include <cstdint>

namespace routelab::cpu_attention {

/// Whether the kernels' causal softmax runs the row loops below: a CPU with AVX-512, ROUTELAB_CPU_FUSED_SOFTMAX not 0
/// (read once) and no AtenCpuSoftmax alive. Read on the calling thread before a kernel's parallel loop.
bool fused_softmax_active();

/// While alive (anywhere in the process), the kernels' softmax is ATen's again: tests and benchmarks compare the two.
class AtenCpuSoftmax {
 public:
  AtenCpuSoftmax();
  ~AtenCpuSoftmax();
  AtenCpuSoftmax(const AtenCpuSoftmax&) = delete;
  AtenCpuSoftmax& operator=(const AtenCpuSoftmax&) = delete;
};

/// The row loops below need AVX-512: call them only where fused_softmax_active() (else they throw std::logic_error).

/// Keys row a of a block starting at query `start` sees: [0, min(start + a + 1, cols)).
inline std::int64_t visible_keys(std::int64_t start, std::int64_t a, std::int64_t cols) {
  return start + a + 1 < cols ? start + a + 1 : cols;
}

/// probs = the causal softmax of `rows` rows of `cols` scores (row-major, both), zero past each row's visible keys
/// (whatever `scores` holds there). With `lse`, row a's log-sum-exp is written to lse[a * lse_stride].
void causal_softmax(const float* scores, float* probs, std::int64_t rows, std::int64_t cols, std::int64_t start,
                    float* lse = nullptr, std::int64_t lse_stride = 1);

/// probs = exp(scores - lse[a * lse_stride]) on row a's visible keys, zero past them: the probabilities again from
/// the log-sum-exps a causal_softmax wrote.
void causal_exp(const float* scores, float* probs, std::int64_t rows, std::int64_t cols, std::int64_t start,
                const float* lse, std::int64_t lse_stride);

/// d_scores = probs (d_probs - rowsum(d_probs probs)) on row a's visible keys, zero past them: the softmax's backward
/// (d_scores may be d_probs).
void causal_softmax_backward(const float* d_probs, const float* probs, float* d_scores, std::int64_t rows,
                             std::int64_t cols, std::int64_t start);

/// causal_softmax with row a seeing keys [0, visible[a]) (clamped to [0, cols]; a row that sees none is zeros): the
/// staircase kernel's rows (staircase_attention.h).
void softmax_visible(const float* scores, float* probs, std::int64_t rows, std::int64_t cols,
                     const std::int64_t* visible);

/// causal_softmax_backward with row a seeing keys [0, visible[a]), as softmax_visible.
void softmax_backward_visible(const float* d_probs, const float* probs, float* d_scores, std::int64_t rows,
                              std::int64_t cols, const std::int64_t* visible);

}  // namespace routelab::cpu_attention
