// The conformance suite (issue 20): checks that hold for every registered architecture, written once and run for
// each registry entry, one added later included. The configuration contract: an architecture's defaults resolve,
// and every option given a value outside its schema (below its minimum, above its maximum, an unknown choice, the
// wrong type) or an unknown key is a ConfigError naming model.<key>. Checkpoints: every language model trained a
// step, saved and loaded into a model of another seed gives the same logits and the same next step. Other checks
// that loop over the registry (decode = forward and the KV rule, counted = priced FLOPs) live in test_generation
// and test_flops; they move here as the suite grows.
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

#include "core/config/experiment_config.h"
#include "core/config/options.h"
#include "core/models/language_model.h"
#include "core/models/registry.h"
#include "core/train/checkpoint.h"
#include "core/train/optimizer.h"
#include "core/train/step.h"
#include "core/util/errors.h"
#include "tests/suite.h"

namespace test_conformance {

using namespace routelab;

namespace {

/// A config document with model section `model`, on data the architecture's task accepts.
nlohmann::json document(const ArchitectureEntry& entry, nlohmann::json model) {
  nlohmann::json doc = {{"model", std::move(model)}};
  if (entry.task == "classification") doc["data"] = {{"source", "entailment"}, {"tokenizer", "word"}};
  return doc;
}

/// Values the schema rejects for `spec`, each with a row label.
std::vector<std::pair<std::string, nlohmann::json>> invalid_values(const OptionSpec& spec) {
  std::vector<std::pair<std::string, nlohmann::json>> out;
  const bool numeric = spec.type == OptionType::Int || spec.type == OptionType::Float;
  const auto step = [](double bound) { return std::max(1.0, std::abs(bound)); };
  if (numeric && spec.min) out.emplace_back("below min", *spec.min - step(*spec.min));
  if (numeric && spec.max) out.emplace_back("above max", *spec.max + step(*spec.max));
  if (spec.type == OptionType::Int) out.emplace_back("fraction", 1.5);
  if (spec.type == OptionType::IntList && spec.min) out.emplace_back("element below min", nlohmann::json::array({*spec.min - 1}));
  if (spec.type == OptionType::Choice) out.emplace_back("unknown choice", "no-such-choice");
  out.emplace_back("wrong type", spec.type == OptionType::String ? nlohmann::json(3) : nlohmann::json::object());
  return out;
}

/// The architecture's schema defaults at a small shape (the shape keys it has).
nlohmann::json small_model(const ArchitectureEntry& entry) {
  auto m = schema_defaults(entry.options);
  const nlohmann::json shape = {{"n_layer", 4}, {"n_embd", 32}, {"n_head", 4}, {"n_kv_head", 2}, {"max_seq_len", 32}};
  for (const auto& [key, value] : shape.items())
    if (m.contains(key)) m[key] = value;
  m["arch"] = entry.id;
  return m;
}

constexpr std::int64_t kVocab = 23;

/// One data row per registered language model (column "arch").
void add_language_model_rows() {
  QTest::addColumn<QString>("arch");
  for (const auto& entry : architectures())
    if (entry.task == "lm") QTest::newRow(entry.id.c_str()) << QString::fromStdString(entry.id);
}

}  // namespace

class TestConformance : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void defaultsResolve_data() {
    QTest::addColumn<QString>("arch");
    for (const auto& entry : architectures()) QTest::newRow(entry.id.c_str()) << QString::fromStdString(entry.id);
  }
  void defaultsResolve() {
    QFETCH(QString, arch);
    const auto& entry = architecture(arch.toStdString());
    const auto config = resolve_config(document(entry, {{"arch", entry.id}}));
    QCOMPARE(config.arch(), entry.id);
    // Every schema option is present in the resolved section with its schema default.
    for (const auto& spec : entry.options) {
      QVERIFY2(config.model().contains(spec.key), spec.key.c_str());
      QVERIFY2(config.model().at(spec.key) == spec.default_value, spec.key.c_str());
    }
  }

  void checkpointRoundTrip_data() { add_language_model_rows(); }
  void checkpointRoundTrip() {
    QFETCH(QString, arch);
    const auto model = small_model(architecture(arch.toStdString()));
    const auto train = nlohmann::json::parse(R"({"lr":1e-3,"beta1":0.9,"beta2":0.95,"eps":1e-8,"weight_decay":0.1})");
    QTemporaryDir dir;
    const auto path = dir.filePath("c.pt").toStdString();
    torch::manual_seed(1);
    auto a = create_model(model, {kVocab, 32});
    auto opt_a = make_optimizer(*a, train);
    const auto tokens = torch::randint(0, kVocab, {2, 16}, torch::kLong);
    train_step(*a, *opt_a, {tokens, tokens, {}}, 1.0, false, false);
    CheckpointMeta meta;
    meta.step = 1;
    meta.config_json = "{}";
    meta.tokenizer_json = "{}";
    QVERIFY(save_checkpoint(path, *a, *opt_a, meta).bytes > 0);
    torch::manual_seed(99);
    auto b = create_model(model, {kVocab, 32});
    auto opt_b = make_optimizer(*b, train);
    a->eval();
    b->eval();
    QVERIFY(!torch::equal(a->forward(tokens).logits, b->forward(tokens).logits));  // another seed, other weights
    QCOMPARE(load_checkpoint(path, *b, opt_b.get()).step, std::int64_t(1));
    QVERIFY(torch::equal(a->forward(tokens).logits, b->forward(tokens).logits));
    // The next step from the restored optimizer state equals the next step of the original.
    a->train();
    b->train();
    torch::manual_seed(1);
    const auto la = train_step(*a, *opt_a, {tokens, tokens, {}}, 1.0, false, false).loss;
    torch::manual_seed(1);
    const auto lb = train_step(*b, *opt_b, {tokens, tokens, {}}, 1.0, false, false).loss;
    QVERIFY(torch::equal(la, lb));
    a->eval();
    b->eval();
    QVERIFY(torch::equal(a->forward(tokens).logits, b->forward(tokens).logits));
  }

  void badOptionNamesItsKey_data() {
    QTest::addColumn<QString>("arch");
    QTest::addColumn<QString>("key");
    QTest::addColumn<QString>("value");
    int rows = 0;
    for (const auto& entry : architectures()) {
      for (const auto& spec : entry.options)
        for (const auto& [label, value] : invalid_values(spec)) {
          const auto name = entry.id + " " + spec.key + " " + label;
          QTest::newRow(name.c_str()) << QString::fromStdString(entry.id) << QString::fromStdString(spec.key)
                                      << QString::fromStdString(value.dump());
          ++rows;
        }
      const auto name = entry.id + " unknown key";
      QTest::newRow(name.c_str()) << QString::fromStdString(entry.id) << "no_such_option" << "1";
    }
    QVERIFY(rows > 100);  // every architecture has a schema of its own (not an empty list)
  }
  void badOptionNamesItsKey() {
    QFETCH(QString, arch);
    QFETCH(QString, key);
    QFETCH(QString, value);
    const auto& entry = architecture(arch.toStdString());
    const auto doc =
        document(entry, {{"arch", entry.id}, {key.toStdString(), nlohmann::json::parse(value.toStdString())}});
    const auto expected = "model." + key.toStdString();
    try {
      resolve_config(doc);
      QFAIL(qPrintable("accepted model." + key + " = " + value));
    } catch (const ConfigError& e) {
      QVERIFY2(std::string(e.what()).find(expected) != std::string::npos, e.what());
    }
  }
};

}  // namespace test_conformance

ROUTELAB_TEST_SUITE(test_conformance, TestConformance)
#include "test_conformance.moc"
