// The boundary between RouteLab and SentencePiece. Debian's libsentencepiece carries its own copy of protobuf and
// exports it, while Debian's LibTorch loads the system protobuf: linked into one process the two copies replace
// each other's functions and the process aborts at start-up. So SentencePiece is reached only through a small
// module (spm_shim.cpp, libroutelab_spm.so) that spm_loader.cpp opens with RTLD_LOCAL | RTLD_DEEPBIND: inside it,
// SentencePiece binds to its own protobuf, and nothing of it enters the process's global symbols.
#pragma once
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace routelab {

inline constexpr int kSpmApiVersion = 1;

/// The module's functions. Both sides share the process's libstdc++, so standard types cross the boundary.
struct SpmApi {
  int version;  ///< kSpmApiVersion of the module
  /// A processor for a serialized model, or nullptr with `error` set.
  void* (*load)(const std::string& model, std::string* error);
  void (*destroy)(void* processor);
  int (*size)(const void* processor);
  bool (*encode)(const void* processor, std::string_view text, std::vector<int>* ids, std::string* error);
  bool (*decode)(const void* processor, const std::vector<int>& ids, std::string* text, std::string* error);
  const std::string& (*piece)(const void* processor, int id);
  /// Bit 1: a byte piece; bit 2: a control piece (<s>, </s>); bit 4: the unknown piece.
  int (*piece_kind)(const void* processor, int id);
  int (*bos_id)(const void* processor);
  int (*eos_id)(const void* processor);
  /// Trains on the lines `next_line` gives (false at the end) with SentencePiece's trainer options `spec`; the
  /// serialized model in `model`, or false with `error` set.
  bool (*train)(const std::unordered_map<std::string, std::string>& spec,
                bool (*next_line)(void* context, std::string* line), void* context, std::string* model,
                std::string* error);
};

/// Why this build cannot open the module ("" where it can): a build with AddressSanitizer (packaging/sanitize.sh),
/// whose runtime refuses RTLD_DEEPBIND (google/sanitizers#611), while without it SentencePiece's protobuf aborts the
/// process beside LibTorch's.
std::string sentencepiece_unavailable();

/// The loaded module (opened once per process). DataError naming the paths tried when it cannot be opened, or saying
/// why this build cannot open it (sentencepiece_unavailable).
const SpmApi& spm_api();

}  // namespace routelab
