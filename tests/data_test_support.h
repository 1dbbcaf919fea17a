// Helpers shared by the data suites: a slice of the embedded corpus to train tokenizers and prepare shards on.
#pragma once
#include <fstream>
#include <string>

#include "core/data/dataset.h"
#include "core/data/spm_api.h"

namespace routelab::test {

/// The first `bytes` of the embedded corpus (the King James Bible), cut at a line end.
inline std::string corpus_head(std::size_t bytes) {
  std::ifstream in(default_corpus_path(), std::ios::binary);
  std::string text(bytes, '\0');
  in.read(text.data(), static_cast<std::streamsize>(bytes));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text.substr(0, text.rfind('\n') + 1);
}

/// In a test that needs SentencePiece: skips it where this build cannot open the module (a sanitized build).
#define ROUTELAB_REQUIRE_SENTENCEPIECE()                                                  \
  do {                                                                                    \
    if (const auto why = routelab::sentencepiece_unavailable(); !why.empty())            \
      QSKIP(why.c_str());                                                                 \
  } while (false)

}  // namespace routelab::test
