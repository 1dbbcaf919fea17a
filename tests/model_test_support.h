// Helpers shared by the architecture suites: a small Transformer shape and the data rows that run a test for
// every block style (GPT-2, Llama, Llama with grouped-query attention).
#pragma once
#include <QTest>

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/config/experiment_config.h"
#include "core/models/dense_transformer.h"
#include "core/util/errors.h"

namespace routelab::test {

/// d 32, 4 heads, `layers` blocks, vocabulary `vocab`, sequences up to `max_seq_len`.
inline TransformerOptions small_transformer(ModelStyle style, std::int64_t kv_heads, std::int64_t layers,
                                            std::int64_t vocab = 37, std::int64_t max_seq_len = 64) {
  TransformerOptions o;
  o.style(style).vocab_size(vocab).max_seq_len(max_seq_len).n_layer(layers).n_embd(32).n_head(4).n_kv_head(kv_heads);
  return o;
}

/// Data columns (style, kv heads) with one row per block style.
/// a and b agree to `rel` of b's largest magnitude. The right bound for values computed by matrix products whose
/// shape differs between the two runs (the other rows of a batch change which GEMM kernel and blocking run, so
/// each dot product is summed in another order): the rounding error scales with the magnitudes summed, not with
/// the element itself, so an element-wise relative tolerance fails on entries near zero on some BLAS builds.
inline bool close_to_scale(const torch::Tensor& a, const torch::Tensor& b, double rel = 1e-5) {
  const double scale = b.abs().max().item<double>();
  return (a - b).abs().max().item<double>() <= rel * scale + 1e-12;
}

inline void add_style_rows() {
  QTest::addColumn<int>("style");
  QTest::addColumn<int>("kv");
  QTest::newRow("gpt2") << int(ModelStyle::GPT2) << 0;
  QTest::newRow("llama") << int(ModelStyle::Llama) << 0;
  QTest::newRow("llama-gqa") << int(ModelStyle::Llama) << 2;
}

/// The body of each architecture suite's configErrorNamesKey: a config whose model section is `overrides` (JSON)
/// fails with a ConfigError naming `key` ("model.x"), and the same section with that key left at its default
/// resolves to architecture `arch`.
inline void check_config_error_names_key(const QString& overrides, const QString& key, const std::string& arch) {
  const auto doc = nlohmann::json{{"model", nlohmann::json::parse(overrides.toStdString())}};
  try {
    resolve_config(doc);
    QFAIL("no error");
  } catch (const ConfigError& e) {
    QVERIFY2(QString(e.what()).contains(key), e.what());
  }
  auto fixed = doc;
  fixed["model"].erase(key.mid(int(std::string("model.").size())).toStdString());
  QCOMPARE(resolve_config(fixed).arch(), arch);
}

}  // namespace routelab::test
