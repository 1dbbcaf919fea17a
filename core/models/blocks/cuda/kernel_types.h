// The element types RouteLab's block kernels read and write (plain C++: no Torch, no CUDA headers).
#pragma once

namespace routelab::cuda {

enum class ElementType { Float32, BFloat16 };

}  // namespace routelab::cuda
