// FlopCounter and OpClassProfiler over ATen's RecordFunction callbacks (LibTorch 1.13 and 2.x: both take plain
// function pointers, so the state the callbacks update lives in thread-local / static storage here).
#include "core/cost/flop_counter.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "core/models/blocks/attention.h"
#include "core/models/blocks/part_scope.h"
#include "core/util/errors.h"

namespace routelab {

struct FlopCounter::State {
  double flops = 0;
  std::int64_t calls = 0;
  std::map<std::string, double> by_op;
  bool active = false;
};

namespace {

using Clock = std::chrono::steady_clock;

std::string_view op_name(const at::RecordFunction& fn) {
  const char* name = fn.name();
  return name ? std::string_view(name) : std::string_view();
}

std::vector<std::int64_t> shape_of(const c10::IValue& v) {
  if (!v.isTensor()) return {};
  const auto& t = v.toTensor();
  if (!t.defined()) return {};
  return t.sizes().vec();
}

double product(const std::vector<std::int64_t>& s) {
  double p = 1;
  for (const auto v : s) p *= static_cast<double>(v);
  return p;
}

/// Multiply-adds of a counted op from its schema-ordered inputs; negative when the op is not counted.
double multiply_adds(std::string_view name, c10::ArrayRef<const c10::IValue> in) {
  const auto at = [&](std::size_t i) { return i < in.size() ? shape_of(in[i]) : std::vector<std::int64_t>{}; };
  const auto mat = [&](std::size_t a, std::size_t b) {  // (n, k) x (k, m), optionally batched (b, n, k) x (b, k, m)
    const auto x = at(a), y = at(b);
    if (x.size() == 2 && y.size() == 2) return static_cast<double>(x[0]) * x[1] * y[1];
    if (x.size() == 3 && y.size() == 3) return static_cast<double>(x[0]) * x[1] * x[2] * y[2];
    if (x.size() == 2 && y.size() == 1) return static_cast<double>(x[0]) * x[1];  // mv
    if (x.size() == 1 && y.size() == 1) return static_cast<double>(x[0]);          // dot
    return 0.0;
  };
  if (name == "aten::mm" || name == "aten::bmm" || name == "aten::mv" || name == "aten::dot" || name == "aten::vdot")
    return mat(0, 1);
  if (name == "aten::addmm" || name == "aten::baddbmm" || name == "aten::addmv") return mat(1, 2);
  // The custom CPU attention kernel states its own multiply-adds (its products bypass the ops above).
  if (name == kCpuAttentionEvent) return !in.empty() && in[0].isDouble() ? in[0].toDouble() : 0.0;
  // LibTorch 2.x fused attention kernels: q (B, H, Tq, hd), k (B, Hkv, Tk, hd); scores and weighted values over
  // the full (Tq, Tk) rectangle, as the square convention of flops.h.
  if (name.rfind("aten::_scaled_dot_product_", 0) == 0 || name == "aten::_flash_attention_forward" ||
      name == "aten::_efficient_attention_forward") {
    const auto q = at(0), k = at(1);
    if (q.size() == 4 && k.size() == 4) return 2.0 * product(q) * static_cast<double>(k[2]);
    return 0.0;
  }
  return -1.0;
}

// Per thread: the live counters (innermost last), the registered callback and the nesting depth inside counted ops.
thread_local std::vector<FlopCounter::State*> t_counters;
thread_local at::CallbackHandle t_handle = 0;
thread_local int t_counted_depth = 0;
thread_local int t_saved_threads = 0;

struct CountedMark : at::ObserverContext {};

std::unique_ptr<at::ObserverContext> on_counter_start(const at::RecordFunction& fn) {
  const auto name = op_name(fn);
  const double macs = multiply_adds(name, fn.inputs());
  if (macs < 0) return nullptr;
  if (t_counted_depth == 0) {
    const std::string key(name);
    for (auto* c : t_counters) {
      c->flops += 2.0 * macs;
      c->by_op[key] += 2.0 * macs;
      ++c->calls;
    }
  }
  ++t_counted_depth;
  return std::make_unique<CountedMark>();
}

void on_counter_end(const at::RecordFunction& /*fn*/, at::ObserverContext* ctx) {
  if (ctx) --t_counted_depth;
}

}  // namespace

FlopCounter::FlopCounter() : state_(std::make_unique<State>()) {
  if (t_counters.empty()) {
    t_saved_threads = at::get_num_threads();
    at::set_num_threads(1);
    t_counted_depth = 0;
    t_handle = at::addThreadLocalCallback(at::RecordFunctionCallback(&on_counter_start, &on_counter_end)
                                              .needsInputs(true)
                                              .scopes({at::RecordScope::FUNCTION}));
  }
  t_counters.push_back(state_.get());
  state_->active = true;
}

FlopCounter::~FlopCounter() { stop(); }

void FlopCounter::stop() {
  if (!state_->active) return;
  state_->active = false;
  t_counters.erase(std::remove(t_counters.begin(), t_counters.end(), state_.get()), t_counters.end());
  if (t_counters.empty()) {
    at::removeCallback(t_handle);
    t_handle = 0;
    at::set_num_threads(std::max(1, t_saved_threads));
  }
}

double FlopCounter::flops() const { return state_->flops; }
const std::map<std::string, double>& FlopCounter::flops_by_op() const { return state_->by_op; }
std::int64_t FlopCounter::calls() const { return state_->calls; }

// ---------------------------------------------------------------------------------------------------------------

struct OpClassProfiler::State {
  std::thread::id thread;
  Clock::time_point begin, end;
  std::map<std::string, double> ms;
  std::map<std::string, OpTally> by_name;
  std::int64_t ops = 0;
  int depth = 0;
  PartAttribution parts;  ///< part spans, backward nodes, node-creating ops and top-level op times (ns from begin)
  at::CallbackHandle handle = 0;
  bool active = false;
};

namespace {

std::mutex g_profiler_mutex;
std::atomic<OpClassProfiler::State*> g_profiler{nullptr};  // the one live profiler; set under the mutex

const char* op_class(std::string_view name) {
  if (name.rfind("aten::", 0) == 0) name.remove_prefix(6);
  static const std::vector<std::string_view> matmul = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "mv",
                                                       "addmv", "dot", "einsum"};
  static const std::vector<std::string_view> index = {
      "gather", "scatter", "scatter_add", "index_select", "index_add", "index_copy", "index_fill", "index",
      "index_put_", "sort", "topk", "nonzero", "masked_select", "masked_fill", "masked_fill_", "where", "cat",
      "bincount", "randperm", "argmax", "one_hot", "index_add_", "index_copy_", "index_fill_", "scatter_"};
  static const std::vector<std::string_view> copy = {
      "copy_", "to", "_to_copy", "contiguous", "clone", "empty", "empty_like", "zeros", "zeros_like", "full",
      "full_like", "ones", "ones_like", "fill_", "zero_", "reshape", "view", "expand", "transpose", "narrow",
      "select", "slice", "as_strided", "split_with_sizes", "split", "chunk", "unsqueeze", "squeeze", "t", "permute",
      "detach", "_unsafe_view", "empty_strided", "resize_", "lift_fresh", "alias", "arange", "item",
      "_local_scalar_dense"};
  const auto in = [&](const std::vector<std::string_view>& set) {
    return std::find(set.begin(), set.end(), name) != set.end();
  };
  if (name == kCpuAttentionEvent || name == kCpuAttentionBackwardEvent)
    return "attention (the custom CPU kernel, forward and backward)";
  if (in(matmul) || name.rfind("_scaled_dot_product_", 0) == 0) return "matmul (projections, MLP, routers, head)";
  if (in(index)) return "routing index ops (gather/scatter/index/sort/where/cat)";
  if (in(copy)) return "copies, views, allocation";
  return "elementwise, softmax, norms, reductions";
}

struct TimedOp : at::ObserverContext {
  Clock::time_point start;
  const char* cls = nullptr;
  std::string name;  ///< a top-level op's
  /// A wrapper whose inner ops are the top level: the autograd engine's evaluation, a backward node, a part
  bool transparent = false;
  std::string part;  ///< a part's name
  bool node = false;  ///< a backward node, made by the op numbered `seq` (-1: none, gradient accumulation)
  bool evaluation = false;  ///< the autograd engine's evaluation of a node
  std::int64_t seq = -1;
  std::uint64_t forward_thread = 0;
};

std::uint64_t since(const OpClassProfiler::State& p, Clock::time_point t) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t - p.begin).count());
}

std::unique_ptr<at::ObserverContext> on_profiler_start(const at::RecordFunction& fn) {
  auto* p = g_profiler.load();
  if (!p || std::this_thread::get_id() != p->thread || at::in_parallel_region()) return nullptr;
  auto ctx = std::make_unique<TimedOp>();
  const auto name = op_name(fn);
  ctx->start = Clock::now();
  // The backward's "autograd::engine::evaluate_function: MmBackward0" and its node "MmBackward0" wrap the products
  // and the rest it runs; a part wraps ops of the forward.
  if (fn.scope() == at::RecordScope::USER_SCOPE) {
    ctx->transparent = true;
    if (name.rfind(ROUTELAB_PART_PREFIX, 0) == 0) ctx->part = name.substr(std::strlen(ROUTELAB_PART_PREFIX));
    return ctx;
  }
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    ctx->transparent = true;
    ctx->node = true;
    ctx->seq = fn.seqNr();
    ctx->forward_thread = fn.forwardThreadId();
    return ctx;
  }
  if (name.rfind("autograd::engine::", 0) == 0) {
    ctx->transparent = true;
    ctx->evaluation = true;
    return ctx;
  }
  p->parts.op(fn.threadId(), since(*p, ctx->start), fn.seqNr());
  if (p->depth++ == 0) {
    ++p->ops;
    ctx->cls = op_class(name);
    ctx->name = name;
  }
  return ctx;
}

void on_profiler_end(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  auto* p = g_profiler.load();
  if (!p || !ctx) return;
  auto* timed = static_cast<TimedOp*>(ctx);
  const auto end = Clock::now();
  if (timed->transparent) {
    if (!timed->part.empty()) p->parts.part(fn.threadId(), since(*p, timed->start), since(*p, end), timed->part);
    if (timed->evaluation) p->parts.evaluation(fn.threadId(), since(*p, timed->start), since(*p, end));
    if (timed->node)
      p->parts.backward(fn.threadId(), since(*p, timed->start), since(*p, end), timed->seq, timed->forward_thread);
    return;
  }
  --p->depth;
  if (!timed->cls) return;
  const auto ms = std::chrono::duration<double, std::milli>(end - timed->start).count();
  p->ms[timed->cls] += ms;
  p->parts.work(fn.threadId(), since(*p, timed->start), ms, timed->name);
  auto& tally = p->by_name[timed->name];
  ++tally.calls;
  tally.ms += ms;
}

}  // namespace

OpClassProfiler::OpClassProfiler() : state_(std::make_unique<State>()) {
  std::lock_guard lock(g_profiler_mutex);
  if (g_profiler.load()) throw ConfigError("op profiler: another profile is already being recorded in this process");
  state_->thread = std::this_thread::get_id();
  state_->begin = Clock::now();  // before any callback: span times count from here
  g_profiler = state_.get();
  state_->handle = at::addGlobalCallback(
      at::RecordFunctionCallback(&on_profiler_start, &on_profiler_end)
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION, at::RecordScope::USER_SCOPE}));
  state_->active = true;
}

OpClassProfiler::~OpClassProfiler() { stop(); }

void OpClassProfiler::stop() {
  if (!state_->active) return;
  state_->end = Clock::now();
  std::lock_guard lock(g_profiler_mutex);
  at::removeCallback(state_->handle);
  g_profiler = nullptr;
  state_->active = false;
}

std::map<std::string, double> OpClassProfiler::classes_ms() const {
  auto out = state_->ms;
  double sum = 0;
  for (const auto& [k, v] : out) sum += v;
  out["outside ops (host code)"] = std::max(0.0, wall_ms() - sum);
  return out;
}

std::int64_t OpClassProfiler::ops() const { return state_->ops; }
const std::map<std::string, OpTally>& OpClassProfiler::ops_by_name() const { return state_->by_name; }
std::map<std::string, PartTime> OpClassProfiler::parts_ms() const { return state_->parts.parts(); }

std::map<std::string, std::map<std::string, PartTime>> OpClassProfiler::part_pieces() const {
  return state_->parts.pieces();
}

double OpClassProfiler::wall_ms() const {
  const auto end = state_->active ? Clock::now() : state_->end;
  return std::chrono::duration<double, std::milli>(end - state_->begin).count();
}

}  // namespace routelab
