// Helpers shared by the architecture suites: a small Transformer shape and the data rows that run a test for
// every block style (GPT-2, Llama, Llama with grouped-query attention).
#pragma once
#include <QTest>

#include <cstdint>

#include "core/models/dense_transformer.h"

namespace routelab::test {

/// d 32, 4 heads, `layers` blocks, vocabulary `vocab`, sequences up to `max_seq_len`.
inline TransformerOptions small_transformer(ModelStyle style, std::int64_t kv_heads, std::int64_t layers,
                                            std::int64_t vocab = 37, std::int64_t max_seq_len = 64) {
  TransformerOptions o;
  o.style(style).vocab_size(vocab).max_seq_len(max_seq_len).n_layer(layers).n_embd(32).n_head(4).n_kv_head(kv_heads);
  return o;
}

/// Data columns (style, kv heads) with one row per block style.
inline void add_style_rows() {
  QTest::addColumn<int>("style");
  QTest::addColumn<int>("kv");
  QTest::newRow("gpt2") << int(ModelStyle::GPT2) << 0;
  QTest::newRow("llama") << int(ModelStyle::Llama) << 0;
  QTest::newRow("llama-gqa") << int(ModelStyle::Llama) << 2;
}

}  // namespace routelab::test
