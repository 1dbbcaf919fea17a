// Readiness comes from a post-hook on each parameter's gradient accumulator (the AccumulateGrad node, kept alive
// here so the hook stays): it runs after the gradient of this backward pass was added into .grad.
#include "core/dist/grad_sync.h"

#include <chrono>
#include <mutex>

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "core/util/errors.h"

namespace routelab {

struct GradientSync::State {
  struct Bucket {
    std::vector<std::size_t> params;  ///< indices into State::params
    std::int64_t numel = 0;
    torch::Tensor buffer;             ///< flat, the gradients' dtype and device
    std::size_t waiting = 0;          ///< parameters whose gradient this pass has not produced yet
    std::unique_ptr<PendingCollective> pending;
    bool sent = false;
  };
  std::shared_ptr<Collective> collective;
  std::vector<torch::Tensor> params;
  std::vector<std::size_t> bucket_of;  ///< per parameter
  std::vector<Bucket> buckets;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
  bool overlap = true;
  std::mutex mutex;
  bool armed = false;
  std::size_t next_to_send = 0;  ///< buckets go out in index order on every rank
  double wait_s = 0;
  /// Parameters no rank is known to have reached (every rank's list is the same: it follows the summed flags), and
  /// whether this rank sent zeros for each of them in this step.
  std::vector<std::size_t> unreached;
  std::vector<bool> zero_filled;

  /// Copies the bucket's gradients into its buffer and starts its all-reduce (under `mutex`).
  void send(Bucket& b) {
    std::vector<torch::Tensor> flat;
    for (const auto i : b.params) {
      auto& p = params[i];
      if (!p.grad().defined()) {  // not reached on this rank yet
        p.mutable_grad() = torch::zeros_like(p);
        zero_filled[i] = true;
      }
      flat.push_back(p.grad().reshape({-1}));
    }
    torch::cat_out(b.buffer, flat);
    b.pending = collective->all_reduce_sum_async(b.buffer);
    b.sent = true;
  }

  /// Sends, in order, every bucket whose gradients are all in (under `mutex`).
  void send_ready() {
    while (next_to_send < buckets.size() && buckets[next_to_send].waiting == 0) send(buckets[next_to_send++]);
  }

  void ready(std::size_t param) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!armed) return;
    auto& b = buckets[bucket_of[param]];
    if (b.waiting > 0) --b.waiting;
    if (overlap) send_ready();
  }
};

namespace {

class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(std::weak_ptr<GradientSync::State> state, std::size_t param) : state_(std::move(state)), param_(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    if (auto state = state_.lock()) state->ready(param_);
    return outputs;
  }

 private:
  std::weak_ptr<GradientSync::State> state_;
  std::size_t param_;
};

}  // namespace

GradientSync::GradientSync(std::shared_ptr<Collective> collective, std::vector<torch::Tensor> params, double bucket_mb,
                           bool overlap)
    : state_(std::make_shared<State>()) {
  auto& s = *state_;
  s.collective = std::move(collective);
  s.params = std::move(params);
  s.overlap = overlap;
  s.bucket_of.resize(s.params.size());
  const auto cap = static_cast<std::int64_t>(bucket_mb * 1024 * 1024);
  for (std::size_t k = s.params.size(); k-- > 0;) {  // last parameters first: their gradients come first
    const auto& p = s.params[k];
    const auto bytes = p.numel() * static_cast<std::int64_t>(p.element_size());
    const bool fits = !s.buckets.empty() && s.buckets.back().numel * p.element_size() + bytes <= cap &&
                      s.buckets.back().buffer.scalar_type() == p.scalar_type() &&
                      s.buckets.back().buffer.device() == p.device();
    if (!fits) {
      s.buckets.emplace_back();
      s.buckets.back().buffer = torch::empty({0}, p.options());
    }
    auto& b = s.buckets.back();
    b.params.push_back(k);
    b.numel += p.numel();
    s.bucket_of[k] = s.buckets.size() - 1;
  }
  for (auto& b : s.buckets) b.buffer = torch::empty({b.numel}, b.buffer.options());
  for (std::size_t k = 0; k < s.params.size(); ++k) s.unreached.push_back(k);  // until the first step's flags say
  s.zero_filled.assign(s.params.size(), false);
  for (std::size_t k = 0; k < s.params.size(); ++k) {
    auto accumulator = torch::autograd::impl::grad_accumulator(s.params[k]);
    if (!accumulator) throw Error("GradientSync: parameter " + std::to_string(k) + " has no gradient accumulator");
    accumulator->add_post_hook(std::make_unique<ReadyHook>(state_, k));
    s.accumulators.push_back(std::move(accumulator));
  }
}

GradientSync::~GradientSync() = default;

void GradientSync::arm() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto& s = *state_;
  for (auto& b : s.buckets) {
    b.waiting = b.params.size();
    b.pending.reset();
    b.sent = false;
  }
  s.next_to_send = 0;
  s.zero_filled.assign(s.params.size(), false);
  s.armed = true;
}

void GradientSync::finish() {
  auto& s = *state_;
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.armed = false;
    while (s.next_to_send < s.buckets.size()) s.send(s.buckets[s.next_to_send++]);
  }
  for (auto& b : s.buckets) {
    b.pending->wait();
    b.pending.reset();
    std::int64_t offset = 0;
    for (const auto i : b.params) {
      auto grad = s.params[i].grad();
      grad.copy_(b.buffer.narrow(0, offset, grad.numel()).view_as(grad));
      offset += grad.numel();
    }
  }
  if (!s.unreached.empty()) {
    // Which of the parameters not reached so far some rank reached in this step (one small sum): the others lose the
    // zeros sent for them, as in one process.
    std::vector<float> own;
    for (const auto i : s.unreached) own.push_back(s.zero_filled[i] ? 0.0f : 1.0f);
    auto flags = torch::tensor(own).to(s.params.front().device());
    s.collective->all_reduce_sum(flags);
    const auto summed = flags.to(torch::kCPU).contiguous();
    const float* reached = summed.data_ptr<float>();
    std::vector<std::size_t> still;
    for (std::size_t j = 0; j < s.unreached.size(); ++j) {
      if (reached[j] > 0.0f) continue;
      s.params[s.unreached[j]].mutable_grad() = torch::Tensor();
      still.push_back(s.unreached[j]);
    }
    s.unreached = std::move(still);
  }
  s.wait_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int GradientSync::buckets() const { return static_cast<int>(state_->buckets.size()); }
double GradientSync::last_wait_s() const { return state_->wait_s; }

}  // namespace routelab
