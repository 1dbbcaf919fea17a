// RouteLab's CUDA kernel for rotary position embeddings ("rotate half"): one pass that reads q or k where the
// projection left them (a strided (B, H, T, hd) view of the fused QKV output) and writes the rotated rows contiguous,
// computing in fp32, where LibTorch's ops make five passes (x cos, the negated half, the concatenation, x sin, the
// sum). Its backward is the same pass with the rotation reversed. The autograd wrapper is fused_rope.cpp.
#pragma once
#include <cstdint>

#include "core/models/blocks/cuda/kernel_types.h"

namespace routelab::cuda {

/// out[b, h, t, i] = x[b, h, t, i] cos[p, i] + sign * r(x)[i] sin[p, i], r(x) = (-x[hd/2:], x[:hd/2]), for
/// p = positions[t] (or positions[b, t] when `per_sequence`). x is read through element `strides` (4, the last 1)
/// and out written contiguous, both in `type`; cos and sin are (P, hd) fp32 tables whose halves repeat (angles
/// (P, hd/2) twice), which makes sign -1 the backward of sign +1. `stream` is a cudaStream_t. Returns an empty
/// string, or the CUDA error of the launch.
const char* rope_rotate(const void* x, ElementType type, const std::int64_t* strides, std::int64_t B, std::int64_t H,
                        std::int64_t T, std::int64_t hd, const float* cos, const float* sin,
                        const std::int64_t* positions, bool per_sequence, float sign, void* out, void* stream);

}  // namespace routelab::cuda
