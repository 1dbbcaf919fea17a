// The fused norm kernels, compiled as C++ against the CPU emulation (emulation.h) for test_cuda_kernels.
#include "core/models/blocks/cuda/norm_kernels.cu"
