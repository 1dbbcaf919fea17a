// Helpers shared by the dataset implementations (not part of the public data API): a portable uniform integer
// from std::mt19937_64 and number formatting for describe().
#pragma once
#include <cstdint>
#include <random>
#include <string>

namespace routelab::detail {

/// Uniform integer in [0, n) for n >= 1, by rejecting the top partial range of the 64-bit output.
/// std::uniform_int_distribution is implementation-defined, so batches drawn with it could differ between
/// standard libraries; this keeps a batch a function of the seed alone.
inline std::uint64_t uniform_below(std::mt19937_64& gen, std::uint64_t n) {
  const std::uint64_t limit = UINT64_MAX - (UINT64_MAX % n + 1) % n;  // the largest multiple of n, minus one
  std::uint64_t x = gen();
  while (x > limit) x = gen();
  return x % n;
}

/// 4332554 -> "4,332,554".
inline std::string with_commas(std::int64_t n) {
  const std::string digits = std::to_string(n);
  const std::size_t first = n < 0 ? 1 : 0;  // after the sign
  std::string out = digits.substr(0, first);
  for (std::size_t i = first; i < digits.size(); ++i) {
    if (i > first && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace routelab::detail
