// The CUDA recorder captures and replays as CudaGraphStep does (core/train/cuda_graph_step.cpp: PyTorch's
// whole-network recipe): warm up on a side stream, capture there with the autocast cache off, keep the captured input
// and output alive. It is compiled only against a CUDA LibTorch (ROUTELAB_WITH_CUDA); the rest in every build.
#include "core/inference/cuda_graph_forward.h"

#include <sstream>

#include <torch/version.h>

#include "core/models/blocks/routing.h"
#include "core/util/cuda_build.h"
#include "core/util/errors.h"
#include "core/util/logging.h"

#if ROUTELAB_WITH_CUDA
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace routelab {
namespace {

#if ROUTELAB_WITH_CUDA

class CudaGraphRecorder : public ForwardRecorder {
 public:
  explicit CudaGraphRecorder(c10::DeviceIndex device)
      : side_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)) {}

  void warm_up(const std::function<void()>& body) override {
    c10::cuda::device_synchronize();
    const c10::cuda::CUDAStreamGuard on_side(side_);
    body();
    side_.synchronize();
  }

  void capture(const std::function<void()>& body) override {
    c10::cuda::device_synchronize();
    const c10::cuda::CUDAStreamGuard on_side(side_);
    // Casts cached during capture would live in the graph's pool and be reused outside it (PyTorch's advice).
    const bool cache = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);
    graph_ = std::make_unique<at::cuda::CUDAGraph>();
    graph_->capture_begin();
    try {
      body();
      graph_->capture_end();
    } catch (...) {
      try {
        graph_->capture_end();  // ends the stream's capture so the stream stays usable
      } catch (const std::exception&) {
      }
      at::autocast::set_autocast_cache_enabled(cache);
      graph_.reset();
      throw;
    }
    at::autocast::set_autocast_cache_enabled(cache);
    side_.synchronize();
  }

  void replay() override { graph_->replay(); }
  void release() override { graph_.reset(); }

 private:
  c10::cuda::CUDAStream side_;  ///< warm-up and capture run here, never on the legacy default stream
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
};

#endif

std::unique_ptr<ForwardRecorder> default_recorder(LanguageModel& model) {
#if ROUTELAB_WITH_CUDA
  const auto params = model.parameters();
  if (params.empty() || !params.front().is_cuda())
    throw ConfigError("CUDA graph forward: the model is on " +
                      (params.empty() ? std::string("no device") : params.front().device().str()) +
                      "; CUDA graphs need a GPU");
  return std::make_unique<CudaGraphRecorder>(params.front().device().index());
#else
  (void)model;
  throw ConfigError("CUDA graph forward: this build's LibTorch (" TORCH_VERSION
                    ") has no CUDA; build against a CUDA LibTorch (packaging/build.sh --torch pip)");
#endif
}

}  // namespace

CudaGraphForward::CudaGraphForward(LanguageModel& model, int eager_calls, std::unique_ptr<ForwardRecorder> recorder)
    : model_(model), eager_calls_(std::max(1, eager_calls)),
      recorder_(recorder ? std::move(recorder) : default_recorder(model)) {}

CudaGraphForward::~CudaGraphForward() = default;

bool CudaGraphForward::captured() const { return captured_; }

int CudaGraphForward::captures() const { return captures_; }

const std::string& CudaGraphForward::eager_reason() const { return eager_reason_; }

void CudaGraphForward::release() {
  output_ = ModelOutput();
  recorder_->release();
  captured_ = false;
}

torch::Tensor CudaGraphForward::run(const torch::Tensor& tokens) {
  if (model_.is_training())
    throw ConfigError("CUDA graph forward: the model is in training mode; its eval-mode forward is what is captured "
                      "(train.cuda_graph captures training steps)");
  const torch::NoGradGuard no_grad;
  if (!eager_reason_.empty()) return model_.forward(tokens).logits;
  if (!captured_ && eager_done_ < eager_calls_) {
    torch::Tensor logits;
    recorder_->warm_up([&] { logits = model_.forward(tokens).logits; });
    ++eager_done_;
    return logits;
  }
  if (!captured_) {
    input_ = tokens.clone();
    try {
      // Records the forward without (on a GPU) running it: the replay below runs it. A routed model's counts are read
      // after each replay (check_shapes).
      recorder_->capture([this] {
        const DeferredTraceReadback on_device;
        output_ = model_.forward(input_);
      });
    } catch (const std::exception& e) {
      output_ = ModelOutput();
      eager_reason_ = std::string("the forward could not be captured as a CUDA graph: ") + e.what();
      logger("core")->warn("{}; it runs eagerly", eager_reason_);
      return model_.forward(tokens).logits;
    }
    captured_ = true;
    ++captures_;
  } else {
    if (tokens.sizes() != input_.sizes() || tokens.device() != input_.device()) {
      std::ostringstream out;
      out << "CUDA graph forward: the captured forward takes tokens of " << input_.sizes() << " on "
          << input_.device() << "; these are " << tokens.sizes() << " on " << tokens.device();
      throw ConfigError(out.str());
    }
    input_.copy_(tokens, /*non_blocking=*/true);
  }
  recorder_->replay();
  ShapeCheck shapes;
  if (output_.check_shapes) shapes = output_.check_shapes();  // one wait: the routing replayed
  if (shapes.overflowed) {
    // The batch routed more rows than the captured shapes hold: its forward runs again counting exactly (which sizes
    // the rows afresh), and the next call captures at the new shapes.
    release();
    logger("core")->debug("CUDA graph forward: the batch overflowed the captured routed shapes; it ran eagerly and "
                          "the forward is captured again");
    const ExactRoutedCounts exact;
    return model_.forward(tokens).logits;
  }
  if (shapes.resized) {
    auto logits = output_.logits.clone();
    release();
    return logits;
  }
  return output_.logits;
}

}  // namespace routelab
