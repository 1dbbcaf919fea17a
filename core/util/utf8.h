// UTF-8 text read as Python reads a str: its length in code points and its whitespace.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace routelab {

/// Code points of UTF-8 text (the bytes that do not continue a sequence).
inline std::int64_t utf8_code_points(std::string_view text) {
  return std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

/// The bytes of the whitespace character that starts at text[i] as Python reads whitespace (str.isspace, str.strip,
/// str.split and the \s of its re module): \t \n \v \f \r, \x1c-\x1f, the space, U+0085, U+00A0, U+1680,
/// U+2000-U+200A, U+2028, U+2029, U+202F, U+205F and U+3000; 0 where none starts there.
inline std::size_t python_space_at(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0u; };
  const auto c = byte(0);
  if ((c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20)) return 1;
  if (c == 0xc2) return byte(1) == 0x85 || byte(1) == 0xa0 ? 2 : 0;
  const auto c1 = byte(1), c2 = byte(2);
  if (c == 0xe1) return c1 == 0x9a && c2 == 0x80 ? 3 : 0;
  if (c == 0xe2 && c1 == 0x80) return (c2 >= 0x80 && c2 <= 0x8a) || c2 == 0xa8 || c2 == 0xa9 || c2 == 0xaf ? 3 : 0;
  if (c == 0xe2) return c1 == 0x81 && c2 == 0x9f ? 3 : 0;
  return c == 0xe3 && c1 == 0x80 && c2 == 0x80 ? 3 : 0;
}

/// text without Python's whitespace (python_space_at) at its start and end: str.strip(), or lstrip() / rstrip().
inline std::string_view python_strip(std::string_view text, bool left = true, bool right = true) {
  std::size_t first = 0, last = text.size();
  while (left && first < last) {
    const auto n = python_space_at(text, first);
    if (n == 0) break;
    first += n;
  }
  while (right && last > first) {
    auto start = last - 1;  // the last character's first byte
    while (start > first && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    if (python_space_at(text, start) != last - start) break;
    last = start;
  }
  return text.substr(first, last - first);
}

}  // namespace routelab
