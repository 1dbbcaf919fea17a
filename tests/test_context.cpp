// Long-context evaluation: RoPE context extension (linear interpolation, YaRN) against hand computations, and
// perplexity versus length of a stored run, stored as an evaluation row, with clear errors.
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>

#include "core/analysis/context_length.h"
#include "core/config/experiment_config.h"
#include "core/models/blocks/rope.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "core/util/errors.h"
#include "tests/suite.h"

namespace test_context {

using namespace routelab;

namespace {

/// A tiny llama-style char model on the KJV corpus trained for a few steps (context 32).
TrainOutcome train_tiny(const std::string& db, const std::string& style) {
  const auto config = resolve_config(
      nlohmann::json::object(),
      {"model.style=" + style, "model.n_layer=2", "model.n_embd=32", "model.n_head=4", "data.context=32",
       "train.batch_size=8", "train.steps=60", "train.eval_every=60", "train.checkpoint_every=60",
       "train.eval_batches=2", "train.log_every=20", "train.lr=1e-2", "train.warmup_steps=5", "run.threads=1"},
      "test");
  return train(TrainRequest{config, db, "tiny-" + style, ""});
}

}  // namespace

class TestContext : public QObject {
  Q_OBJECT
  QTemporaryDir home_;

 private Q_SLOTS:
  void initTestCase() { qputenv("ROUTELAB_HOME", home_.path().toUtf8()); }

  void scalingFrequenciesMatchTheirDefinitions() {
    const auto plain = rope_frequencies(16, 10000.0, RopeScaling::None, 4.0, 64);
    QCOMPARE(plain.inv_freq.size(0), std::int64_t{8});
    QVERIFY(std::abs(plain.inv_freq[1].item<double>() - std::pow(10000.0, -2.0 / 16.0)) < 1e-12);
    QCOMPARE(plain.mscale, 1.0);
    const auto linear = rope_frequencies(16, 10000.0, RopeScaling::Linear, 4.0, 64);
    QVERIFY(torch::allclose(linear.inv_freq, plain.inv_freq / 4.0));
    // YaRN over a 64-token training context, s = 4: the ramp runs over dimension indices [floor(c(32)), ceil(c(1))]
    // = [0, 3] with c(r) = hd ln(64 / (2 pi r)) / (2 ln theta), the index turning r times over the context:
    // index 0 keeps its frequency, indices >= 3 are divided by 4, linear in between.
    const auto yarn = rope_frequencies(16, 10000.0, RopeScaling::Yarn, 4.0, 64);
    QVERIFY(std::abs(yarn.mscale - (0.1 * std::log(4.0) + 1.0)) < 1e-12);
    const auto ratio = (yarn.inv_freq / plain.inv_freq);
    QVERIFY(std::abs(ratio[0].item<double>() - 1.0) < 1e-12);
    QVERIFY(std::abs(ratio[1].item<double>() - (2.0 / 3.0 + 0.25 / 3.0)) < 1e-12);  // a third of the way
    QVERIFY(std::abs(ratio[7].item<double>() - 0.25) < 1e-12);
    for (int i = 1; i < 8; ++i) QVERIFY(ratio[i].item<double>() <= ratio[i - 1].item<double>() + 1e-12);
    QVERIFY(torch::allclose(rope_frequencies(16, 10000.0, RopeScaling::Yarn, 1.0, 64).inv_freq, plain.inv_freq));
    QVERIFY_THROWS_EXCEPTION(ConfigError, rope_frequencies(16, 10000.0, RopeScaling::Yarn, 2.0, 0));
    QVERIFY_THROWS_EXCEPTION(ConfigError, parse_rope_scaling("ntk"));
  }

  void linearScalingIsPositionInterpolation() {
    // Position s*p under linear scaling s rotates exactly as position p without scaling.
    const Rope plain(8, 64, 10000.0);
    const Rope scaled(8, 64, 10000.0, RopeScaling::Linear, 4.0, 16);
    const auto x = torch::randn({1, 2, 4, 8});
    const auto p = torch::tensor({0, 1, 5, 15}, torch::kLong);
    QVERIFY(torch::allclose(scaled.apply(x, p * 4), plain.apply(x, p), 1e-5, 1e-6));
  }

  void perplexityVersusLengthIsStoredWithTheRun() {
    QTemporaryDir dir;
    const auto db = dir.filePath("runs.sqlite").toStdString();
    const auto outcome = train_tiny(db, "llama");
    QCOMPARE(outcome.status, RunStatus::Finished);
    ContextCurveOptions options;
    options.lengths = {16, 32, 64};
    options.tokens = 512;
    const auto plain = context_curve(db, outcome.run_id, options);
    QCOMPARE(plain.points.size(), std::size_t{3});
    QCOMPARE(plain.trained_context, std::int64_t{32});
    for (const auto& p : plain.points) QVERIFY(std::isfinite(p.loss) && p.loss > 0 && p.windows >= 8);
    // At the training length without scaling the curve is the model's ordinary evaluation on that many tokens.
    options.scaling = "yarn";
    const auto yarn = context_curve(db, outcome.run_id, options);
    QCOMPARE(yarn.factor, 2.0);  // longest 64 / trained 32
    QVERIFY2(std::abs(yarn.points[2].loss - plain.points[2].loss) > 1e-4,
             qPrintable(QString("yarn %1 vs none %2").arg(yarn.points[2].loss).arg(plain.points[2].loss)));
    store_context_curve(db, yarn);
    RunStore store(db, false);
    const auto evals = store.evals(outcome.run_id);  // the trainer's last evaluation shares the curve's step
    const auto row = std::find_if(evals.begin(), evals.end(), [](const EvalRow& e) { return e.split == "context:yarnx2"; });
    QVERIFY(row != evals.end());
    const auto doc = nlohmann::json::parse(row->extra_json);
    QCOMPARE(doc.at("points").size(), std::size_t{3});
    QCOMPARE(doc.at("points")[2].at("length").get<int>(), 64);
  }

  void learnedPositionsRefuseLongerLengths() {
    QTemporaryDir dir;
    const auto db = dir.filePath("runs.sqlite").toStdString();
    const auto outcome = train_tiny(db, "gpt2");
    ContextCurveOptions options;
    options.lengths = {16, 64};
    options.tokens = 256;
    try {
      context_curve(db, outcome.run_id, options);
      QFAIL("expected a ConfigError");
    } catch (const ConfigError& e) {
      QVERIFY2(std::string(e.what()).find("learned positions") != std::string::npos, e.what());
    }
    options.lengths = {16, 32};
    QCOMPARE(context_curve(db, outcome.run_id, options).points.size(), std::size_t{2});
    options.scaling = "linear";
    QVERIFY_THROWS_EXCEPTION(ConfigError, context_curve(db, outcome.run_id, options));
  }
};

}  // namespace test_context

ROUTELAB_TEST_SUITE(test_context, TestContext)
#include "test_context.moc"
