// Capture and replay as CudaGraphStep does (core/train/cuda_graph_step.cpp: PyTorch's whole-network recipe): warm up
// on a side stream, capture there with the autocast cache off, keep the captured input and output alive, and copy
// new tokens into the input before each replay. The CUDA part is compiled only against a CUDA LibTorch.
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

#if ROUTELAB_WITH_CUDA

struct CudaGraphForward::Impl {
  Impl(LanguageModel& m, int eager, c10::cuda::CUDAStream stream) : model(m), eager_calls(eager), side(stream) {}

  LanguageModel& model;
  int eager_calls;
  int eager_done = 0;
  c10::cuda::CUDAStream side;  ///< warm-up and capture run here, never on the legacy default stream
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  int captures = 0;
  std::string eager_reason;
  torch::Tensor input;  ///< the captured forward's tokens: each replay reads what was copied into them
  ModelOutput output;   ///< the captured forward's output, overwritten by each replay

  /// A forward on the side stream, the host waiting for the work queued before and for it (warm-up, not timed work).
  torch::Tensor eager_forward(const torch::Tensor& tokens) {
    c10::cuda::device_synchronize();
    torch::Tensor logits;
    {
      c10::cuda::CUDAStreamGuard on_side(side);
      logits = model.forward(tokens).logits;
      side.synchronize();
    }
    ++eager_done;
    return logits;
  }

  /// Records the forward of `tokens` without running it; false (eager_reason set) where it cannot be captured.
  bool capture(const torch::Tensor& tokens) {
    input = tokens.clone();
    c10::cuda::device_synchronize();
    c10::cuda::CUDAStreamGuard on_side(side);
    // Casts cached during capture would live in the graph's pool and be reused outside it (PyTorch's advice).
    const bool cache = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_cache_enabled(false);
    graph = std::make_unique<at::cuda::CUDAGraph>();
    graph->capture_begin();
    try {
      const DeferredTraceReadback on_device;  // a routed model's counts are read after each replay (check_shapes)
      output = model.forward(input);
      graph->capture_end();
    } catch (const std::exception& e) {
      try {
        graph->capture_end();  // ends the stream's capture so the stream stays usable
      } catch (const std::exception&) {
      }
      at::autocast::set_autocast_cache_enabled(cache);
      release();
      eager_reason = std::string("the forward could not be captured as a CUDA graph: ") + e.what();
      logger("core")->warn("{}; it runs eagerly", eager_reason);
      return false;
    }
    at::autocast::set_autocast_cache_enabled(cache);
    side.synchronize();
    ++captures;
    return true;
  }

  /// Drops the graph and its output (its memory pool with them); the next call captures again.
  void release() {
    output = ModelOutput();
    graph.reset();
  }
};

CudaGraphForward::CudaGraphForward(LanguageModel& model, int eager_calls) {
  const auto params = model.parameters();
  if (params.empty() || !params.front().is_cuda())
    throw ConfigError("CUDA graph forward: the model is on " +
                      (params.empty() ? std::string("no device") : params.front().device().str()) +
                      "; CUDA graphs need a GPU");
  impl_ = std::make_unique<Impl>(model, std::max(1, eager_calls),
                                 c10::cuda::getStreamFromPool(/*isHighPriority=*/false, params.front().device().index()));
}

CudaGraphForward::~CudaGraphForward() = default;

bool CudaGraphForward::captured() const { return impl_->graph != nullptr; }

int CudaGraphForward::captures() const { return impl_->captures; }

const std::string& CudaGraphForward::eager_reason() const { return impl_->eager_reason; }

torch::Tensor CudaGraphForward::run(const torch::Tensor& tokens) {
  auto& s = *impl_;
  if (!tokens.is_cuda())
    throw ConfigError("CUDA graph forward: the tokens are on " + tokens.device().str() + "; the model is on a GPU");
  const torch::NoGradGuard no_grad;
  if (!s.eager_reason.empty()) return s.model.forward(tokens).logits;
  if (!s.graph && s.eager_done < s.eager_calls) return s.eager_forward(tokens);
  if (!s.graph) {
    if (!s.capture(tokens)) return s.model.forward(tokens).logits;
  } else {
    if (tokens.sizes() != s.input.sizes()) {
      std::ostringstream out;
      out << "CUDA graph forward: the captured forward takes tokens of " << s.input.sizes() << "; these are "
          << tokens.sizes();
      throw ConfigError(out.str());
    }
    s.input.copy_(tokens, /*non_blocking=*/true);
  }
  s.graph->replay();
  ShapeCheck shapes;
  if (s.output.check_shapes) shapes = s.output.check_shapes();  // one wait: the routing replayed
  if (shapes.overflowed) {
    // The batch routed more rows than the captured shapes hold: its forward runs again counting exactly (which sizes
    // the rows afresh), and the next call captures at the new shapes.
    s.release();
    logger("core")->debug("CUDA graph forward: the batch overflowed the captured routed shapes; it ran eagerly and "
                          "the forward is captured again");
    const ExactRoutedCounts exact;
    return s.model.forward(tokens).logits;
  }
  if (shapes.resized) {
    auto logits = s.output.logits.clone();
    s.release();
    return logits;
  }
  return s.output.logits;
}

#else  // a LibTorch without CUDA

struct CudaGraphForward::Impl {};

CudaGraphForward::CudaGraphForward(LanguageModel&, int) {
  throw ConfigError("CUDA graph forward: this build's LibTorch (" TORCH_VERSION
                    ") has no CUDA; build against a CUDA LibTorch (packaging/build.sh --torch pip)");
}

CudaGraphForward::~CudaGraphForward() = default;

bool CudaGraphForward::captured() const { return false; }

int CudaGraphForward::captures() const { return 0; }

const std::string& CudaGraphForward::eager_reason() const {
  static const std::string none;
  return none;
}

torch::Tensor CudaGraphForward::run(const torch::Tensor&) {
  throw ConfigError("CUDA graph forward: this build's LibTorch has no CUDA");
}

#endif

}  // namespace routelab
