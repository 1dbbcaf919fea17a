// UTF-8 text measured as Python's len() measures a str: its code points.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string_view>

namespace routelab {

/// Code points of UTF-8 text (the bytes that do not continue a sequence).
inline std::int64_t utf8_code_points(std::string_view text) {
  return std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

}  // namespace routelab
