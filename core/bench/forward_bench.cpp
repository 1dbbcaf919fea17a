// bench forward: routers are forced to a target fraction by their architecture's calibration pass
// (ArchitectureEntry::force_routed_share: output biases set from the scores of one forward, every routed layer at
// once), repeated `calibration_passes` times because a layer's input moves when the layers before it change their
// decisions; the measured fraction of the timed configuration is
// reported, not assumed. Timed forwards run without tracing; eval-mode routing is deterministic, so the traced
// forward that gives the FLOPs ratio routes exactly as the timed ones. Breakdowns come from OpClassProfiler
// (global RecordFunction callbacks timing top-level ATen ops by class), which works on LibTorch 1.13 and 2.x.
#include "core/bench/forward_bench.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <iomanip>
#include <map>
#include <sstream>

#include <torch/torch.h>

#include "core/bench/bench_timing.h"
#include "core/bench/call_profile.h"
#include "core/bench/kernel_profile.h"
#include "core/config/experiment_config.h"
#include "core/cost/flop_counter.h"
#include "core/models/blocks/attention.h"
#include "core/models/blocks/routing.h"
#include "core/models/language_model.h"
#include "core/models/registry.h"
#include "core/inference/cuda_graph_forward.h"
#include "core/train/cuda_graph_step.h"
#include "core/train/optimizer.h"
#include "core/train/step.h"
#include "core/util/device.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

struct TracedForward {
  double flops_ratio = 1.0;
  double fraction = 1.0;
};

/// Routing and FLOPs of one forward in the mode the model is timed in (training mode for --train: the FLOPs ratio
/// of a step's forward, which its backward repeats in proportion).
TracedForward traced(LanguageModel& model, const ArchitectureEntry& arch, const torch::Tensor& tokens) {
  torch::NoGradGuard no_grad;
  const auto out = model.forward(tokens, true);
  double f = 0, d = 0, routed = 0;
  int n = 0;
  for (const auto& t : out.trace) {
    f += t.flops;
    d += t.dense_flops;
    if (!t.routed) continue;
    // the fraction the FLOPs model prices (TSA: the share running the FFN)
    const auto it = arch.priced_share_stat.empty() ? t.stats.end() : t.stats.find(arch.priced_share_stat);
    routed += it != t.stats.end() ? it->second : t.routed_fraction;
    ++n;
  }
  return {d > 0 ? f / d : 1.0, n > 0 ? routed / n : 1.0};
}

using Profile = ForwardBenchRow::Profile;


nlohmann::json model_json(const ForwardBenchOptions& o, const std::string& arch, std::int64_t max_len) {
  nlohmann::json m = {{"arch", arch},        {"style", "llama"},         {"n_layer", o.n_layer},
                      {"n_embd", o.n_embd},  {"n_head", o.n_head},       {"n_kv_head", o.n_kv_head},
                      {"max_seq_len", max_len}};
  auto full = schema_defaults(architecture(arch).options);
  for (const auto& [k, v] : architecture(arch).speed_options.items()) full[k] = v;
  for (const auto& [k, v] : m.items()) full[k] = v;
  architecture(arch).check(full, "bench forward model");
  return full;
}

/// One top-level op name of a host breakdown: its calls in the model's call and in dense's.
struct HostOpLine {
  std::string name;
  std::int64_t calls = 0, dense_calls = 0;
  double ms = 0, dense_ms = 0;
};

/// With host breakdowns (ForwardBenchOptions::kernels): the `top` top-level ops that `r`'s model dispatches most
/// beyond dense's count, where a routed layer's extra host work is (on a GPU, what keeps the device waiting).
std::vector<HostOpLine> host_ops_beyond_dense(const ForwardBenchRow& r, int top) {
  std::map<std::string, HostOpLine> merged;
  for (const auto& k : r.profile.host_ops) merged[k.name] = {k.name, k.calls, 0, k.ms};
  for (const auto& k : r.dense_profile.host_ops) {
    auto& line = merged[k.name];
    line.name = k.name;
    line.dense_calls = k.calls;
    line.dense_ms = k.ms;
  }
  std::vector<HostOpLine> lines;
  for (auto& [name, line] : merged) lines.push_back(std::move(line));
  std::stable_sort(lines.begin(), lines.end(), [](const HostOpLine& a, const HostOpLine& b) {
    return a.calls - a.dense_calls > b.calls - b.dense_calls;
  });
  if (lines.size() > static_cast<std::size_t>(std::max(0, top))) lines.resize(static_cast<std::size_t>(std::max(0, top)));
  return lines;
}

/// A row's device memory where tracked (a GPU): its timed calls' peak above what was held before them, and what
/// was held, in GB, dense's beside; and where its calls or dense's made the CUDA allocator go to the device, the
/// counts. Else nothing.
std::string memory_note(const ForwardBenchRow& r) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(2);
  if (r.step_peak_mb >= 0)
    s << "  (step peak " << r.step_peak_mb / 1024 << " GB above " << r.held_mb / 1024 << " held; dense "
      << r.dense_step_peak_mb / 1024 << " / " << r.dense_held_mb / 1024 << ")";
  if (r.device_allocs + r.alloc_retries + r.dense_device_allocs + r.dense_alloc_retries > 0)
    s << "  (device mallocs/frees " << r.device_allocs << ", retries " << r.alloc_retries << "; dense's "
      << r.dense_device_allocs << ", " << r.dense_alloc_retries << ")";
  return s.str();
}

}  // namespace

ForwardBenchResult bench_forward(const ForwardBenchOptions& in) {
  ForwardBenchOptions o = in;
  if (o.quick) {
    o.lengths = {128, 256};
    o.n_embd = 128;
    o.n_layer = 4;
    o.n_head = 4;
    o.reps = 1;
    o.warmup = 1;
    o.breakdown_min_seq = 0;
  }
  const auto forcible = architectures_with([](const ArchitectureEntry& e) { return e.force_routed_share != nullptr; });
  if (o.archs.empty())
    for (const auto& e : architectures())
      if (e.force_routed_share) o.archs.push_back(e.id);
  for (const auto& a : o.archs)
    if (!architecture(a).force_routed_share)
      throw ConfigError("bench forward --archs: '" + a + "' has no router a benchmark can force (those that do: " +
                        forcible + ")");
  for (const double f : o.fractions)
    if (!(f >= 0.0 && f <= 1.0)) throw ConfigError("bench forward --fractions: " + std::to_string(f) + " is outside [0, 1]");
  for (const auto t : o.lengths)
    if (t < 4) throw ConfigError("bench forward --lengths: " + std::to_string(t) + " is too short");
  if (o.lengths.empty() || o.fractions.empty()) throw ConfigError("bench forward: no lengths or no fractions");
  if (o.reps < 1 || o.warmup < 0 || o.batch < 1 || o.calibration_passes < 1)
    throw ConfigError("bench forward: --reps, --batch and calibration passes must be at least 1, --warmup at least 0");
  torch::Device device(torch::kCPU);
  try {
    device = resolve_device(o.device);
  } catch (const DeviceError& e) {
    throw ConfigError(std::string("bench forward --device: ") + e.what());
  }
  if (o.cuda_graph && (!device.is_cuda() || !cuda_graphs_available()))
    throw ConfigError("bench forward --cuda-graph: needs a CUDA device and a CUDA LibTorch");
  if (o.threads > 0) at::set_num_threads(o.threads);
  if (device.is_cuda()) configure_cuda_math(o.tf32);

  ForwardBenchResult result;
  result.options = o;
  result.threads = at::get_num_threads();
  result.device = o.device;
  const auto max_len = *std::max_element(o.lengths.begin(), o.lengths.end());
  const ModelContext ctx{o.vocab, max_len};

  torch::manual_seed(0);
  auto dense = create_model(model_json(o, kBaselineArchitecture, max_len), ctx);
  std::vector<std::shared_ptr<LanguageModel>> models;
  for (const auto& a : o.archs) {
    torch::manual_seed(0);
    models.push_back(create_model(model_json(o, a, max_len), ctx));
  }
  std::vector<std::shared_ptr<LanguageModel>> all = {dense};
  all.insert(all.end(), models.begin(), models.end());
  // --train: AdamW at learning rate 0 (the update's arithmetic runs, the weights and so the forced routing stay).
  std::vector<std::unique_ptr<MultiTensorAdamW>> optimizers;
  auto train = schema_defaults(train_schema());  // the training defaults, at learning rate 0
  train["lr"] = 0.0;
  for (auto& m : all) {
    m->to(device);
    m->eval();
    if (o.train)
      optimizers.push_back(make_optimizer(*m, train));
  }

  torch::NoGradGuard no_grad;
  const AutocastGuard autocast(o.bf16, device);  // this thread's forwards: calibration, traces, timing, profiles
  for (const auto T : o.lengths) {
    const auto tokens = torch::randint(0, o.vocab, {o.batch, T}, torch::TensorOptions().dtype(torch::kLong)).to(device);
    const Batch batch{tokens, torch::randint(0, o.vocab, {o.batch, T}, tokens.options()), {}};
    // With --cuda-graph, the captured steps (--train) or forwards: dense's once per length, a routed model's once per
    // fraction (its forced routing may change its shapes, MoD's capacity).
    std::vector<std::unique_ptr<CudaGraphStep>> graphs(all.size());
    std::vector<std::unique_ptr<CudaGraphForward>> forward_graphs(all.size());
    nlohmann::json graph_train = train;  // what decides whether a step can be captured
    const std::string precision = o.bf16 ? "bf16" : "fp32";
    graph_train["precision"] = precision;
    const auto graphed = [&](std::size_t i) {
      const auto& id = i == 0 ? kBaselineArchitecture : o.archs[i - 1];
      const auto& entry = architecture(id);
      const auto model = model_json(o, id, max_len);
      return o.cuda_graph && (o.train ? why_no_cuda_graph(entry, model, graph_train)
                                      : why_no_cuda_graph_forward(entry, model, precision))
                                 .empty();
    };
    const auto capture = [&](std::size_t i) {
      graphs[i].reset();  // the previous graph's memory back first
      forward_graphs[i].reset();
      if (!graphed(i)) return;
      if (o.train)
        graphs[i] = std::make_unique<CudaGraphStep>(*all[i], *optimizers[i], 1.0, o.bf16);
      else
        forward_graphs[i] = std::make_unique<CudaGraphForward>(*all[i]);
    };
    std::vector<std::function<void()>> runs;  // dense first, then every routed model
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (!o.train) {
        runs.push_back([&m = *all[i], &graph = forward_graphs[i], &tokens] {
          if (graph)
            graph->run(tokens);
          else
            m.forward(tokens);
        });
        continue;
      }
      runs.push_back([&m = *all[i], &opt = *optimizers[i], &graph = graphs[i], &batch, &device, bf16 = o.bf16] {
        const torch::AutoGradMode grad(true);
        // Out of this function's autocast region: the step turns autocast on for its forward only, and its backward
        // runs outside it, as in training.
        const AutocastOff outside(device);
        if (graph)
          graph->run(batch, false);
        else
          train_step(m, opt, batch, /*grad_clip=*/1.0, bf16, /*trace=*/false);
      });
    }
    Profile dense_profile;  // profiled once per length, when needed
    for (const double fraction : o.fractions) {
      std::vector<TracedForward> traces;
      for (std::size_t i = 0; i < models.size(); ++i) {
        const auto& arch = architecture(o.archs[i]);
        models[i]->eval();  // the routers are forced from eval-mode forwards (ArchitectureEntry::force_routed_share)
        for (int p = 0; p < o.calibration_passes; ++p) arch.force_routed_share(*models[i], tokens, fraction);
        models[i]->train(o.train);
        traces.push_back(traced(*models[i], arch, tokens));
        capture(i + 1);
      }
      dense->train(o.train);
      if (fraction == o.fractions.front()) capture(0);
      // On a GPU the first calls pay for the context, cuBLAS handles and kernel selection: never timed. A graph's
      // eager steps and its capture are warm-up too.
      const int warmup = o.cuda_graph ? std::max(o.warmup, kCudaGraphWarmupCalls)
                                      : device.is_cuda() ? std::max(1, o.warmup) : o.warmup;
      for (int w = 0; w < warmup; ++w)
        for (const auto& run : runs) run();
      std::vector<std::vector<double>> times(runs.size());
      std::vector<AllocatorEvents> allocator(runs.size());  // summed over the timed calls
      std::vector<double> step_peak(runs.size(), -1), held(runs.size(), -1);  // MB: the most over the timed calls
      const bool tracked = device.is_cuda() && device_memory(device).allocated >= 0;
      for (int r = 0; r < o.reps; ++r)  // interleaved: drifting machine load hits every model alike
        for (std::size_t i = 0; i < runs.size(); ++i) {
          const auto before = allocator_events(device);
          std::int64_t allocated = 0;
          if (tracked) {
            synchronize(device);
            reset_peak_memory(device);
            allocated = device_memory(device).allocated;
          }
          times[i].push_back(time_ms(runs[i], device));
          if (tracked) {
            const auto mb = [](std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
            step_peak[i] = std::max(step_peak[i], mb(device_memory(device).peak - allocated));
            held[i] = std::max(held[i], mb(allocated));
          }
          const auto after = allocator_events(device);
          allocator[i].device_allocs += after.device_allocs - before.device_allocs +
                                        after.device_frees - before.device_frees;
          allocator[i].retries += after.retries - before.retries;
        }
      const double dense_ms = median(times[0]);
      for (std::size_t i = 0; i < models.size(); ++i) {
        ForwardBenchRow row;
        row.seq = T;
        row.target = fraction;
        row.arch = o.archs[i];
        row.fraction = traces[i].fraction;
        row.dense_ms = dense_ms;
        row.ms = median(times[i + 1]);
        row.time_ratio = row.ms / dense_ms;
        row.flops_ratio = traces[i].flops_ratio;
        row.quotient = row.time_ratio / row.flops_ratio;
        const auto& step = graphs[i + 1];
        const auto& fwd = forward_graphs[i + 1];
        row.graph = step != nullptr || (fwd && fwd->eager_reason().empty());
        row.captures = step ? step->captures() : fwd ? fwd->captures() : 0;
        row.dense_graph = graphs[0] != nullptr || (forward_graphs[0] && forward_graphs[0]->eager_reason().empty());
        if (fwd) row.graph_note = fwd->eager_reason();
        row.device_allocs = allocator[i + 1].device_allocs;
        row.alloc_retries = allocator[i + 1].retries;
        row.dense_device_allocs = allocator[0].device_allocs;
        row.dense_alloc_retries = allocator[0].retries;
        row.step_peak_mb = step_peak[i + 1];
        row.held_mb = held[i + 1];
        row.dense_step_peak_mb = step_peak[0];
        row.dense_held_mb = held[0];
        if (row.quotient > o.breakdown_threshold && T >= o.breakdown_min_seq) {
          if (dense_profile.classes_ms.empty())
            dense_profile = profile_calls(runs[0], device, std::max(3, o.reps), o.kernels);
          row.profile = profile_calls(runs[i + 1], device, std::max(3, o.reps), o.kernels);
          row.dense_profile = dense_profile;
        }
        result.rows.push_back(std::move(row));
      }
    }
  }
  // After the runs: a GPU without flash attention's varlen kernel has fallen back to padded by now.
  const auto type = o.bf16 ? torch::kBFloat16 : torch::kFloat;
  result.kernel_breakdowns = kernel_breakdowns(device);
  const bool varlen = varlen_attention_active(device, type, o.n_embd / o.n_head);
  result.compacted_attention = varlen ? "varlen flash (batches that fill their length: plain)"
                               : device.is_cpu() && !o.bf16 ? "unpadded CPU kernel"
                                                            : "padded";
  if (device.is_cuda() && sized_compaction_active())
    result.compacted_attention += "; data-dependent compactions sized from the previous forward where a model takes "
                                  "them (counts read back once a forward)";
  return result;
}

std::string ForwardBenchResult::to_table() const {
  std::ostringstream s;
  const auto& o = options;
  s << "bench forward: " << device << ", " << threads << " threads, batch " << o.batch << ", d " << o.n_embd << ", "
    << o.n_layer << " layers, " << o.n_head << " heads (llama style), " << (o.bf16 ? "bf16 autocast" : "fp32")
    << (device.rfind("cuda", 0) == 0 ? (o.tf32 ? ", fp32 matmuls on TF32" : ", fp32 matmuls in full fp32") : "")
    << (o.train ? "; training step (training-mode forward, loss, backward, clip, AdamW at lr 0)"
                : "; eval-mode forward")
    << (o.cuda_graph ? ", captured as a CUDA graph where the architecture allows (column: graph), else eager" : "")
    << ", median of " << o.reps
    << " interleaved reps after " << o.warmup << " warm-up; compacted sequences attended " << compacted_attention
    << "\n"
    << "routed = measured mean routed fraction of the routed layers (TSA: FFN share) after forcing the routers to "
       "the target; FLOPs ratio = sum of LayerTrace flops / dense_flops of that forward (layers; LM head excluded); "
       "quotient = time ratio / FLOPs ratio\n";
  s << std::setw(6) << "T" << std::setw(8) << "target" << std::setw(8) << "arch" << std::setw(8) << "routed"
    << std::setw(11) << "dense ms" << std::setw(11) << "ms" << std::setw(11) << "time ratio" << std::setw(12)
    << "FLOPs ratio" << std::setw(10) << "quotient" << "\n";
  s << std::fixed;
  for (const auto& r : rows) {
    s << std::setw(6) << r.seq << std::setw(8) << std::setprecision(2) << r.target << std::setw(8) << r.arch
      << std::setw(8) << std::setprecision(3) << r.fraction << std::setw(11) << std::setprecision(1) << r.dense_ms
      << std::setw(11) << r.ms << std::setw(11) << std::setprecision(3) << r.time_ratio << std::setw(12)
      << r.flops_ratio << std::setw(10) << r.quotient << (o.cuda_graph ? (r.graph ? "  graph" : "  eager") : "")
      << (r.captures > 1 ? " (captured " + std::to_string(r.captures) + " times)" : std::string())
      << (o.cuda_graph && !r.dense_graph ? " (dense eager)" : "") << (r.profile.classes_ms.empty() ? "" : "  *")
      << memory_note(r) << (r.graph_note.empty() ? "" : "  (" + r.graph_note + ")") << "\n";
  }
  bool any = false;
  for (const auto& r : rows) {
    if (r.profile.classes_ms.empty()) continue;
    if (!any)
      s << "\n* quotient above " << o.breakdown_threshold << " at T >= " << o.breakdown_min_seq
        << (kernel_breakdowns
                ? ": GPU kernel ms by class, median of max(3, reps) profiled calls each (PyTorch's Kineto profiler; "
                  "'idle' = profiled wall time with no kernel running: the GPU waiting for the host)"
                : std::string(": ms by op class, median of max(3, reps) profiled calls each (top-level ops on the "
                              "calling thread, RecordFunction callbacks, the custom CPU attention kernel its own "
                              "class; 'outside ops' = wall time not inside any op)") +
                      (device.rfind("cuda", 0) == 0
                           ? "; on cuda these are host-side launch times, the final synchronisation landing in "
                             "'outside ops' (" + kernel_profiling_unavailable() + ")"
                           : ""))
        << "\n";
    any = true;
    s << "T " << r.seq << ", target " << std::setprecision(2) << r.target << ", " << r.arch << " (quotient "
      << std::setprecision(2) << r.quotient << "; " << std::setprecision(0) << r.profile.launches
      << (kernel_breakdowns ? " kernels" : " top-level ops") << " a call, dense " << r.dense_profile.launches
      << "):\n";
    std::map<std::string, std::pair<double, double>> merged;
    for (const auto& [k, v] : r.profile.classes_ms) merged[k].first = v;
    for (const auto& [k, v] : r.dense_profile.classes_ms) merged[k].second = v;
    for (const auto& [k, v] : merged)
      s << "    " << std::left << std::setw(58) << k << std::right << std::setw(10) << std::setprecision(1) << v.first
        << " ms   dense " << std::setw(10) << v.second << " ms\n";
    const auto kernel_lines = [&](const std::vector<ForwardBenchRow::Kernel>& top, const std::string& who) {
      if (top.empty()) return;
      s << "    the " << top.size() << " longest kernels of " << who << " (ms, calls):\n";
      for (const auto& k : top) {
        auto name = k.name;
        if (name.size() > 100) name.replace(97, std::string::npos, "...");
        s << "      " << std::setw(8) << std::setprecision(2) << k.ms << std::setw(7) << k.calls << "  " << name << "\n";
      }
    };
    if (r.graph && kernel_breakdowns) {
      // A graph's replay launches its kernels without running the ops that recorded them: nothing to attribute.
      s << "    (no time by part: the step is replayed as a CUDA graph, whose kernels no op launches; the same run "
           "without --cuda-graph gives the eager step's parts)\n";
    } else if (!r.profile.parts_ms.empty()) {
      s << "    ms by part of the model and step (" << (kernel_breakdowns ? "kernel time" : "top-level ops' host time")
        << "; the backward by the part of its forward op):\n"
        << parts_table(r.profile.parts_ms, 1.0, &r.dense_profile.parts_ms, "dense");
    }
    if (!r.profile.part_pieces.empty() && !(r.graph && kernel_breakdowns)) {
      s << "    what each part of " << r.arch << " runs, its " << o.kernels << " longest "
        << (kernel_breakdowns ? "kernels" : "top-level ops") << " (ms forward / backward, calls; the last profiled "
        << "call), and dense's time and calls for the same name in the same part:\n"
        << part_pieces_table(r.profile, o.kernels, &r.dense_profile, "dense");
    }
    kernel_lines(r.profile.top_kernels, r.arch);
    kernel_lines(r.dense_profile.top_kernels, "dense");
    if (const auto ops = host_ops_beyond_dense(r, o.kernels); !ops.empty()) {
      s << "    the " << ops.size() << " top-level ops " << r.arch
        << " dispatches most beyond dense (calls, dense's calls, ms):\n";
      for (const auto& l : ops)
        s << "      " << std::setw(7) << l.calls << std::setw(7) << l.dense_calls << std::setw(8)
          << std::setprecision(2) << l.ms << "  " << l.name << "\n";
    }
  }
  return s.str();
}

nlohmann::json ForwardBenchResult::to_json() const {
  nlohmann::json rows_json = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json j = {{"seq", r.seq},         {"target", r.target},       {"arch", r.arch},
                        {"routed", r.fraction}, {"dense_ms", r.dense_ms},   {"ms", r.ms},
                        {"time_ratio", r.time_ratio}, {"flops_ratio", r.flops_ratio}, {"quotient", r.quotient}};
    if (device.rfind("cuda", 0) == 0) {
      j["allocator"] = {{"device_allocs", r.device_allocs}, {"retries", r.alloc_retries},
                        {"dense_device_allocs", r.dense_device_allocs}, {"dense_retries", r.dense_alloc_retries}};
      j["memory_mb"] = {{"step_peak", r.step_peak_mb}, {"held", r.held_mb}, {"dense_step_peak", r.dense_step_peak_mb},
                        {"dense_held", r.dense_held_mb}};
    }
    if (options.cuda_graph) {
      j["graph"] = r.graph;
      j["captures"] = r.captures;
      j["dense_graph"] = r.dense_graph;
      if (!r.graph_note.empty()) j["graph_note"] = r.graph_note;
    }
    if (!r.profile.classes_ms.empty()) {
      for (const auto& [k, v] : r.profile.classes_ms) j["breakdown_ms"][k] = v;
      for (const auto& [k, v] : r.dense_profile.classes_ms) j["dense_breakdown_ms"][k] = v;
      for (const auto& [k, v] : r.profile.parts_ms)
        j["parts_ms"][k] = {{"forward", v.forward_ms}, {"backward", v.backward_ms}};
      for (const auto& [k, v] : r.dense_profile.parts_ms)
        j["dense_parts_ms"][k] = {{"forward", v.forward_ms}, {"backward", v.backward_ms}};
      const auto pieces_json = [&](const std::map<std::string, std::vector<Profile::Piece>>& parts) {
        nlohmann::json out = nlohmann::json::object();  // each part's --kernels longest
        for (const auto& [part, pieces] : parts)
          for (std::size_t i = 0; i < pieces.size() && i < static_cast<std::size_t>(options.kernels); ++i) {
            const auto& piece = pieces[i];
            out[part].push_back({{"name", piece.name}, {"forward_ms", piece.forward_ms},
                                 {"backward_ms", piece.backward_ms}, {"calls", piece.calls}});
          }
        return out;
      };
      if (!r.profile.part_pieces.empty()) {
        j["part_pieces"] = pieces_json(r.profile.part_pieces);
        j["dense_part_pieces"] = pieces_json(r.dense_profile.part_pieces);
      }
      j["launches"] = r.profile.launches;
      j["dense_launches"] = r.dense_profile.launches;
      for (const auto& l : host_ops_beyond_dense(r, options.kernels))
        j["host_ops_beyond_dense"].push_back(
            {{"op", l.name}, {"calls", l.calls}, {"dense_calls", l.dense_calls}, {"ms", l.ms},
             {"dense_ms", l.dense_ms}});
    }
    rows_json.push_back(std::move(j));
  }
  const auto& o = options;
  return {{"device", device}, {"threads", threads}, {"batch", o.batch}, {"n_embd", o.n_embd},
          {"n_layer", o.n_layer}, {"n_head", o.n_head}, {"precision", o.bf16 ? "bf16" : "fp32"}, {"tf32", o.tf32},
          {"reps", o.reps},
          {"mode", o.train ? "train-step" : "forward"},
          {"compacted_attention", compacted_attention},
          {"breakdown", kernel_breakdowns ? "gpu kernels" : "host ops"},
          {"warmup", o.warmup},
          {"rows", rows_json}};
}

}  // namespace routelab
