// Analysis of stored runs: the residual-ratio probe against hand computations, re-evaluation that reproduces the
// trainer's last evaluation, eval-only overrides, the residual profile's accounting, and clear errors.
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>

#include "core/analysis/residual_profile.h"
#include "core/analysis/run_analysis.h"
#include "core/config/experiment_config.h"
#include "core/models/blocks/residual_probe.h"
#include "core/models/dense_transformer.h"
#include "core/models/mod.h"
#include "core/models/registry.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "core/util/errors.h"
#include "tests/suite.h"

namespace test_analysis {

using namespace routelab;

namespace {

ExperimentConfig small_config(const std::string& arch, std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"model.arch=" + arch, "model.n_layer=2", "model.n_embd=32", "model.n_head=4",
                                   "data.source=copy", "train.batch_size=8", "train.steps=20", "train.eval_every=10",
                                   "train.checkpoint_every=10", "train.eval_batches=3", "train.log_every=5",
                                   "train.lr=3e-3", "train.warmup_steps=5", "run.threads=2"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return resolve_config(nlohmann::json::object(), sets, "test");
}

/// ||u|| / ||x|| row by row: (B, T, C) -> (B, T).
torch::Tensor ratio(const torch::Tensor& x, const torch::Tensor& u) { return u.norm(2, {-1}) / x.norm(2, {-1}); }

}  // namespace

class TestAnalysis : public QObject {
  Q_OBJECT
  QTemporaryDir home_;

 private Q_SLOTS:
  void initTestCase() { qputenv("ROUTELAB_HOME", home_.path().toUtf8()); }
  void init() { torch::manual_seed(3); }

  void probeRecordsNothingWhenInactive() {
    QVERIFY(!residual_probe_active());
    record_residual(0, "attn", torch::ones({1, 2, 4}), torch::ones({1, 2, 4}));  // a no-op, no crash
    ResidualProbe probe;
    QVERIFY(residual_probe_active());
    QVERIFY(probe.samples.empty());
  }

  void denseBlockRatiosMatchHandComputation() {
    TransformerOptions o;
    o.style(ModelStyle::GPT2).vocab_size(11).max_seq_len(16).n_layer(2).n_embd(16).n_head(2);
    DenseTransformer model(o);
    model.eval();
    const auto tokens = torch::randint(0, 11, {2, 7}, torch::kLong);
    std::vector<ResidualSample> samples;
    {
      torch::NoGradGuard no_grad;
      ResidualProbe probe;
      model.forward(tokens);
      samples = probe.samples;
    }
    QCOMPARE(samples.size(), std::size_t(4));  // attn and mlp of two layers, in execution order
    // Recompute layer 0 by hand from the embeddings.
    torch::NoGradGuard no_grad;
    const auto positions = torch::arange(7, torch::kLong);
    auto params = model.named_parameters();
    const auto x = params["tok_emb.weight"].index_select(0, tokens.flatten()).view({2, 7, 16}) +
                   params["pos_emb.weight"].index_select(0, positions);
    auto block = model.blocks[0];
    const auto a = block->attn(block->norm1(x), positions);
    const auto h = x + a;
    const auto m = block->mlp(block->norm2(h));
    QCOMPARE(samples[0].layer, 0);
    QCOMPARE(samples[0].block, std::string("attn"));
    QCOMPARE(samples[1].block, std::string("mlp"));
    QCOMPARE(samples[2].layer, 1);
    QVERIFY(torch::allclose(samples[0].ratio, ratio(x, a), 1e-5, 1e-6));
    QVERIFY(torch::allclose(samples[1].ratio, ratio(h, m), 1e-5, 1e-6));
  }

  void compactedRowsLandAtTheirPositions() {
    const auto decision = torch::tensor({{true, false, true, false}, {false, false, false, true}}).view({2, 4});
    const auto c = compact(decision);
    const auto x = torch::randn({2, c.max_len, 3});
    const auto u = torch::randn({2, c.max_len, 3});
    ResidualProbe probe;
    record_residual(5, "mlp", x, u, c);
    QCOMPARE(probe.samples.size(), std::size_t(1));
    const auto r = probe.samples[0].ratio;  // (2, 4)
    QCOMPARE(r.sizes().vec(), (std::vector<std::int64_t>{2, 4}));
    const auto expected = ratio(x, u);  // (2, K)
    QVERIFY(std::abs(r[0][0].item<float>() - expected[0][0].item<float>()) < 1e-6);
    QVERIFY(std::abs(r[0][2].item<float>() - expected[0][1].item<float>()) < 1e-6);
    QVERIFY(std::abs(r[1][3].item<float>() - expected[1][0].item<float>()) < 1e-6);
    QCOMPARE(r.isnan().sum().item<std::int64_t>(), std::int64_t(5));  // the tokens that did not run it
  }

  void routedLayersReportOnlyTheTokensThatRan() {
    TransformerOptions o;
    o.vocab_size(11).max_seq_len(16).n_layer(2).n_embd(16).n_head(2);
    MixtureOfDepths model(o, MoDOptions().capacity(0.5));
    model.train();  // top-k decides: exactly half of each sequence runs layer 1
    std::vector<ResidualSample> samples;
    {
      torch::NoGradGuard no_grad;
      ResidualProbe probe;
      model.forward(torch::randint(0, 11, {3, 8}, torch::kLong));
      samples = probe.samples;
    }
    QCOMPARE(samples.size(), std::size_t(4));
    QCOMPARE(samples[2].layer, 1);
    QCOMPARE(samples[2].ratio.isnan().logical_not().sum().item<std::int64_t>(), std::int64_t(3 * 4));
    QCOMPARE(samples[0].ratio.isnan().sum().item<std::int64_t>(), std::int64_t(0));
  }

  void reevaluationReproducesTheTrainersLastEvaluation() {
    const auto db = home_.filePath("eval.sqlite").toStdString();
    const auto outcome = train({small_config("dense"), db, "eval", ""});
    QCOMPARE(outcome.status, RunStatus::Finished);
    auto run = load_run(db, outcome.run_id);
    QCOMPARE(run.step, std::int64_t(20));
    QVERIFY(!run.model->is_training());
    const auto report = evaluate_run(run);
    QCOMPARE(report.batches, std::int64_t(3));
    RunStore store(db);
    const auto evals = store.evals(outcome.run_id);
    QVERIFY(std::abs(report.loss - evals.back().loss) < 1e-6);
    QCOMPARE(report.flops_ratio, 1.0);
    // Another split evaluates other tokens.
    auto test_run = load_run(db, outcome.run_id);
    const auto test = evaluate_run(test_run, {Split::Test, 3, 0});
    QCOMPARE(test.split, std::string("test"));
    QVERIFY(test.loss != report.loss);
    // An earlier checkpoint is another model.
    auto early = load_run(db, outcome.run_id, {}, 10);
    QCOMPARE(early.step, std::int64_t(10));
    double at_10 = -1;
    for (const auto& e : evals)
      if (e.step == 10) at_10 = e.loss;
    QVERIFY(std::abs(evaluate_run(early).loss - at_10) < 1e-6);
  }

  void evalOnlyOverridesChangeRoutingNotWeights() {
    const auto db = home_.filePath("mod.sqlite").toStdString();
    const auto outcome = train({small_config("mod", {"model.capacity=0.5"}), db, "mod", ""});
    QCOMPARE(outcome.status, RunStatus::Finished);
    // The router-weight form has no parameters of its own, so the trained weights load under either form.
    auto base = load_run(db, outcome.run_id);
    const auto as_trained = evaluate_run(base);
    auto run = load_run(db, outcome.run_id, {"model.router_weight=logit"});
    QCOMPARE(run.config.model().at("router_weight").get<std::string>(), std::string("logit"));
    const auto changed = evaluate_run(run);
    QVERIFY(changed.loss != as_trained.loss);
    QCOMPARE(changed.sets, (std::vector<std::string>{"model.router_weight=logit"}));
  }

  void profileAccountsForEveryToken() {
    const auto db = home_.filePath("profile.sqlite").toStdString();
    const auto outcome = train({small_config("dense"), db, "profile", ""});
    auto run = load_run(db, outcome.run_id);
    ResidualProfileOptions options;
    options.batches = 2;
    options.tau = 0.0;  // nothing is below 0: the oracle keeps every sub-block
    const auto all = profile_residuals(run, options);
    QCOMPARE(all.blocks.size(), std::size_t(4));
    const auto tokens = 2 * 8 * run.dataset->context();
    for (const auto& b : all.blocks) {
      QCOMPARE(b.count, tokens);
      QVERIFY(b.p10 <= b.p50 && b.p50 <= b.p90 && b.p90 <= b.max);
      std::int64_t in_histogram = 0;
      for (const auto n : b.histogram) in_histogram += n;
      QCOMPARE(in_histogram, tokens);
      QCOMPARE(b.below_tau, 0.0);
    }
    QCOMPARE(all.mean_executed, 4.0);
    QCOMPARE(all.mean_oracle_depth, 4.0);
    QCOMPARE(all.static_depth, 4.0);
    QCOMPARE(all.oracle_depth_histogram.back(), tokens);
    QVERIFY(all.probe.contains("tokens") && all.probe["blocks"].size() == 4);

    options.tau = 1e9;  // everything is below: the oracle skips every sub-block
    auto run2 = load_run(db, outcome.run_id);
    const auto none = profile_residuals(run2, options);
    QCOMPARE(none.mean_oracle_depth, 0.0);
    QCOMPARE(none.oracle_depth_histogram.front(), tokens);

    // Between the two: the oracle depth is the count of sub-blocks at or above tau.
    options.tau = all.blocks[0].p50;
    auto run3 = load_run(db, outcome.run_id);
    const auto mid = profile_residuals(run3, options);
    double expected = 0;
    for (const auto& b : mid.blocks) expected += 1.0 - b.below_tau;
    QVERIFY(std::abs(mid.mean_oracle_depth - expected) < 1e-9);
    QVERIFY(mid.to_table().find("oracle dynamic depth") != std::string::npos);
  }

  void overridesAreNamedByKind() {
    // The overrides an evaluation warns about, by kind: options read in training only whose value changed, and other
    // changed options but those meant for inference.
    const auto stored = schema_defaults(architecture("mod").options);
    auto model = stored;
    model["capacity"] = 0.5;
    model["router_weight"] = "logit";
    model["dropout"] = 0.3;
    model["rope_scaling"] = "yarn";
    model["rope_factor"] = 4.0;
    model["norm_eps"] = 1e-3;
    const auto overrides = model_overrides("mod", stored, model);
    QCOMPARE(overrides.training_only, (std::vector<std::string>{"dropout", "capacity"}));
    QCOMPARE(overrides.untrained, (std::vector<std::string>{"norm_eps", "router_weight"}));
    QVERIFY(overrides.unread.empty());
    const auto none = model_overrides("mod", stored, stored);
    QVERIFY(none.training_only.empty() && none.untrained.empty() && none.unread.empty());
    // An override the evaluated model does not read (OptionSpec::read_when), of any kind: named as unread alone.
    auto unread = stored;
    unread["rope_factor"] = 4.0;  // without rope_scaling
    unread["rope_theta"] = 500.0;
    const auto named = model_overrides("mod", stored, unread);
    QCOMPARE(named.unread, (std::vector<std::string>{"rope_factor"}));
    QCOMPARE(named.untrained, (std::vector<std::string>{"rope_theta"}));
    auto dtrnet = schema_defaults(architecture("dtrnet").options);
    auto capacity = dtrnet;
    capacity["capacity"] = 0.3;  // token routing
    QCOMPARE(model_overrides("dtrnet", dtrnet, capacity).unread, (std::vector<std::string>{"capacity"}));
    auto radial = schema_defaults(architecture("radial").options);
    radial["depth_coeff"] = 0.0;
    auto warmup = radial;
    warmup["depth_warmup"] = 0.5;  // a number's condition (OptionCondition::nonzero): no depth loss to ramp
    QCOMPARE(model_overrides("radial", radial, warmup).unread, (std::vector<std::string>{"depth_warmup"}));
    QCOMPARE(
        condition_value_text(*failed_condition(*find_option(architecture("radial").options, "depth_warmup"), warmup),
                             "model", warmup),
        std::string("model.depth_coeff is 0.0"));
  }

  void errorsNameTheRunAndKey() {
    const auto db = home_.filePath("errors.sqlite").toStdString();
    const auto outcome = train({small_config("dense"), db, "errors", ""});
    QVERIFY_EXCEPTION_THROWN(load_run(db, 999), StoreError);
    try {
      load_run(db, outcome.run_id, {"model.no_such_option=1"});
      QFAIL("expected a ConfigError");
    } catch (const ConfigError& e) {
      QVERIFY2(std::string(e.what()).find("model.no_such_option") != std::string::npos, e.what());
      QVERIFY2(std::string(e.what()).find("run " + std::to_string(outcome.run_id)) != std::string::npos, e.what());
    }
    QVERIFY_EXCEPTION_THROWN(load_run(db, outcome.run_id, {"model.n_embd=48"}), CheckpointError);
    // Other heads would read the same weights another way (no shape changes): refused by name.
    const auto heads = test::error_of<ConfigError>([&] { load_run(db, outcome.run_id, {"model.n_head=2"}); });
    QVERIFY2(
        heads.find("model.n_head: the run was trained with 4, and its weights are read by it") != std::string::npos,
        heads.c_str());
    // A smaller model would run on part of the trained weights: the layer it lacks is named, and the override.
    const auto fewer = test::error_of<CheckpointError>([&] { load_run(db, outcome.run_id, {"model.n_layer=1"}); });
    QVERIFY2(fewer.find("has no place in the model") != std::string::npos &&
                 fewer.find("model.n_layer=1") != std::string::npos,
             fewer.c_str());
    QVERIFY_EXCEPTION_THROWN(load_run(db, outcome.run_id, {}, 7), CheckpointError);
    QVERIFY_EXCEPTION_THROWN(parse_split("dev", "--split"), ConfigError);
  }
};

}  // namespace test_analysis

ROUTELAB_TEST_SUITE(test_analysis, TestAnalysis)
#include "test_analysis.moc"
