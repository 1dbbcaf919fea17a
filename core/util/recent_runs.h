// What the store readers' caches keep: the most recently read runs, the others forgotten. No Torch, no Qt.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>

namespace routelab {

/// Erases from `last_read` (key -> when it was last read, a growing count) the least recently read keys until at most
/// `max_keys` (at least 1) remain, calling `forget(key)` for each.
template <typename Key, typename Forget>
void forget_least_recent(std::map<Key, std::uint64_t>& last_read, std::size_t max_keys, Forget forget) {
  while (last_read.size() > std::max<std::size_t>(1, max_keys)) {
    const auto oldest = std::min_element(last_read.begin(), last_read.end(),
                                         [](const auto& a, const auto& b) { return a.second < b.second; })->first;
    last_read.erase(oldest);
    forget(oldest);
  }
}

}  // namespace routelab
