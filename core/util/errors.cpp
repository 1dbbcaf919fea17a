// Reporting failures from outside RouteLab's errors at a boundary: LibTorch's exceptions carry a C++ backtrace in
// what(), which a user's error line should not.
#include "core/util/errors.h"

#include <c10/util/Exception.h>

namespace routelab {

std::string foreign_error_text(const std::exception& e, bool* out_of_memory) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = torch_error ? torch_error->what_without_backtrace() : e.what();
  // An enforce's location prefix ("[enforce fail at alloc_cpu.cpp:75] err == 0. ") says nothing to a user.
  if (text.rfind("[enforce fail at ", 0) == 0)
    if (const auto end = text.find(". ", text.find(']')); end != std::string::npos) text.erase(0, end + 2);
  if (const auto line = text.find('\n'); line != std::string::npos) text.erase(line);
  if (out_of_memory)
    *out_of_memory = torch_error && (text.find("can't allocate memory") != std::string::npos ||
                                     text.find("out of memory") != std::string::npos);
  return torch_error ? "LibTorch: " + text : text;
}

}  // namespace routelab
