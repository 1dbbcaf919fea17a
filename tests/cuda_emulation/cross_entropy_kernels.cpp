// The fused loss kernels, compiled as C++ against the CPU emulation (emulation.h) for test_cuda_kernels.
#include "core/train/cuda/cross_entropy_kernels.cu"
