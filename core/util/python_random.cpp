#include "core/util/python_random.h"

#include <cmath>
#include <stdexcept>
#include <unordered_set>

namespace routelab {
namespace {

constexpr int kN = 624, kM = 397;

}  // namespace

PythonRandom::PythonRandom(std::uint64_t seed) {
  // CPython's random_seed: the integer's 32-bit words, least significant first (0 is one word), then init_by_array.
  std::vector<std::uint32_t> key;
  for (std::uint64_t rest = seed; rest > 0; rest >>= 32) key.push_back(static_cast<std::uint32_t>(rest & 0xffffffffu));
  if (key.empty()) key.push_back(0);
  state_[0] = 19650218u;  // init_genrand(19650218)
  for (int i = 1; i < kN; ++i)
    state_[i] = 1812433253u * (state_[i - 1] ^ (state_[i - 1] >> 30)) + static_cast<std::uint32_t>(i);
  int i = 1;
  std::size_t j = 0;
  for (std::size_t k = std::max<std::size_t>(kN, key.size()); k > 0; --k) {
    state_[i] =
        (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1664525u)) + key[j] + static_cast<std::uint32_t>(j);
    ++i;
    ++j;
    if (i >= kN) {
      state_[0] = state_[kN - 1];
      i = 1;
    }
    if (j >= key.size()) j = 0;
  }
  for (int k = kN - 1; k > 0; --k) {
    state_[i] = (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1566083941u)) - static_cast<std::uint32_t>(i);
    ++i;
    if (i >= kN) {
      state_[0] = state_[kN - 1];
      i = 1;
    }
  }
  state_[0] = 0x80000000u;
  index_ = kN;
}

std::uint32_t PythonRandom::next() {  // genrand_uint32
  constexpr std::uint32_t kUpper = 0x80000000u, kLower = 0x7fffffffu, kMatrix = 0x9908b0dfu;
  if (index_ >= kN) {
    for (int k = 0; k < kN; ++k) {
      const std::uint32_t y = (state_[k] & kUpper) | (state_[(k + 1) % kN] & kLower);
      state_[k] = state_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? kMatrix : 0u);
    }
    index_ = 0;
  }
  std::uint32_t y = state_[index_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

std::uint32_t PythonRandom::getrandbits(int k) {
  if (k <= 0 || k > 32) throw std::invalid_argument("PythonRandom::getrandbits: k must be in 1..32");
  return next() >> (32 - k);
}

std::uint64_t PythonRandom::randbelow(std::uint64_t n) {
  if (n == 0 || n > 0xffffffffu) throw std::invalid_argument("PythonRandom::randbelow: n must be in 1..2^32-1");
  int bits = 0;
  for (std::uint64_t v = n; v > 0; v >>= 1) ++bits;  // int.bit_length()
  std::uint64_t r = getrandbits(bits);
  while (r >= n) r = getrandbits(bits);
  return r;
}

std::vector<std::uint64_t> PythonRandom::sample(std::uint64_t n, std::uint64_t k) {
  if (k > n) throw std::invalid_argument("PythonRandom::sample: sample larger than population");
  std::vector<std::uint64_t> result(k);
  std::uint64_t setsize = 21;  // CPython's choice between a pool copy and a set of drawn indices
  if (k > 5) setsize += static_cast<std::uint64_t>(std::pow(4.0, std::ceil(std::log(static_cast<double>(k * 3)) /
                                                                              std::log(4.0))));
  if (n <= setsize) {
    std::vector<std::uint64_t> pool(n);
    for (std::uint64_t i = 0; i < n; ++i) pool[i] = i;
    for (std::uint64_t i = 0; i < k; ++i) {
      const auto j = randbelow(n - i);
      result[i] = pool[j];
      pool[j] = pool[n - i - 1];
    }
  } else {
    std::unordered_set<std::uint64_t> selected;
    for (std::uint64_t i = 0; i < k; ++i) {
      auto j = randbelow(n);
      while (selected.count(j)) j = randbelow(n);
      selected.insert(j);
      result[i] = j;
    }
  }
  return result;
}

}  // namespace routelab
