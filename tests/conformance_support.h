// Helpers of the registry-driven suites (test_conformance, test_graph_conformance): a data row per registered
// architecture, and each architecture at a small shape.
#pragma once
#include <QtTest>

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/config/options.h"
#include "core/models/registry.h"

namespace routelab::test::conformance {

/// One data row per registered architecture that `keep` selects (column "arch").
template <class Keep>
void add_rows(Keep keep) {
  QTest::addColumn<QString>("arch");
  for (const auto& entry : architectures())
    if (keep(entry)) QTest::newRow(entry.id.c_str()) << QString::fromStdString(entry.id);
}

/// One data row per registered architecture.
inline void add_all_rows() {
  add_rows([](const ArchitectureEntry&) { return true; });
}

/// One data row per registered language model.
inline void add_language_model_rows() {
  add_rows([](const ArchitectureEntry& e) { return e.task == Task::LanguageModel; });
}

/// The architecture's schema defaults at a small shape (the shape keys it has).
inline nlohmann::json small_model(const ArchitectureEntry& entry) {
  auto m = schema_defaults(entry.options);
  const nlohmann::json shape = {{"n_layer", 4}, {"n_embd", 32}, {"n_head", 4}, {"n_kv_head", 2}, {"max_seq_len", 32}};
  for (const auto& [key, value] : shape.items())
    if (m.contains(key)) m[key] = value;
  m["arch"] = entry.id;
  return m;
}

inline constexpr std::int64_t kVocab = 23;

/// The architecture's small model with the options a speed benchmark sets (ArchitectureEntry::speed_options).
inline nlohmann::json graph_forward_model(const ArchitectureEntry& entry) {
  auto m = small_model(entry);
  m.update(entry.speed_options);
  return m;
}

/// A row per language model whose eval forward is declared capturable as a CUDA graph and precision ("bf16",
/// "fp32") its cuda_graph_limits accept for graph_forward_model (columns "arch", "precision").
inline void add_graph_forward_rows() {
  QTest::addColumn<QString>("arch");
  QTest::addColumn<QString>("precision");
  for (const auto& entry : architectures())
    if (entry.task == Task::LanguageModel && entry.cuda_graph_forward)
      for (const std::string precision : {"bf16", "fp32"})
        if (why_no_cuda_graph_forward(entry, graph_forward_model(entry), precision).empty())
          QTest::newRow((entry.id + " " + precision).c_str())
              << QString::fromStdString(entry.id) << QString::fromStdString(precision);
}

/// The train section's optimizer keys for make_optimizer.
inline nlohmann::json adamw_options() {
  return nlohmann::json::parse(R"({"lr":1e-3,"beta1":0.9,"beta2":0.95,"eps":1e-8,"weight_decay":0.1})");
}

}  // namespace routelab::test::conformance
