// Python's random.Random, as far as lm-evaluation-harness uses it to draw few-shot examples: the Mersenne Twister
// seeded from an integer as CPython seeds it (init_by_array on the integer's 32-bit words) and Random.sample's two
// ways of drawing k of n indices without replacement. The same seed draws the same examples as the harness, so a
// few-shot prompt can be rebuilt exactly (core/analysis/zero_shot_fewshot.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

namespace routelab {

class PythonRandom {
 public:
  /// random.Random(seed) for a non-negative integer seed.
  explicit PythonRandom(std::uint64_t seed);
  /// random.getrandbits(k) for 0 < k <= 32.
  std::uint32_t getrandbits(int k);
  /// random._randbelow(n): uniform in [0, n), n > 0, by rejection on n's bit length.
  std::uint64_t randbelow(std::uint64_t n);
  /// random.sample(range(n), k): k distinct indices of [0, n) in the order drawn (k <= n).
  std::vector<std::uint64_t> sample(std::uint64_t n, std::uint64_t k);

 private:
  std::uint32_t next();
  std::array<std::uint32_t, 624> state_{};
  int index_ = 624;
};

}  // namespace routelab
