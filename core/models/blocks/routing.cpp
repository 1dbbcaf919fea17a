// Layer patterns, compaction and the predictor shared by the routed architectures.
#include "core/models/blocks/routing.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/cost/flops.h"
#include "core/models/blocks/attention.h"
#include "core/models/blocks/residual_probe.h"
#include "core/models/blocks/varlen_packing.h"
#include "core/models/language_model.h"
#include "core/util/device.h"
#include "core/util/errors.h"
#include "core/util/process.h"

namespace routelab {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

/// Named patterns; first and last layer dense where DTRNet App. A2 says so.
bool named_pattern(const std::string& name, std::int64_t L, std::vector<bool>& routed) {
  routed.assign(static_cast<std::size_t>(L), false);
  const auto ends_dense = [&] {
    routed.front() = false;
    routed.back() = false;
  };
  if (name == "bilayer") {
    for (std::int64_t i = 0; i < L; ++i) routed[i] = i % 2 == 1;
    ends_dense();
  } else if (name == "trilayer") {
    for (std::int64_t i = 0; i < L; ++i) routed[i] = i % 3 != 0;
    ends_dense();
  } else if (name == "laterhalf") {
    // The paper's diagram (T-T-...-D-...-D) ends routed, but App. A2 says the last layer of every variant is
    // dense; we follow the stated rule. Write "T-T-D-D" to get the diagram's form.
    for (std::int64_t i = L / 2; i < L; ++i) routed[i] = true;
    ends_dense();
  } else if (name == "6-transformer") {
    for (std::int64_t i = 0; i < L; ++i) routed[i] = true;
    for (const auto i : {std::int64_t{0}, std::int64_t{1}, L / 2 - 1, L / 2, L - 2, L - 1})
      if (i >= 0 && i < L) routed[i] = false;
  } else if (name == "alternate") {
    for (std::int64_t i = 0; i < L; ++i) routed[i] = i % 2 == 1;
  } else if (name == "after-2") {
    for (std::int64_t i = 2; i < L; ++i) routed[i] = true;
  } else if (name == "all") {
    routed.assign(static_cast<std::size_t>(L), true);
  } else if (name == "none") {
  } else if (name == "dtrnet-code") {
    for (std::int64_t i = 0; i < L; ++i) routed[i] = !(i >= 2 && i % 2 == 0 && i <= L - 2);
  } else {
    return false;
  }
  return true;
}

}  // namespace

std::vector<bool> parse_layer_pattern(const std::string& spec_in, std::int64_t L, const std::string& key) {
  const auto spec = lower(spec_in);
  std::vector<bool> routed;
  if (named_pattern(spec, L, routed)) return routed;
  const auto bad = [&](const std::string& why) {
    return ConfigError(key + ": '" + spec_in + "' " + why +
                       " (expected bilayer, trilayer, laterhalf, 6-transformer, alternate, after-2, all, none, "
                       "dtrnet-code, a letter per layer like T-D-T-D, or routed indices like 1,3,5)");
  };
  if (!spec.empty() && std::all_of(spec.begin(), spec.end(), [](char c) { return std::string("tdmr- ").find(c) != std::string::npos; })) {
    routed.clear();
    for (const char c : spec)
      if (c != '-' && c != ' ') routed.push_back(c != 't');
    if (static_cast<std::int64_t>(routed.size()) != L)
      throw bad("names " + std::to_string(routed.size()) + " layers but model.n_layer is " + std::to_string(L));
    return routed;
  }
  std::string digits = spec;
  for (char& c : digits)
    if (c == '[' || c == ']' || c == ',') c = ' ';
  if (digits.find_first_not_of("0123456789 ") != std::string::npos || digits.find_first_not_of(' ') == std::string::npos)
    throw bad("is not a layer pattern");
  routed.assign(static_cast<std::size_t>(L), false);
  std::istringstream in(digits);
  long long index = 0;
  while (in >> index) {
    if (index >= L) throw bad("names layer " + std::to_string(index) + " of a " + std::to_string(L) + "-layer model");
    routed[static_cast<std::size_t>(index)] = true;
  }
  return routed;
}

std::string pattern_string(const std::vector<bool>& routed) {
  std::string s;
  for (std::size_t i = 0; i < routed.size(); ++i) {
    if (i) s += '-';
    s += routed[i] ? 'D' : 'T';
  }
  return s;
}

namespace {

/// count_routed from the per-sequence counts already on the decision's device.
Compaction count_routed(const torch::Tensor& decision, const torch::Tensor& device_counts) {
  const auto B = decision.size(0);
  Compaction c;
  c.seq_len = decision.size(1);
  const auto counts = to_host(device_counts, torch::kLong);  // (B): the one host sync
  c.lengths.assign(counts.data_ptr<std::int64_t>(), counts.data_ptr<std::int64_t>() + B);
  for (const auto n : c.lengths) {
    c.max_len = std::max(c.max_len, n);
    c.total += n;
    c.sum_sq += static_cast<double>(n) * static_cast<double>(n);
  }
  return c;
}

/// c.flat (from `flat`, the (B, K) rows' places among the B T, or else from c.index), c.real and c.real_flat. The
/// real rows' places are listed on the host (it holds the lengths) and staged to the device without waiting for its
/// queue.
void index_rows(Compaction& c, const torch::Tensor& flat = {}) {
  const auto B = c.index.size(0), K = c.index.size(1);
  const auto starts = [&] { return torch::arange(0, B * c.seq_len, c.seq_len, c.index.options()).unsqueeze(1); };
  c.flat = (flat.defined() ? flat : c.index + starts()).reshape({-1});  // (B K)
  if (c.total == B * K) {
    c.real_flat = c.flat;
    return;
  }
  c.real = copy_to_device(torch::tensor(real_row_places(c.lengths, K), torch::TensorOptions().dtype(torch::kLong)),
                          c.index.device());
  c.real_flat = c.flat.index_select(0, c.real);
}

/// Each sequence's positions, routed ones first and ascending, unrouted ones after them (the padding), (B, T); and
/// each one's place among the B T rows, (B, T).
std::pair<torch::Tensor, torch::Tensor> routed_first_order(const torch::Tensor& decision) {
  const auto B = decision.size(0), T = decision.size(1);
  const auto pos = torch::arange(T, decision.options().dtype(torch::kLong)).expand({B, T});
  auto order = std::get<0>(torch::where(decision, pos, pos + T).sort(1)) % T;
  auto flat = order + torch::arange(B, order.options()).unsqueeze(1) * T;
  return {std::move(order), std::move(flat)};
}

}  // namespace

Compaction count_routed(const torch::Tensor& decision) {
  ROUTELAB_PART("routing");
  return count_routed(decision, decision.sum(1));
}

Compaction compact(const torch::Tensor& decision, std::int64_t bucket, bool with_valid) {
  ROUTELAB_PART("routing");
  const auto T = decision.size(1);
  const auto counts = decision.sum(1);  // (B), on the decision's device: `valid` is built from it without a copy back
  // Every sequence's order, queued before the counts are read back: a GPU's queue is empty after that wait until the
  // host launches again, so the fewer launches follow it the better.
  const auto [order, flat] = routed_first_order(decision);  // (B, T) each
  auto c = count_routed(decision, counts);
  if (bucket <= 0) bucket = decision.is_cuda() ? kCudaCompactionBucket : 1;
  if (bucket > 1 && c.max_len > 0) c.max_len = std::min(T, (c.max_len + bucket - 1) / bucket * bucket);
  c.index = order.narrow(1, 0, c.max_len);  // (B, K)
  if (with_valid)
    c.valid = torch::arange(c.max_len, counts.options()).unsqueeze(0) < counts.unsqueeze(1);  // (B, K)
  index_rows(c, flat.narrow(1, 0, c.max_len));
  return c;
}

Compaction compact_packed(const torch::Tensor& decision) {
  ROUTELAB_PART("routing");
  const auto T = decision.size(1);
  const auto counts = decision.sum(1);  // (B)
  // Routed rows (key 1) before the others, each group in its flat order (the sort is stable): the first `total`
  // places are the routed rows, sequence after sequence. The key is bytes, the type every LibTorch sorts.
  const auto key = decision.reshape({-1}).to(torch::kByte);
  const auto order = std::get<1>(key.sort(/*stable=*/true, 0, /*descending=*/true));
  auto c = count_routed(decision, counts);
  c.seq_len = T;
  c.real_flat = order.narrow(0, 0, c.total);  // (total)
  return c;
}

SizedRows sized_rows(std::int64_t capacity, std::int64_t tokens, const torch::Device& device, const SizedRows& reuse) {
  capacity = std::clamp<std::int64_t>(capacity, 1, std::max<std::int64_t>(tokens, 1));
  if (reuse.capacity == capacity && reuse.places.defined() && reuse.places.device() == device) return reuse;
  SizedRows r;
  r.capacity = capacity;
  // Built on the device (no copy from the host: a step being captured as a CUDA graph may size anew).
  const auto p = torch::arange(kPaddingRuns + 1, torch::TensorOptions().dtype(torch::kLong).device(device));
  r.bounds = (p * capacity + (kPaddingRuns - 1)).div(kPaddingRuns, "floor").to(torch::kInt);  // (R + 1)
  r.places = torch::arange(capacity, torch::TensorOptions().dtype(torch::kInt).device(device)).unsqueeze(1);
  return r;
}

Compaction compact_sized(const torch::Tensor& decision, const SizedRows& rows, bool with_runs) {
  ROUTELAB_PART("routing");
  const auto B = decision.size(0), T = decision.size(1);
  TORCH_CHECK(rows.capacity >= 1 && rows.capacity <= B * T, "compact_sized: a capacity of ", rows.capacity,
              " rows for ", B * T, " tokens");
  Compaction c;
  c.seq_len = T;
  c.capacity = rows.capacity;
  c.counts = decision.sum(1);  // (B) int64, left on the device
  const auto key = decision.reshape({-1}).to(torch::kByte);
  c.real_flat = std::get<1>(key.sort(/*stable=*/true, 0, /*descending=*/true)).narrow(0, 0, c.capacity);
  if (!with_runs) {  // the routed rows that fit, nothing more
    c.row_valid = rows.places < c.counts.sum().clamp_max(c.capacity);
    return c;
  }
  // The sequences' ends, those past the capacity cut to it (flash attention must not read past the rows), then the
  // padding runs' ends: every run within the capacity, the last ending at it.
  const auto ends = c.counts.cumsum(0, torch::kInt).clamp_max(c.capacity);  // (B)
  const auto fitted = ends.narrow(0, B - 1, 1);                              // (1): N
  const auto padding_ends = torch::maximum(rows.bounds.narrow(0, 1, kPaddingRuns), fitted);  // (R)
  c.starts = torch::cat({rows.bounds.narrow(0, 0, 1), ends, padding_ends});
  c.row_valid = rows.places < fitted;  // (capacity, 1)
  c.longest = std::max(T, (c.capacity + kPaddingRuns - 1) / kPaddingRuns);
  return c;
}

Compaction compact_sized_padded(const torch::Tensor& decision, std::int64_t len) {
  ROUTELAB_PART("routing");
  const auto T = decision.size(1);
  Compaction c;
  c.seq_len = T;
  c.padded_sized = true;
  c.max_len = std::clamp<std::int64_t>(len, 1, T);
  c.counts = decision.sum(1);  // (B), left on the device
  const auto [order, flat] = routed_first_order(decision);  // compact()'s order
  c.index = order.narrow(1, 0, c.max_len);                   // (B, K)
  c.valid = torch::arange(c.max_len, c.counts.options()).unsqueeze(0) < c.counts.unsqueeze(1);  // (B, K)
  c.flat = flat.narrow(1, 0, c.max_len).reshape({-1});       // (B K)
  c.real_flat = c.flat;  // every row, the padding ones masked where they are written
  return c;
}

bool sized_overflow_per_sequence(const std::vector<std::int64_t>& lengths, std::int64_t len) {
  return std::any_of(lengths.begin(), lengths.end(), [&](std::int64_t n) { return n > len; });
}

bool settle_padded_sized(const std::vector<std::int64_t>& lengths, std::int64_t len, std::int64_t& capacity,
                         int& below, LayerTrace* trace, std::int64_t tokens) {
  if (sized_overflow_per_sequence(lengths, len)) return false;
  if (lengths.empty()) return true;
  std::int64_t total = 0;
  for (const auto n : lengths) total += n;
  if (trace) {
    trace->routed_fraction = static_cast<double>(total) / static_cast<double>(tokens);
    trace->tokens_processed["attn"] = trace->tokens_processed["mlp"] = total;
  }
  capacity = resize_capacity(*std::max_element(lengths.begin(), lengths.end()), capacity,
                             tokens / static_cast<std::int64_t>(lengths.size()), below);
  return true;
}

bool settle_packed_sized(const std::vector<std::int64_t>& lengths, std::int64_t rows, std::int64_t& capacity,
                         int& below, LayerTrace* trace, std::int64_t tokens, const LayerShape& shape) {
  if (sized_overflow(lengths, rows)) return false;
  std::int64_t total = 0;
  for (const auto n : lengths) total += n;
  if (trace) {
    trace->routed_fraction = static_cast<double>(total) / static_cast<double>(tokens);
    trace->tokens_processed["attn"] = trace->tokens_processed["mlp"] = total;
    double pairs = 0;
    for (const auto n : sized_runs(lengths, rows)) pairs += static_cast<double>(n) * static_cast<double>(n);
    trace->flops += block_flops(static_cast<double>(rows), pairs, shape);
  }
  capacity = resize_capacity(total, capacity, tokens, below);
  return true;
}

std::vector<std::vector<std::int64_t>> read_counts(const std::vector<torch::Tensor>& counts) {
  std::vector<std::vector<std::int64_t>> lengths;
  if (counts.empty()) return lengths;
  const auto host = to_host(torch::stack(counts), torch::kLong);  // (n, B): the one wait
  const auto B = host.size(1);
  for (std::int64_t j = 0; j < host.size(0); ++j) {
    const auto* row = host.data_ptr<std::int64_t>() + j * B;
    lengths.emplace_back(row, row + B);
  }
  return lengths;
}

std::vector<std::pair<std::size_t, std::vector<std::int64_t>>> read_sized_counts(
    const std::vector<torch::Tensor>& counts) {
  std::vector<std::size_t> sized;
  std::vector<torch::Tensor> defined;
  for (std::size_t i = 0; i < counts.size(); ++i)
    if (counts[i].defined()) {
      sized.push_back(i);
      defined.push_back(counts[i]);
    }
  auto read = read_counts(defined);  // the one wait
  std::vector<std::pair<std::size_t, std::vector<std::int64_t>>> out;
  for (std::size_t j = 0; j < sized.size(); ++j) out.emplace_back(sized[j], std::move(read[j]));
  return out;
}

bool padded_sized_active(const torch::Tensor& x, std::int64_t head_dim) {
  if (!sized_compaction_active()) return false;
  return ForcePaddedSized::active() || (x.is_cuda() && !packed_rows_active(x, head_dim));
}

Compaction EvalSizing::compact(const torch::Tensor& decision, const torch::Tensor& x, std::int64_t head_dim) {
  const auto B = decision.size(0), T = decision.size(1);
  const bool packing = packed_rows_active(x, head_dim), sizable = capacity > 0 && tokens == B * T;
  Compaction c;
  if (sizable && packing && sized_compaction_active()) {
    rows = sized_rows(capacity, B * T, x.device(), rows);
    c = compact_sized(decision, rows);
  } else if (sizable && !packing && padded_sized_active(x, head_dim)) {
    c = compact_sized_padded(decision, capacity);
  } else {
    c = routelab::compact(decision);
    if (packing) {
      size_next_forward(c.total, B * T, B * T, capacity, tokens, below);
    } else {
      const auto longest = c.lengths.empty() ? std::int64_t{0} : *std::max_element(c.lengths.begin(), c.lengths.end());
      size_next_forward(longest, T, B * T, capacity, tokens, below);
    }
  }
  counts = c.padded_sized || c.capacity > 0 ? c.counts : torch::Tensor();
  len = c.padded_sized ? c.max_len : 0;
  packed = c.capacity;
  return c;
}

void EvalSizing::clear_read() {
  counts = torch::Tensor();
  len = packed = 0;
}

bool EvalSizing::settle(const std::vector<std::int64_t>& lengths, LayerTrace* trace, std::int64_t batch_tokens,
                        const LayerShape& shape) {
  return packed > 0 ? settle_packed_sized(lengths, packed, capacity, below, trace, batch_tokens, shape)
                    : settle_padded_sized(lengths, len, capacity, below, trace, batch_tokens);
}

DeferredSizing EvalSizing::defer(std::int64_t batch_tokens) {
  DeferredSizing d;
  if (!counts.defined()) return d;
  d.counts = counts;
  d.overflow = packed > 0 ? counts.sum().gt(packed) : counts.max().gt(len);
  d.keep = {rows.bounds, rows.places};
  d.capacity = &capacity;
  // The forward's form, as it ran (its values may change before the counts are read): settle without a trace.
  d.settle = [self = this, packed = packed, len = len,
              batch_tokens](const std::vector<std::int64_t>& lengths) {
    return packed > 0 ? settle_packed_sized(lengths, packed, self->capacity, self->below, nullptr, batch_tokens, {})
                      : settle_padded_sized(lengths, len, self->capacity, self->below, nullptr, batch_tokens);
  };
  return d;
}

bool sized_ffn_rows_active(const torch::Tensor& x) {
  return sized_compaction_active() && (ForcePaddedSized::active() || x.is_cuda());
}

bool sized_compaction_active() {
  static const bool off = switched_off_in_environment("ROUTELAB_SIZED_COMPACTION");
  // Deterministic runs repeat and resume bit for bit: a capacity carried over from earlier forwards would change the
  // products' shapes (and so their rounding) against a run resumed without it.
  // A probe records during the forward, which a rerun after an overflow would record twice.
  return !off && !ExactRoutedCounts::active() && !at::globalContext().deterministicAlgorithms() &&
         !residual_probe_active() && !layer_state_probe_active();
}

bool sized_overflow(const std::vector<std::int64_t>& lengths, std::int64_t capacity) {
  std::int64_t total = 0;
  for (const auto n : lengths) total += n;
  return total > capacity;
}

std::vector<std::int64_t> sized_runs(const std::vector<std::int64_t>& lengths, std::int64_t capacity) {
  auto runs = lengths;
  std::int64_t end = 0;
  for (const auto n : lengths) end += n;
  for (std::int64_t p = 1; p <= kPaddingRuns; ++p) {
    const auto next = std::max(end, (capacity * p + kPaddingRuns - 1) / kPaddingRuns);
    runs.push_back(next - end);
    end = next;
  }
  return runs;
}

std::int64_t next_capacity(std::int64_t routed, std::int64_t capacity, std::int64_t tokens) {
  constexpr std::int64_t multiple = 64;
  const auto wanted = std::min(tokens, (routed + routed / 16 + 32 + multiple - 1) / multiple * multiple);
  // Keep the capacity while the routed rows sit between 3/4 of it and its margin; else size it afresh.
  if (capacity > 0 && capacity <= tokens && wanted <= capacity && wanted * 4 >= capacity * 3) return capacity;
  return wanted;
}

std::int64_t resize_capacity(std::int64_t routed, std::int64_t capacity, std::int64_t tokens, int& below) {
  const auto wanted = next_capacity(routed, capacity, tokens);
  if (capacity <= 0 || wanted >= capacity) {
    below = 0;
    return wanted;
  }
  if (++below < kShrinkAfterForwards) return capacity;
  below = 0;
  return wanted;
}

void size_next_forward(std::int64_t routed, std::int64_t limit, std::int64_t batch_tokens, std::int64_t& capacity,
                       std::int64_t& tokens, int& below) {
  capacity = resize_capacity(routed, tokens == batch_tokens ? capacity : 0, limit, below);
  tokens = batch_tokens;
}

torch::Tensor compacted_positions(const torch::Tensor& positions, const Compaction& c) {
  ROUTELAB_PART("routing");
  if (positions.dim() == 2) return positions.gather(1, c.index);
  return positions.take(c.index);  // (B, K)
}

torch::Tensor gather_rows(const torch::Tensor& x, const Compaction& c) {
  ROUTELAB_PART("routing");
  const auto B = x.size(0), T = x.size(1), C = x.size(2);
  return x.reshape({B * T, C}).index_select(0, c.flat).view({B, c.max_len, C});  // (B, K, C)
}

torch::Tensor scatter_rows(const torch::Tensor& base, const Compaction& c, const torch::Tensor& rows) {
  ROUTELAB_PART("routing");
  auto real = rows.reshape({base.size(0) * c.max_len, base.size(2)});
  if (c.padded_sized) {  // the padding rows' tokens keep base's rows
    const auto flat = base.reshape({base.size(0) * base.size(1), base.size(2)});
    return flat.index_copy(0, c.flat, torch::where(c.valid.reshape({-1, 1}), real.to(base.scalar_type()),
                                                   flat.index_select(0, c.flat)))
        .view(base.sizes());
  }
  if (c.real.defined()) real = real.index_select(0, c.real);  // (total, C): padding rows left out
  return scatter_packed(base, c, real);
}

torch::Tensor add_rows(const torch::Tensor& base, const Compaction& c, const torch::Tensor& rows) {
  ROUTELAB_PART("routing");
  const auto B = base.size(0), T = base.size(1), C = base.size(2);
  if (c.capacity > 0) {  // packed sized rows (capacity, C): nothing for the padding rows
    const auto kept = torch::where(c.row_valid, rows, 0.0).to(base.scalar_type());
    return base.reshape({B * T, C}).index_add(0, c.real_flat, kept).view({B, T, C});
  }
  auto real = rows.reshape({B * c.max_len, C});
  if (c.real.defined()) real = real.index_select(0, c.real);  // (total, C): padding rows left out
  if (c.padded_sized) real = real.masked_fill(c.valid.reshape({-1, 1}).logical_not(), 0);  // nothing for padding
  return base.reshape({B * T, C}).index_add(0, c.real_flat, real.to(base.scalar_type())).view({B, T, C});
}

torch::Tensor gather_packed(const torch::Tensor& x, const Compaction& c) {
  ROUTELAB_PART("routing");
  return x.reshape({x.size(0) * x.size(1), x.size(2)}).index_select(0, c.real_flat);
}

torch::Tensor scatter_packed(const torch::Tensor& base, const Compaction& c, const torch::Tensor& rows) {
  ROUTELAB_PART("routing");
  const auto B = base.size(0), T = base.size(1), C = base.size(2);
  const auto flat = base.reshape({B * T, C});
  auto put = rows.to(base.scalar_type());
  // A sized compaction's padding rows are unrouted tokens: written back with their own values.
  if (c.capacity > 0) put = torch::where(c.row_valid, put, flat.index_select(0, c.real_flat));
  return flat.index_copy(0, c.real_flat, put).view({B, T, C});
}

torch::Tensor packed_positions(const torch::Tensor& positions, const Compaction& c) {
  ROUTELAB_PART("routing");
  if (positions.dim() == 2) return positions.reshape({-1}).index_select(0, c.real_flat);
  return positions.index_select(0, c.real_flat.remainder(c.seq_len));  // each row's place within its sequence
}

torch::Tensor topk_decision(const torch::Tensor& scores, std::int64_t k) { return topk_routing(scores, k).decision; }

TopKRouting topk_routing(const torch::Tensor& scores, std::int64_t k) {
  ROUTELAB_PART("routing");
  const auto B = scores.size(0), T = scores.size(1);
  k = std::clamp<std::int64_t>(k, 0, T);
  TopKRouting r;
  auto& c = r.compaction;
  c.seq_len = T;
  c.lengths.assign(static_cast<std::size_t>(B), k);
  c.max_len = k;
  c.total = B * k;
  c.sum_sq = static_cast<double>(B) * static_cast<double>(k) * static_cast<double>(k);
  const auto index_options = scores.options().dtype(torch::kLong);
  r.decision = torch::zeros({B, T}, scores.options().dtype(torch::kBool));
  if (k == 0) {
    c.index = torch::zeros({B, 0}, index_options);
    c.valid = torch::zeros({B, 0}, index_options.dtype(torch::kBool));
    index_rows(c);
    return r;
  }
  const auto top = std::get<1>(scores.topk(k, 1));  // (B, k), by score
  r.decision.scatter_(1, top, true);  // in place: the zeros above are its own
  c.index = std::get<0>(top.sort(1));  // (B, k): causal order
  c.valid = torch::ones({B, k}, index_options.dtype(torch::kBool));
  index_rows(c);
  return r;
}

double threshold_for_top(const torch::Tensor& scores, std::int64_t k) {
  const auto sorted = std::get<0>(to_host(scores.reshape({-1}), torch::kDouble).sort());  // ascending
  const auto n = sorted.size(0);
  k = std::clamp<std::int64_t>(k, 0, n);
  const auto* s = sorted.data_ptr<double>();
  if (k == 0) return s[n - 1] + 1.0;
  if (k == n) return s[0] - 1.0;
  return 0.5 * (s[n - k - 1] + s[n - k]);
}

torch::Tensor gate_logit(const torch::Tensor& p) {
  const auto q = p.to(torch::kDouble).clamp(1e-300, 1.0 - 1e-16);
  return (q / (1.0 - q)).log();
}

std::int64_t share_count(double fraction, std::int64_t n) {
  return std::clamp<std::int64_t>(static_cast<std::int64_t>(std::llround(fraction * static_cast<double>(n))), 0, n);
}

void force_two_way_bias(const torch::Tensor& bias, std::int64_t path, const torch::Tensor& gate, std::int64_t k) {
  const auto other = 1 - path;
  const double diff = (bias[path] - bias[other]).item<double>();
  // gate logit = s_path - s_other + diff for scores s before the bias: take `path` iff s_path - s_other > thr
  const double thr = threshold_for_top(gate_logit(gate) - diff, k);
  bias[path].fill_(bias[other].item<double>() - thr);
}

torch::Tensor masked_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& allowed) {
  ROUTELAB_PART("attention");
  const auto H = q.size(1), hd = q.size(3);
  const auto kf = repeat_kv(k, H / k.size(1)), vf = repeat_kv(v, H / v.size(1));
  auto scores = torch::matmul(q, kf.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));  // (B, H, T, T)
  scores = scores.masked_fill(allowed.logical_not().unsqueeze(1), -std::numeric_limits<float>::infinity());
  return torch::matmul(torch::softmax(scores, -1), vf);  // (B, H, T, hd)
}

CausalPredictorImpl::CausalPredictorImpl(std::int64_t n_embd) {
  linear = register_module("linear", torch::nn::Linear(torch::nn::LinearOptions(n_embd, 1).bias(true)));
}

torch::Tensor CausalPredictorImpl::forward(const torch::Tensor& x) {
  const Fp32Router fp32;
  return routelab::linear(x.detach().to(torch::kFloat), linear).squeeze(-1);  // (B, T)
}

torch::Tensor CausalPredictorImpl::loss(const torch::Tensor& logits, const torch::Tensor& target) {
  return torch::binary_cross_entropy_with_logits(logits, target.to(logits.scalar_type()));
}

double CausalPredictorImpl::agreement(const torch::Tensor& logits, const torch::Tensor& target) {
  return agreement_on_device(logits, target).item<double>();
}

torch::Tensor CausalPredictorImpl::agreement_on_device(const torch::Tensor& logits, const torch::Tensor& target) {
  return (logits.detach().gt(0) == target).to(torch::kFloat).mean();
}

}  // namespace routelab
