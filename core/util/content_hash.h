// Content hashes for identity, not security: 64-bit FNV-1a, printed as 16 hex digits. Used for resolved configs and
// tokenizers, so the same bytes always give the same name across runs, machines and RouteLab versions.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace routelab {

inline std::uint64_t fnv1a64(std::string_view bytes) {
  std::uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

/// fnv1a64 as 16 lower-case hex digits.
inline std::string content_hash(std::string_view bytes) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a64(bytes)));
  return buf;
}

}  // namespace routelab
