// Helpers shared by the dataset implementations (not part of the public data API): a portable uniform integer
// from std::mt19937_64, number formatting for describe(), and typed access to the data config section.
#pragma once
#include <cstdint>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "core/util/errors.h"

namespace routelab::detail {

/// data.<key> of a resolved data section as T; a missing key or a wrong type is a ConfigError naming it.
template <typename T>
T get(const nlohmann::json& data, const char* key) {
  auto it = data.find(key);
  if (it == data.end()) throw ConfigError(std::string("data.") + key + ": missing");
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw ConfigError(std::string("data.") + key + ": unexpected type (" + it->dump() + ")");
  }
}

/// A data file is read whole into memory: refuses (DataError naming the file) a device, pipe or socket (/dev/zero
/// would be read until memory runs out) and a file larger than half of this machine's physical memory.
void check_data_file(const std::string& path);

/// Throws ConfigError("data.<key>: <why>") unless `ok`.
inline void require(bool ok, const char* key, const std::string& why) {
  if (!ok) throw ConfigError(std::string("data.") + key + ": " + why);
}

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
