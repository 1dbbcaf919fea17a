// Compacted sequences (B, heads, K, hd), each b holding lengths[b] real rows followed by padding, packed one
// sequence after another as variable-length attention kernels take them ((total, heads, hd) with cumulative
// lengths), and put back.
#pragma once
#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace routelab {

struct VarlenPacking {
  torch::Tensor rows;    ///< (total) int64: each packed row's place among the B K padded rows
  torch::Tensor starts;  ///< (n + 1) int32: cumulative lengths of the n non-empty sequences, from 0
  std::int64_t longest = 0;
  std::int64_t batch = 0, padded_len = 0;  ///< B and K
};

/// The places among B K padded rows of the real ones (lengths[b] rows from b K), in order: VarlenPacking::rows and
/// Compaction::real.
std::vector<std::int64_t> real_row_places(const std::vector<std::int64_t>& lengths, std::int64_t padded_len);

/// Built on the host from the lengths it holds, staged to `device` without waiting for its queue. Without
/// `with_rows` only the cumulative lengths (rows already packed).
VarlenPacking varlen_packing(const std::vector<std::int64_t>& lengths, std::int64_t padded_len,
                             const torch::Device& device, bool with_rows = true);
/// (B, heads, K, hd) -> (total, heads, hd)
torch::Tensor pack_rows(const torch::Tensor& x, const VarlenPacking& packing);
/// (total, heads, hd) -> (B, heads, K, hd), zeros on the padding.
torch::Tensor unpack_rows(const torch::Tensor& packed, const VarlenPacking& packing);

}  // namespace routelab
