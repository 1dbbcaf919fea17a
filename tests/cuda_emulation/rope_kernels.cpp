// The rotary-embedding kernel, compiled as C++ against the CPU emulation (emulation.h) for test_cuda_kernels.
#include "core/models/blocks/cuda/rope_kernels.cu"
