// What the autograd wrappers of RouteLab's block kernels share (fused_norm.cpp, fused_rope.cpp): where a kernel
// runs, and the checks around a launch. Included only where the kernels are compiled: against a CUDA LibTorch
// (ROUTELAB_WITH_CUDA) or, for the kernel suite, the CPU emulation (ROUTELAB_CUDA_EMULATION: CPU tensors, no stream).
#pragma once
#include <torch/torch.h>

#include <stdexcept>
#include <string>

#include "core/models/blocks/cuda/kernel_types.h"
#include "core/util/cuda_build.h"
#include "core/util/errors.h"

#if ROUTELAB_WITH_CUDA && !defined(ROUTELAB_CUDA_EMULATION)
#define ROUTELAB_KERNELS_ON_GPU 1
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#else
#define ROUTELAB_KERNELS_ON_GPU 0
#endif

namespace routelab::kernels {

inline cuda::ElementType element_type(torch::ScalarType t, const std::string& what) {
  if (t == torch::kBFloat16) return cuda::ElementType::BFloat16;
  if (t == torch::kFloat) return cuda::ElementType::Float32;
  throw ConfigError(what + " of type " + c10::toString(t) + " (bf16 or fp32)");
}

/// Throws the launch's CUDA error, if any, naming the kernel.
inline void check_launch(const char* error, const std::string& what) {
  if (error && *error) throw std::runtime_error(what + ": " + error);
}

inline float* data_or_null(const torch::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

/// The kernels' stream on the tensor's device (the current one there), and that device made current while alive.
class KernelPlace {
 public:
#if ROUTELAB_KERNELS_ON_GPU
  explicit KernelPlace(const torch::Tensor& t)
      : guard_(t.device()), stream_(c10::cuda::getCurrentCUDAStream(t.device().index()).stream()) {}
#else
  explicit KernelPlace(const torch::Tensor& t) {
    if (!t.device().is_cpu()) throw ConfigError("RouteLab's kernels (CPU emulation): tensors on " + t.device().str());
  }
#endif
  void* stream() const { return stream_; }

 private:
#if ROUTELAB_KERNELS_ON_GPU
  c10::cuda::CUDAGuard guard_;
#endif
  void* stream_ = nullptr;
};

}  // namespace routelab::kernels
