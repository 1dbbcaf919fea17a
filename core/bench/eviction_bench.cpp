#include "core/bench/eviction_bench.h"

#include <torch/torch.h>

#include "core/bench/bench_timing.h"
#include "core/models/blocks/attention.h"
#include "core/models/dllm_eviction.h"
#include "core/util/device.h"
#include "core/util/errors.h"

namespace routelab {

namespace {

struct EvictionMemory {
  double peak_mb = -1, saved_mb = -1;
};

enum class Form { Chunked, Flash, Cudnn, Cpu, Materialised };

/// Output and the gradients of <output, upstream> with respect to q, k, v and w, through one form (`chunk`: the
/// chunked kernel's rows per chunk, 0 automatic). With `memory`, also what the pass holds above the memory allocated
/// before it: at its peak, and after the forward (the output and all autograd keeps for the backward); -1 where the
/// device is not tracked.
std::vector<torch::Tensor> eviction_pass(const std::vector<torch::Tensor>& inputs, const torch::Tensor& upstream,
                                         Form form, std::int64_t chunk, const torch::Device& device,
                                         EvictionMemory* memory = nullptr) {
  std::int64_t before = -1, saved = -1;
  if (memory) {
    synchronize(device);
    reset_peak_memory(device);
    before = device_memory(device).allocated;
  }
  std::vector<torch::Tensor> leaves;
  for (const auto& t : inputs) leaves.push_back(t.detach().requires_grad_());
  const auto eviction = Eviction::Multiplicative;
  const auto H = leaves[0].size(1);
  const auto all_heads = [&](const torch::Tensor& x) { return repeat_kv(x, H / x.size(1)); };
  const auto& q = leaves[0];
  const auto &k = leaves[1], &v = leaves[2], &w = leaves[3];
  const auto out = form == Form::Chunked ? evicting_attention_chunked(q, all_heads(k), all_heads(v), w, eviction, chunk)
                   : form == Form::Flash ? evicting_attention_flash(q, k, v, w, eviction)
                   : form == Form::Cudnn ? evicting_attention_flash(q, k, v, w, eviction, EvictionKernel::Cudnn)
                   : form == Form::Cpu   ? evicting_attention_cpu(q, all_heads(k), all_heads(v), w, eviction)
                                         : evicting_attention_materialised(q, all_heads(k), all_heads(v), w, eviction);
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
  if (o.kv_heads > 0 && o.heads % o.kv_heads != 0)
    throw ConfigError("bench eviction --kv-heads: " + std::to_string(o.kv_heads) + " does not divide --heads " +
                      std::to_string(o.heads));
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
      const auto kv_heads = o.kv_heads > 0 ? o.kv_heads : o.heads;
      const std::vector<torch::Tensor> inputs = {torch::randn({o.batch, o.heads, T, o.head_dim}, on).to(type),
                                                 torch::randn({o.batch, kv_heads, T, o.head_dim}, on).to(type),
                                                 torch::randn({o.batch, kv_heads, T, o.head_dim}, on).to(type), flags};
      const auto upstream = torch::randn({o.batch, o.heads, T, o.head_dim}, on).to(type);
      EvictionBenchRow r;
      r.precision = precision;
      r.context = T;
      r.chunk_rows = evicting_attention_chunk_rows(o.batch, o.heads, T, o.query_chunk);
      const auto chunk = o.query_chunk;
      // Flash attention on a GPU takes bf16/fp16 only; the CPU's takes fp32 too.
      const bool flash = flash_eviction_available() && (!device.is_cuda() || type != torch::kFloat);
      EvictionMemory memory;
      const auto a = eviction_pass(inputs, upstream, Form::Chunked, chunk, device, &memory);
      r.chunked_peak_mb = memory.peak_mb;
      r.chunked_saved_mb = memory.saved_mb;
      std::vector<torch::Tensor> f, c, n;
      if (flash) {
        f = eviction_pass(inputs, upstream, Form::Flash, chunk, device, &memory);
        r.flash_peak_mb = memory.peak_mb;
        r.flash_saved_mb = memory.saved_mb;
      }
      // cuDNN's kernel takes what flash attention's does on a GPU; a failure is reported, not fatal.
      bool cudnn = flash && device.is_cuda() && cudnn_eviction_available();
      if (cudnn) {
        try {
          n = eviction_pass(inputs, upstream, Form::Cudnn, chunk, device, &memory);
          r.cudnn_peak_mb = memory.peak_mb;
          r.cudnn_saved_mb = memory.saved_mb;
        } catch (const c10::Error& e) {
          r.cudnn_error = e.what_without_backtrace();
          cudnn = false;
        }
      }
      const bool cpu = device.is_cpu();
      if (cpu) {
        c = eviction_pass(inputs, upstream, Form::Cpu, chunk, device, &memory);
        r.cpu_peak_mb = memory.peak_mb;
        r.cpu_saved_mb = memory.saved_mb;
      }
      if (o.materialised) {
        const auto b = eviction_pass(inputs, upstream, Form::Materialised, chunk, device, &memory);
        r.materialised_peak_mb = memory.peak_mb;
        r.materialised_saved_mb = memory.saved_mb;
        // The largest differences from the materialised form: output, then the gradients of q, k, v and w.
        const auto differences = [&](const std::vector<torch::Tensor>& x, double& output, double& grad) {
          output = (x[0] - b[0]).abs().max().item<double>();
          grad = 0;
          for (std::size_t i = 1; i < x.size(); ++i) grad = std::max(grad, (x[i] - b[i]).abs().max().item<double>());
        };
        differences(a, r.output_diff, r.grad_diff);
        if (flash) differences(f, r.flash_output_diff, r.flash_grad_diff);
        if (cudnn) differences(n, r.cudnn_output_diff, r.cudnn_grad_diff);
        if (cpu) differences(c, r.cpu_output_diff, r.cpu_grad_diff);
        for (std::size_t i = 1; i < b.size(); ++i) r.grad_max = std::max(r.grad_max, b[i].abs().max().item<double>());
      }
      std::vector<double> chunked, flashed, cudnned, kernel, materialised;  // interleaved, after warm-up
      const auto timed = [&](Form form) {
        return time_ms([&] { eviction_pass(inputs, upstream, form, chunk, device); }, device);
      };
      for (int i = 0; i < o.warmup + o.reps; ++i) {
        const double tc = timed(Form::Chunked);
        const double tf = flash ? timed(Form::Flash) : -1;
        const double tn = cudnn ? timed(Form::Cudnn) : -1;
        const double tk = cpu ? timed(Form::Cpu) : -1;
        const double tm = o.materialised ? timed(Form::Materialised) : -1;
        if (i < o.warmup) continue;
        chunked.push_back(tc);
        flashed.push_back(tf);
        cudnned.push_back(tn);
        kernel.push_back(tk);
        materialised.push_back(tm);
      }
      r.chunked_ms = median(chunked);
      if (flash) r.flash_ms = median(flashed);
      if (cudnn) r.cudnn_ms = median(cudnned);
      if (cpu) r.cpu_ms = median(kernel);
      if (o.materialised) r.materialised_ms = median(materialised);
      rows.push_back(r);
    }
  }
  return rows;
}

}  // namespace routelab
