// The forward captures and replays through the recorder the training step's CUDA graph uses (core/train/
// graph_recorder.h), keeping the captured input and output alive. Its default recorder needs a CUDA LibTorch.
#include "core/inference/cuda_graph_forward.h"

#include <sstream>

#include <torch/version.h>

#include "core/models/blocks/routing.h"
#include "core/util/errors.h"
#include "core/util/logging.h"

namespace routelab {
namespace {

std::unique_ptr<GraphRecorder> default_recorder(LanguageModel& model) {
  if (!cuda_graphs_available())
    throw ConfigError("CUDA graph forward: this build's LibTorch (" TORCH_VERSION
                      ") has no CUDA; build against a CUDA LibTorch (packaging/build.sh --torch pip)");
  const auto params = model.parameters();
  if (params.empty() || !params.front().is_cuda())
    throw ConfigError("CUDA graph forward: the model is on " +
                      (params.empty() ? std::string("no device") : params.front().device().str()) +
                      "; CUDA graphs need a GPU");
  return cuda_graph_recorder(params.front().device().index());
}

}  // namespace

CudaGraphForward::CudaGraphForward(LanguageModel& model, int eager_calls, std::unique_ptr<GraphRecorder> recorder)
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
