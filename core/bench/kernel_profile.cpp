// KernelProfiler over PyTorch's Kineto profiler (LibTorch 2.x: prepareProfiler, enableProfiler with the CUDA
// activity, disableProfiler's events); the summaries and classes are plain string work, tested without a GPU.
#include "core/bench/kernel_profile.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iomanip>
#include <sstream>
#include <unordered_map>

#include <torch/torch.h>
#include <torch/version.h>

// KinetoEvent's nanosecond times and hidden events are those of LibTorch 2.4 and later (the pinned wheel is newer).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define ROUTELAB_KINETO 1
#include <kineto/ActivityType.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

#include "core/models/blocks/part_scope.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

bool contains_any(std::string_view text, std::initializer_list<std::string_view> words) {
  return std::any_of(words.begin(), words.end(), [&](std::string_view w) { return text.find(w) != std::string_view::npos; });
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

/// The name up to its template arguments: what a kernel is, whatever it was instantiated for.
std::string_view base_of(std::string_view display) { return display.substr(0, display.find('<')); }

}  // namespace

std::string kernel_display_name(std::string_view name) {
  if (name.rfind("void ", 0) == 0) name.remove_prefix(5);
  std::string s(name);
  static constexpr std::string_view kAnonymous = "(anonymous namespace)::";
  for (auto pos = s.find(kAnonymous); pos != std::string::npos; pos = s.find(kAnonymous, pos))
    s.erase(pos, kAnonymous.size());
  // The parameter list starts at the first '(' outside template arguments.
  int depth = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (s[i] == '(' && depth == 0 && i > 0) {
      s.resize(s.find_last_not_of(' ', i - 1) + 1);
      return s;
    }
  }
  return s;
}

const char* kernel_class(std::string_view name) {
  const auto display = kernel_display_name(name);
  const auto base = lower(base_of(display));
  const auto all = lower(display);
  if (base.rfind("routelab::", 0) == 0) return "RouteLab kernels (loss, add+norm, rotary)";
  if (contains_any(base, {"multi_tensor_apply", "fused_adam", "_foreach"})) return "optimizer (multi-tensor AdamW, clipping)";
  // Attention before products: cuDNN's and the memory-efficient kernels name their GEMM building blocks too.
  if (contains_any(base, {"flash", "fmha", "attention", "attn", "sdpa", "cudnn"}))
    return "attention (flash, cuDNN, memory-efficient)";
  if (contains_any(base, {"gemm", "cutlass", "xmma", "nvjet", "cublas", "s1688", "s16816", "wgmma", "gemv", "splitk"}))
    return "matrix products (cuBLAS, CUTLASS)";
  if (contains_any(base, {"index", "gather", "scatter", "sort", "radix", "topk", "nonzero", "masked", "select",
                          "catarray", "cub::", "unique", "bincount", "histogram", "compact", "embedding"}))
    return "routing index ops (gather, scatter, index, sort, top-k, cat)";
  if (contains_any(base, {"memcpy", "memset", "copy", "fill"}) ||
      (contains_any(base, {"elementwise"}) && contains_any(all, {"copy_kernel", "fillfunctor", "direct_copy"})))
    return "copies, casts, fills";
  if (contains_any(base, {"reduce", "norm", "softmax", "moments", "gammabeta", "internalgradients", "welford",
                          "cross_entropy", "nll"}))
    return "norms, softmax, reductions";
  if (contains_any(base, {"elementwise", "pointwise", "gelu", "silu", "dropout"})) return "elementwise (activations, adds, products)";
  return "other";
}

KernelProfile KernelProfile::from_events(const std::vector<KernelEvent>& events, double wall_ms) {
  KernelProfile p;
  p.wall_ms = wall_ms;
  std::map<std::string, KernelSummary> by_name;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
  for (const auto& e : events) {
    if (e.end_ns < e.start_ns) continue;
    const auto name = kernel_display_name(e.name);
    auto& s = by_name[name];
    if (s.calls == 0) {
      s.name = name;
      s.kernel_class = kernel_class(e.name);
    }
    ++s.calls;
    s.ms += static_cast<double>(e.end_ns - e.start_ns) / 1e6;
    spans.emplace_back(e.start_ns, e.end_ns);
  }
  std::sort(spans.begin(), spans.end());
  std::uint64_t covered = 0, reach = 0;
  for (const auto& [a, b] : spans) {
    const auto from = std::max(a, reach);
    if (b > from) covered += b - from;
    reach = std::max(reach, b);
  }
  p.busy_ms = static_cast<double>(covered) / 1e6;
  for (auto& [name, s] : by_name) p.kernels.push_back(std::move(s));
  std::sort(p.kernels.begin(), p.kernels.end(), [](const auto& a, const auto& b) { return a.ms > b.ms; });
  return p;
}

std::map<std::string, double> KernelProfile::classes_ms() const {
  std::map<std::string, double> out;
  for (const auto& k : kernels) out[k.kernel_class] += k.ms;
  out[kKernelIdleClass] = std::max(0.0, wall_ms - busy_ms);
  return out;
}

std::string KernelProfile::to_table(int top, double per, const std::string& unit) const {
  std::ostringstream s;
  s << std::fixed << std::setprecision(2);
  s << "device busy " << busy_ms / per << " ms of " << wall_ms / per << " ms " << unit << " ("
    << (wall_ms > 0 ? 100.0 * busy_ms / wall_ms : 0.0) << "%); kernel time by class, ms " << unit << ":\n";
  std::vector<std::pair<std::string, double>> classes;
  for (const auto& [k, v] : classes_ms()) classes.emplace_back(k, v);
  std::sort(classes.begin(), classes.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [k, v] : classes) s << "  " << std::left << std::setw(62) << k << std::right << std::setw(10) << v / per << "\n";
  if (!parts.empty())
    s << "kernel time by part of the model and step, ms " << unit << " (the backward by the part of its forward op):\n"
      << parts_table(parts, per);
  if (top <= 0) return s.str();
  s << "the " << std::min<std::size_t>(static_cast<std::size_t>(top), kernels.size()) << " longest kernels (ms " << unit
    << ", calls " << unit << "):\n";
  for (std::size_t i = 0; i < kernels.size() && i < static_cast<std::size_t>(top); ++i) {
    const auto& k = kernels[i];
    std::string name = k.name;
    if (name.size() > 110) name.replace(107, std::string::npos, "...");
    s << "  " << std::setw(9) << k.ms / per << std::setw(8) << std::setprecision(1) << double(k.calls) / per
      << std::setprecision(2) << "  " << name << "\n";
  }
  return s.str();
}

std::string kernel_profiling_unavailable() {
#ifdef ROUTELAB_KINETO
  return "";
#else
  return "kernel profiles need LibTorch 2.4 or later (PyTorch's Kineto profiler); this build has " TORCH_VERSION;
#endif
}

#ifdef ROUTELAB_KINETO
namespace {

/// Whether an event is a user scope's range (at::RecordFunction's user scopes: the parts), on the host or drawn over
/// the kernels it enclosed on a GPU's timeline (Kineto's gpu_user_annotation): a span over work, not work itself.
bool is_annotation(const torch::autograd::profiler::KinetoEvent& e) {
  const auto type = e.activityType();
  return type == static_cast<std::uint8_t>(libkineto::ActivityType::USER_ANNOTATION) ||
         type == static_cast<std::uint8_t>(libkineto::ActivityType::GPU_USER_ANNOTATION);
}

/// The host's part spans, backward nodes and node-making ops of a recording, and the work to attribute: on a GPU
/// each kernel's time at the op that launched it (the op Kineto links it to: the innermost one open at the launch),
/// on the CPU each top-level op's time (as OpClassProfiler counts them).
PartAttribution attribute_parts(const std::vector<torch::autograd::profiler::KinetoEvent>& recorded, bool cuda) {
  PartAttribution parts;
  std::unordered_map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> launched_by;  // op -> (thread, start)
  struct OpSpan {
    std::uint64_t start = 0, end = 0;
    std::string name;
  };
  std::map<std::uint64_t, std::vector<OpSpan>> ops;  // thread -> spans
  const auto prefix = std::string_view(ROUTELAB_PART_PREFIX);
  for (const auto& e : recorded) {
    // PyTorch's own events (ops, record_function scopes) link to nothing; the CUDA runtime's calls, also on the CPU,
    // link to the op that made them (as kernels do), and their own correlation ids are another count: left out, as
    // PyTorch's profiler.py pairs kernels with ops.
    if (e.deviceType() != c10::DeviceType::CPU || e.isHiddenEvent() || e.linkedCorrelationId() != 0) continue;
    const auto thread = e.startThreadId(), start = e.startNs(), end = e.endNs();
    const auto scope = e.scope();
    if (scope == static_cast<std::uint8_t>(at::RecordScope::USER_SCOPE)) {
      if (const auto name = e.name(); name.rfind(prefix, 0) == 0)
        parts.part(thread, start, end, name.substr(prefix.size()));
    } else if (scope == static_cast<std::uint8_t>(at::RecordScope::BACKWARD_FUNCTION)) {
      parts.backward(thread, start, end, e.sequenceNr(), e.fwdThreadId());
    } else if (e.name().rfind("autograd::engine::evaluate_function", 0) == 0) {
      parts.evaluation(thread, start, end);
    } else {
      parts.op(thread, start, e.sequenceNr());
      ops[thread].push_back({start, end, e.name()});
    }
    if (e.correlationId() != 0) launched_by[e.correlationId()] = {thread, start};
  }
  if (!cuda) {  // the CPU's work: ops inside no other op of their thread
    for (auto& [thread, spans] : ops) {
      std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) {
        return a.start != b.start ? a.start < b.start : a.end > b.end;
      });
      std::uint64_t open_until = 0;
      bool any = false;
      for (const auto& s : spans) {
        if (any && s.start < open_until) continue;  // nested in the last top-level op
        parts.work(thread, s.start, static_cast<double>(s.end - s.start) / 1e6, s.name);
        open_until = s.end;
        any = true;
      }
    }
    return parts;
  }
  for (const auto& e : recorded) {
    if (e.deviceType() != c10::DeviceType::CUDA || e.isHiddenEvent() || is_annotation(e) || e.endNs() < e.startNs())
      continue;
    const double ms = static_cast<double>(e.endNs() - e.startNs()) / 1e6;
    auto name = kernel_display_name(e.name());
    if (const auto it = launched_by.find(e.linkedCorrelationId()); it != launched_by.end())
      parts.work(it->second.first, it->second.second, ms, std::move(name));
    else
      parts.unlinked(ms, std::move(name));
  }
  return parts;
}

}  // namespace
#endif

struct KernelProfiler::State {
  bool cuda = false;
  bool active = false;
  std::chrono::steady_clock::time_point begin;
};

namespace {
std::atomic<bool> g_kernel_profiler_live{false};
}  // namespace

KernelProfiler::KernelProfiler(bool cuda) : state_(std::make_unique<State>()) {
  if (const auto why = kernel_profiling_unavailable(); !why.empty()) throw ConfigError(why);
  if (g_kernel_profiler_live.exchange(true))
    throw ConfigError("kernel profile: another profile is already being recorded in this process");
  state_->cuda = cuda;
#ifdef ROUTELAB_KINETO
  namespace prof = torch::autograd::profiler;
  try {
    const prof::ProfilerConfig config(prof::ProfilerState::KINETO);
    const std::set<prof::ActivityType> activities =
        cuda ? std::set<prof::ActivityType>{prof::ActivityType::CPU, prof::ActivityType::CUDA}
             : std::set<prof::ActivityType>{prof::ActivityType::CPU};
    prof::prepareProfiler(config, activities);
    prof::enableProfiler(config, activities);
  } catch (const c10::Error& e) {
    g_kernel_profiler_live = false;
    throw ConfigError(std::string("kernel profile: PyTorch's profiler did not start: ") + e.what_without_backtrace());
  }
#endif
  state_->active = true;
  state_->begin = std::chrono::steady_clock::now();
}

KernelProfiler::~KernelProfiler() {
  if (!state_->active) return;
  try {
    stop();
  } catch (...) {  // a destructor reports nothing; stop() already released the profiler
  }
}

KernelProfile KernelProfiler::stop(const std::string& trace_path) {
  if (!state_->active) throw ConfigError("kernel profile: stopped twice");
  state_->active = false;
  struct Release {  // however stop() ends, the next recording may start
    ~Release() { g_kernel_profiler_live = false; }
  } release;
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - state_->begin).count();
  std::vector<KernelEvent> events;
  std::map<std::string, PartTime> parts;
  std::map<std::string, std::map<std::string, PartTime>> part_pieces;
#ifdef ROUTELAB_KINETO
  std::unique_ptr<torch::autograd::profiler::ProfilerResult> result;
  try {
    result = torch::autograd::profiler::disableProfiler();
  } catch (const c10::Error& e) {
    throw ConfigError(std::string("kernel profile: PyTorch's profiler did not stop: ") + e.what_without_backtrace());
  }
  const auto wanted = state_->cuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  for (const auto& e : result->events()) {
    if (e.deviceType() != wanted || e.isHiddenEvent() || is_annotation(e)) continue;
    events.push_back({e.name(), e.startNs(), e.endNs()});
  }
  const auto attribution = attribute_parts(result->events(), state_->cuda);
  parts = attribution.parts();
  part_pieces = attribution.pieces();
  if (!trace_path.empty()) {
    try {
      result->save(trace_path);
    } catch (const c10::Error& e) {
      throw ConfigError("kernel profile: cannot write the trace '" + trace_path + "': " + e.what_without_backtrace());
    }
  }
#else
  (void)trace_path;
#endif
  auto profile = KernelProfile::from_events(events, wall_ms);
  profile.parts = std::move(parts);
  profile.part_pieces = std::move(part_pieces);
  return profile;
}

}  // namespace routelab
