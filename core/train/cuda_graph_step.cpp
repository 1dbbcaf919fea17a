// Capture and replay follow PyTorch's whole-network recipe (torch.cuda.graph) through the CUDA graph recorder the
// eval forward's graph uses too (core/train/graph_recorder.h: warm-up and capture on a side stream, the autocast
// cache off while capturing); the step keeps the captured inputs and outputs alive and copies new data into the inputs
// before each replay. The CUDA part is compiled only against a CUDA LibTorch (ROUTELAB_WITH_CUDA).
#include "core/train/cuda_graph_step.h"

#include <sstream>

#include <torch/version.h>

#include "core/train/optimizer.h"
#include "core/util/cuda_build.h"
#include "core/util/errors.h"
#include "core/util/logging.h"

namespace routelab {

#if ROUTELAB_WITH_CUDA

namespace {

std::string shape_text(const torch::Tensor& t) {
  if (!t.defined()) return "none";
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

/// The batch must look like the captured one: same shapes, and a loss mask exactly when the captured step had one.
void check_same_shape(const Batch& captured, const Batch& batch) {
  const auto same = [](const torch::Tensor& a, const torch::Tensor& b) {
    return a.defined() == b.defined() && (!a.defined() || (a.sizes() == b.sizes() && a.device() == b.device()));
  };
  if (!same(captured.input, batch.input) || !same(captured.target, batch.target) ||
      !same(captured.loss_mask, batch.loss_mask))
    throw ConfigError("train.cuda_graph: the captured step takes batches of " + shape_text(captured.input) +
                      " (loss mask " + shape_text(captured.loss_mask) + "); this batch is " + shape_text(batch.input) +
                      " (loss mask " + shape_text(batch.loss_mask) + ")");
}

}  // namespace

struct CudaGraphStep::Impl {
  Impl(LanguageModel& m, MultiTensorAdamW& o, double clip, bool b, std::int64_t micro, int eager,
       std::unique_ptr<GraphRecorder> r)
      : model(m), optimizer(o), grad_clip(clip), bf16(b), micro_batches(micro), eager_steps(eager),
        recorder(std::move(r)) {}

  LanguageModel& model;
  MultiTensorAdamW& optimizer;
  double grad_clip;
  bool bf16;
  std::int64_t micro_batches;
  int eager_steps;
  int eager_done = 0;
  std::unique_ptr<GraphRecorder> recorder;
  bool captured = false;
  int captures = 0;
  Batch inputs;        ///< the captured step's inputs: each replay reads what was copied into them
  StepResult outputs;  ///< the captured step's outputs, overwritten by each replay

  StepResult eager_step(const Batch& batch, bool trace) {
    StepResult r;
    recorder->warm_up([&] { r = train_step(model, optimizer, batch, grad_clip, bf16, trace, micro_batches); });
    ++eager_done;
    return r;
  }

  void capture(const Batch& batch) {
    inputs = {batch.input.clone(), batch.target.clone(),
              batch.loss_mask.defined() ? batch.loss_mask.clone() : torch::Tensor()};
    try {
      recorder->capture([this] {
        // The trace's data-dependent values, and a routed model's counts (ModelOutput::check_shapes), are read after
        // each replay.
        const DeferredTraceReadback on_device;
        outputs = train_step(model, optimizer, inputs, grad_clip, bf16, /*trace=*/true, micro_batches);
      });
    } catch (const std::exception& e) {
      throw ConfigError(std::string("train.cuda_graph: the training step could not be captured as a CUDA graph: ") +
                        e.what());
    }
    captured = true;
    ++captures;
  }

  /// Drops the graph and its outputs (its memory pool with them); the next call captures again.
  void release() {
    outputs = StepResult();
    recorder->release();
    captured = false;
  }
};

CudaGraphStep::CudaGraphStep(LanguageModel& model, MultiTensorAdamW& optimizer, double grad_clip, bool bf16,
                             std::int64_t micro_batches, int eager_steps) {
  const auto params = model.parameters();
  if (params.empty() || !params.front().is_cuda())
    throw ConfigError("train.cuda_graph: the model is on " +
                      (params.empty() ? std::string("no device") : params.front().device().str()) +
                      "; CUDA graphs need run.device=cuda");
  optimizer.keep_learning_rates_on_device();  // throws without the fused kernel
  impl_ = std::make_unique<Impl>(model, optimizer, grad_clip, bf16, micro_batches, std::max(1, eager_steps),
                                 cuda_graph_recorder(params.front().device().index()));
}

CudaGraphStep::~CudaGraphStep() = default;

bool CudaGraphStep::captured() const { return impl_->captured; }

int CudaGraphStep::captures() const { return impl_->captures; }

StepResult CudaGraphStep::run(const Batch& batch, bool trace) {
  auto& s = *impl_;
  if (!batch.input.is_cuda())
    throw ConfigError("train.cuda_graph: the batch is on " + batch.input.device().str() + "; the model is on a GPU");
  s.optimizer.stage_learning_rates();
  if (!s.captured && s.eager_done < s.eager_steps) return s.eager_step(batch, trace);
  if (!s.captured) {
    // The capture records this step without running it (the optimizer counted it on the host); the replay below runs
    // it.
    s.capture(batch);
  } else {
    check_same_shape(s.inputs, batch);
    s.inputs.input.copy_(batch.input, /*non_blocking=*/true);
    s.inputs.target.copy_(batch.target, /*non_blocking=*/true);
    if (batch.loss_mask.defined()) s.inputs.loss_mask.copy_(batch.loss_mask, /*non_blocking=*/true);
    s.optimizer.count_replayed_step();
  }
  s.recorder->replay();
  ShapeCheck shapes;
  if (s.outputs.output.check_shapes) shapes = s.outputs.output.check_shapes();  // one wait: the routing replayed
  if (shapes.overflowed) {
    // This batch routed more rows than the captured shapes hold: the replay left the parameters as they were (its
    // update skipped on the overflow flag), so the step runs again eagerly, sized afresh, and the next call captures
    // the step at the new shapes.
    s.optimizer.count_replayed_step(-1);
    s.release();
    logger("core")->debug("train.cuda_graph: the batch overflowed the captured routed shapes; the step ran eagerly "
                          "and is captured again");
    return s.eager_step(batch, trace);
  }
  StepResult r;
  r.loss = s.outputs.loss.clone();
  r.aux_loss = s.outputs.aux_loss.clone();
  r.grad_norm = s.outputs.grad_norm.clone();
  if (trace) {
    // The replay rewrites the trace's tensors in place: copies of them, and the values left on the device read now.
    const auto& captured = s.outputs.output;
    r.output.trace = captured.trace;
    for (auto& t : r.output.trace) {
      if (t.gate.defined()) t.gate = t.gate.clone();
      if (t.decision.defined()) t.decision = t.decision.clone();
      for (auto& [key, v] : t.on_device) v = v.clone();
    }
    r.output.stats = captured.stats;
    for (const auto& [key, v] : captured.stats_on_device) r.output.stats_on_device[key] = v.clone();
    for (const auto& [key, v] : captured.token_data) r.output.token_data[key] = v.defined() ? v.clone() : v;
    resolve_on_device(r.output);
  }
  if (shapes.resized) {
    logger("core")->debug("train.cuda_graph: the routed shapes were resized; the step is captured again");
    s.release();
  }
  return r;
}

#else  // a LibTorch without CUDA

struct CudaGraphStep::Impl {};

CudaGraphStep::CudaGraphStep(LanguageModel&, MultiTensorAdamW&, double, bool, std::int64_t, int) {
  throw ConfigError("train.cuda_graph: this build's LibTorch (" TORCH_VERSION
                    ") has no CUDA; build against a CUDA LibTorch (packaging/build.sh --torch pip)");
}

CudaGraphStep::~CudaGraphStep() = default;

bool CudaGraphStep::captured() const { return false; }

int CudaGraphStep::captures() const { return 0; }

StepResult CudaGraphStep::run(const Batch&, bool) {
  throw ConfigError("train.cuda_graph: this build's LibTorch has no CUDA");
}

#endif

}  // namespace routelab
