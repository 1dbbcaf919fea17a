#include "core/bench/eviction_bench.h"

#include <torch/torch.h>

#include "core/bench/bench_timing.h"
#include "core/models/dllm_eviction.h"
#include "core/util/device.h"

namespace routelab {

namespace {

struct EvictionMemory {
  double peak_mb = -1, saved_mb = -1;
};

/// Output and the gradients of <output, upstream> with respect to q, k, v and w, through one form (`chunk`: the
/// chunked kernel's rows per chunk, 0 automatic). With `memory`, also what the pass holds above the memory allocated
/// before it: at its peak, and after the forward (the output and all autograd keeps for the backward); -1 where the
/// device is not tracked.
std::vector<torch::Tensor> eviction_pass(const std::vector<torch::Tensor>& inputs, const torch::Tensor& upstream,
                                         bool chunked, std::int64_t chunk, const torch::Device& device,
                                         EvictionMemory* memory = nullptr) {
  std::int64_t before = -1, saved = -1;
  if (memory) {
    synchronize(device);
    reset_peak_memory(device);
    before = device_memory(device).allocated;
  }
  std::vector<torch::Tensor> leaves;
  for (const auto& t : inputs) leaves.push_back(t.detach().requires_grad_());
  const auto out = chunked ? evicting_attention(leaves[0], leaves[1], leaves[2], leaves[3], Eviction::Multiplicative, chunk)
                           : evicting_attention_materialised(leaves[0], leaves[1], leaves[2], leaves[3],
                                                             Eviction::Multiplicative);
  if (memory) {
    synchronize(device);
    saved = device_memory(device).allocated;
  }
  (out * upstream).sum().backward();
  if (memory && before >= 0) {
    synchronize(device);
    const auto mb = [&](std::int64_t bytes) { return static_cast<double>(bytes - before) / (1 << 20); };
    *memory = {mb(device_memory(device).peak), mb(saved)};
  }
  std::vector<torch::Tensor> results = {out.detach()};
  for (const auto& leaf : leaves) results.push_back(leaf.grad());
  return results;
}

}  // namespace

std::vector<EvictionBenchRow> bench_eviction(const EvictionBenchOptions& o) {
  const auto device = resolve_device(o.device);
  configure_threads(o.threads);  // also installs the caching CPU allocator, whose large blocks give the CPU peak
  std::vector<EvictionBenchRow> rows;
  for (const auto type : {torch::kFloat, torch::kBFloat16}) {
    const std::string precision = type == torch::kFloat ? "fp32" : "bf16";
    if (o.precision != "both" && o.precision != precision) continue;
    for (const auto T : o.contexts) {
      torch::manual_seed(0);
      const auto on = torch::TensorOptions().device(device);
      auto flags = torch::rand({o.batch, T}, on).lt(o.executed).to(torch::kFloat);
      flags.narrow(1, 0, std::min<std::int64_t>(2, T)).fill_(1.0f);  // D-LLM's reserved first tokens
      const std::vector<torch::Tensor> inputs = {torch::randn({o.batch, o.heads, T, o.head_dim}, on).to(type),
                                                 torch::randn({o.batch, o.heads, T, o.head_dim}, on).to(type),
                                                 torch::randn({o.batch, o.heads, T, o.head_dim}, on).to(type), flags};
      const auto upstream = torch::randn({o.batch, o.heads, T, o.head_dim}, on).to(type);
      EvictionBenchRow r;
      r.precision = precision;
      r.context = T;
      r.chunk_rows = evicting_attention_chunk_rows(o.batch, o.heads, T, o.query_chunk);
      const auto chunk = o.query_chunk;
      EvictionMemory memory;
      const auto a = eviction_pass(inputs, upstream, true, chunk, device, &memory);
      r.chunked_peak_mb = memory.peak_mb;
      r.chunked_saved_mb = memory.saved_mb;
      if (o.materialised) {
        const auto b = eviction_pass(inputs, upstream, false, chunk, device, &memory);
        r.materialised_peak_mb = memory.peak_mb;
        r.materialised_saved_mb = memory.saved_mb;
        r.output_diff = (a[0] - b[0]).abs().max().item<double>();
        r.grad_diff = 0;
        for (std::size_t i = 1; i < a.size(); ++i) {
          r.grad_diff = std::max(r.grad_diff, (a[i] - b[i]).abs().max().item<double>());
          r.grad_max = std::max(r.grad_max, b[i].abs().max().item<double>());
        }
      }
      std::vector<double> chunked, materialised;  // interleaved, after warm-up
      for (int i = 0; i < o.warmup + o.reps; ++i) {
        const double tc = time_ms([&] { eviction_pass(inputs, upstream, true, chunk, device); }, device);
        const double tm = o.materialised ? time_ms([&] { eviction_pass(inputs, upstream, false, chunk, device); }, device) : -1;
        if (i < o.warmup) continue;
        chunked.push_back(tc);
        materialised.push_back(tm);
      }
      r.chunked_ms = median(chunked);
      if (o.materialised) r.materialised_ms = median(materialised);
      rows.push_back(r);
    }
  }
  return rows;
}

}  // namespace routelab
