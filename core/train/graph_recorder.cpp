// The CUDA graph recorder, compiled with CUDA only against a CUDA LibTorch (ROUTELAB_WITH_CUDA); the declaration's
// stand-in in every other build.
#include "core/train/graph_recorder.h"

#include <stdexcept>

#include "core/util/cuda_build.h"

#if ROUTELAB_WITH_CUDA
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace routelab {

bool cuda_graphs_available() { return ROUTELAB_WITH_CUDA != 0; }

#if ROUTELAB_WITH_CUDA

namespace {

class CudaGraphRecorder : public GraphRecorder {
 public:
  explicit CudaGraphRecorder(c10::DeviceIndex device)
      : side_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)) {}

  void warm_up(const std::function<void()>& body) override {
    c10::cuda::device_synchronize();  // eager calls only: a replay waits for nothing
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

}  // namespace

std::unique_ptr<GraphRecorder> cuda_graph_recorder(int device) {
  return std::make_unique<CudaGraphRecorder>(static_cast<c10::DeviceIndex>(device));
}

#else

std::unique_ptr<GraphRecorder> cuda_graph_recorder(int) {
  throw std::logic_error("cuda_graph_recorder: this build's LibTorch has no CUDA");
}

#endif

}  // namespace routelab
