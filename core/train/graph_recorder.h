// What records a piece of GPU work once and replays it: the training step (train.cuda_graph, CudaGraphStep) and the
// eval-mode forward (CudaGraphForward) share it, so both capture as PyTorch's whole-network recipe does (warm up on a
// side stream, capture there with the autocast cache off). No Torch in this header.
#pragma once
#include <functional>
#include <memory>

namespace routelab {

/// Records a body of work and replays it: by default a CUDA graph captured on a side stream (cuda_graph_recorder); a
/// test of CudaGraphForward passes one that runs the recorded body again on the CPU.
class GraphRecorder {
 public:
  virtual ~GraphRecorder() = default;
  /// An eager call before the capture (on the GPU: on the side stream, the host waiting for the work queued before
  /// and for this call's).
  virtual void warm_up(const std::function<void()>& body) = 0;
  /// Records `body` (which sets the recorded outputs) without (on a GPU) running it; throws where it cannot be
  /// recorded, leaving nothing recorded.
  virtual void capture(const std::function<void()>& body) = 0;
  /// Runs what was recorded again.
  virtual void replay() = 0;
  /// Drops what was recorded (a CUDA graph's memory pool with it).
  virtual void release() = 0;
};

/// Whether this build can capture CUDA graphs (it was built against a CUDA LibTorch).
bool cuda_graphs_available();

/// A CUDA graph recorder on a side stream of GPU `device`. Only in a build against a CUDA LibTorch
/// (cuda_graphs_available); elsewhere it throws std::logic_error.
std::unique_ptr<GraphRecorder> cuda_graph_recorder(int device);

}  // namespace routelab
