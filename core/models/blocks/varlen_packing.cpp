#include "core/models/blocks/varlen_packing.h"

#include <algorithm>

#include "core/util/device.h"

namespace routelab {

std::vector<std::int64_t> real_row_places(const std::vector<std::int64_t>& lengths, std::int64_t padded_len) {
  std::vector<std::int64_t> rows;
  for (std::size_t b = 0; b < lengths.size(); ++b)
    for (std::int64_t j = 0; j < lengths[b]; ++j) rows.push_back(static_cast<std::int64_t>(b) * padded_len + j);
  return rows;
}

VarlenPacking varlen_packing(const std::vector<std::int64_t>& lengths, std::int64_t padded_len,
                             const torch::Device& device, bool with_rows) {
  VarlenPacking p;
  p.batch = static_cast<std::int64_t>(lengths.size());
  p.padded_len = padded_len;
  std::vector<std::int32_t> starts{0};
  for (const auto n : lengths) {
    if (n == 0) continue;  // an empty sequence has no rows to pack and no entry to hold
    starts.push_back(starts.back() + static_cast<std::int32_t>(n));
    p.longest = std::max(p.longest, n);
  }
  if (with_rows) {
    const auto rows = real_row_places(lengths, padded_len);
    p.rows = copy_to_device(torch::tensor(rows, torch::TensorOptions().dtype(torch::kLong)), device);
  }
  p.starts = copy_to_device(torch::tensor(starts, torch::TensorOptions().dtype(torch::kInt)), device);
  return p;
}

torch::Tensor pack_rows(const torch::Tensor& x, const VarlenPacking& p) {
  return x.transpose(1, 2).reshape({p.batch * p.padded_len, x.size(1), x.size(3)}).index_select(0, p.rows);
}

torch::Tensor unpack_rows(const torch::Tensor& packed, const VarlenPacking& p) {
  const auto heads = packed.size(1), hd = packed.size(2);
  const auto padded = torch::zeros({p.batch * p.padded_len, heads, hd}, packed.options()).index_copy(0, p.rows, packed);
  return padded.view({p.batch, p.padded_len, heads, hd}).transpose(1, 2);
}

}  // namespace routelab
