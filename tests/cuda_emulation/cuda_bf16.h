// Stands in for the CUDA toolkit's bf16 header in the CPU emulation: the same 16 bits (LibTorch's BFloat16 layout)
// and the toolkit's round-to-nearest-even conversion.
#pragma once
#include <cstdint>
#include <cstring>

#include "emulation.h"

struct __nv_bfloat16 {
  std::uint16_t bits;
};

inline float __bfloat162float(__nv_bfloat16 h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline __nv_bfloat16 __float2bfloat16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<std::uint16_t>((u >> 16) | 0x40u)};  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<std::uint16_t>(u >> 16)};
}
