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

enum class Form { Chunked, Flash, Cudnn, Efficient, Cpu, Materialised };

const char* form_name(Form form) {
  switch (form) {
    case Form::Chunked: return "chunked";
    case Form::Flash: return "flash";
    case Form::Cudnn: return "cudnn";
    case Form::Efficient: return "efficient";
    case Form::Cpu: return "cpu";
    case Form::Materialised: return "materialised";
  }
  return "?";
}

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
  const auto out = [&] {
    switch (form) {
      case Form::Chunked: return evicting_attention_chunked(q, all_heads(k), all_heads(v), w, eviction, chunk);
      case Form::Flash: return evicting_attention_flash(q, k, v, w, eviction, EvictionKernel::Flash);
      case Form::Cudnn: return evicting_attention_flash(q, k, v, w, eviction, EvictionKernel::Cudnn);
      case Form::Efficient: return evicting_attention_flash(q, k, v, w, eviction, EvictionKernel::Efficient);
      case Form::Cpu: return evicting_attention_cpu(q, all_heads(k), all_heads(v), w, eviction);
      case Form::Materialised: break;
    }
    return evicting_attention_materialised(q, all_heads(k), all_heads(v), w, eviction);
  }();
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

/// The forms run for `type` on `device`, the chunked one first and the materialised one last. Whether a GPU kernel
/// takes the shape is learnt by trying it (bench_eviction reports a failure in the form's row).
std::vector<Form> forms_for(const torch::Device& device, torch::ScalarType type, bool materialised) {
  std::vector<Form> forms{Form::Chunked};
  if (flash_eviction_available()) {
    // Flash attention on a GPU takes bf16 only (the CPU's takes fp32 too); memory-efficient attention takes both.
    if (!device.is_cuda() || type != torch::kFloat) forms.push_back(Form::Flash);
    if (device.is_cuda() && type != torch::kFloat && cudnn_eviction_available()) forms.push_back(Form::Cudnn);
    if (device.is_cuda()) forms.push_back(Form::Efficient);
  }
  if (device.is_cpu()) forms.push_back(Form::Cpu);
  if (materialised) forms.push_back(Form::Materialised);
  return forms;
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
      // Each form's first pass, with its memory; a GPU kernel's failure is reported, not fatal (the chunked form, the
      // CPU kernel and the materialised one have no such excuse).
      struct Ran {
        Form form;
        std::size_t row;                 ///< its entry in r.forms
        std::vector<torch::Tensor> out;  ///< output and gradients, until compared
        std::vector<double> times;
      };
      std::vector<Ran> ran;
      for (const auto form : forms_for(device, type, o.materialised)) {
        EvictionFormResult& f = r.forms.emplace_back();
        f.form = form_name(form);
        EvictionMemory memory;
        const bool gpu_kernel = form == Form::Flash || form == Form::Cudnn || form == Form::Efficient;
        try {
          ran.push_back({form, r.forms.size() - 1, eviction_pass(inputs, upstream, form, chunk, device, &memory), {}});
          f.peak_mb = memory.peak_mb;
          f.saved_mb = memory.saved_mb;
        } catch (const c10::Error& e) {
          if (!gpu_kernel || !device.is_cuda()) throw;
          f.error = e.what_without_backtrace();
        }
      }
      if (o.materialised) {
        // The largest differences from the materialised form (run last): output, then the gradients of q, k, v, w.
        const auto& b = ran.back().out;
        for (std::size_t j = 0; j + 1 < ran.size(); ++j) {
          const auto& x = ran[j].out;
          auto& f = r.forms[ran[j].row];
          f.output_diff = (x[0] - b[0]).abs().max().item<double>();
          f.grad_diff = 0;
          for (std::size_t i = 1; i < x.size(); ++i)
            f.grad_diff = std::max(f.grad_diff, (x[i] - b[i]).abs().max().item<double>());
        }
        for (std::size_t i = 1; i < b.size(); ++i) r.grad_max = std::max(r.grad_max, b[i].abs().max().item<double>());
      }
      for (auto& x : ran) x.out.clear();
      // Timed interleaved, form after form each repetition, after the warm-up ones.
      for (int i = 0; i < o.warmup + o.reps; ++i)
        for (auto& x : ran) {
          const double ms = time_ms([&] { eviction_pass(inputs, upstream, x.form, chunk, device); }, device);
          if (i >= o.warmup) x.times.push_back(ms);
        }
      for (const auto& x : ran) r.forms[x.row].ms = median(x.times);
      rows.push_back(r);
    }
  }
  return rows;
}

}  // namespace routelab
