// Attention over entries ordered so that each query row sees a prefix of them (a staircase when the rows go in
// position order): on the CPU, blocks of query rows scored only up to their widest row's end, about half of the
// (query, entry) rectangle a masked kernel computes where a causal rule hides half. Radial Networks' unified store
// (a routing step's queries over every earlier step's entries, sorted by position) and DRR's depth memories (a
// position's W earlier layer outputs, and the summaries of the chunks it has completed) take it.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace routelab {

/// Whether cpu_staircase_attention runs for these tensors: on the CPU, without dropout (training with dropout takes
/// the masked form), with q, k and v of one type, fp32, or bf16 and fp16 where cpu_attention::upcast_enabled().
bool staircase_attention_runs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double dropout,
                              bool training);

/// softmax(q k^T / sqrt(hd)) v for q (B, H, Tq, hd) and k, v (B, Hkv, N, hd) (Hkv dividing H: grouped heads), where
/// query row i of sequence b sees exactly entries [0, lens[b][i]) (lens (B, Tq) int64). Only the first rows[b]
/// rows of sequence b are computed; the rest, and a row that sees nothing, are zeros (forward and backward). Half
/// precision is up-cast (exact) and the result rounded back, as the dense CPU kernel does. Differentiable in q, k
/// and v. Its profiler event prices the real rows' whole (query, entry) rectangle, as dense attention is priced over
/// its square whatever its causal blocks skip. Only where staircase_attention_runs.
torch::Tensor cpu_staircase_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& lens, const std::vector<std::int64_t>& rows);

}  // namespace routelab
