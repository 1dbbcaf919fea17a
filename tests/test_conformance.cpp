// The conformance suite (issue 20): checks that hold for every registered architecture, written once and run for each
// registry entry, one added later included. The configuration contract: an architecture's defaults resolve, every
// option of its schema reaches its options structs (which state the defaults) and reads back as set, and every option
// given a value outside its schema (below its minimum, above its maximum, an unknown choice, the wrong type) or an
// unknown key is a ConfigError naming model.<key>. Checkpoints: every language model trained a step, saved and loaded
// into a model of another seed gives the same logits and the same next step, and a run stopped and resumed logs the
// same losses bit for bit as one trained through. The entry is complete: a colour of its own, and for a language model
// a FLOPs model covering every layer whose priced share stat the forward reports; an architecture with a benchmark hook
// reaches the share it is forced to. Options marked as read in training only leave the eval-mode forward as it is,
// options marked for inference the parameters. Every language model is causal at inference; decoding token by token
// (batch 2, routing differently) equals the full forward and leaves the cache the trace's KV count states, a prompt
// pass the cache its registered KV rule prices; the matrix products ATen runs equal the priced FLOPs in inference and
// in training mode (the trace, exactly; in inference also estimate_flops at the measured shares, within 1%), work
// computed and then masked included; a forward sized by the previous one (the GPU's sized compactions, forced) repeats
// it; an evaluation run in shards and merged equals the whole one. Steps declared capturable as CUDA graphs:
// test_graph_conformance. tests/example_architecture.h is registered here for the whole suite: an architecture defined
// in one file of its own passes the same checks. Variants of each architecture (options, styles) are covered by
// test_generation, test_flops and the architecture's suite.
#include <QTemporaryDir>
#include <QtTest>

#include <atomic>
#include <cmath>
#include <functional>
#include <optional>
#include <set>
#include <tuple>

#include "core/config/experiment_config.h"
#include "core/config/options.h"
#include "core/cost/flop_counter.h"
#include "core/cost/flops_model.h"
#include "core/data/dataset.h"
#include "core/inference/kv_cache.h"
#include "core/models/blocks/attention.h"
#include "core/models/blocks/routing.h"
#include "core/models/classifier.h"
#include "core/models/language_model.h"
#include "core/models/registry.h"
#include "core/report/builders/catalog.h"
#include "core/report/export/figure_files.h"
#include "core/report/figure/figure.h"
#include "core/report/tables/run_tables.h"
#include "core/store/run_store.h"
#include "core/train/checkpoint.h"
#include "core/train/evaluation.h"
#include "core/train/optimizer.h"
#include "core/train/step.h"
#include "core/train/trainer.h"
#include "core/util/errors.h"
#include "tests/conformance_models.h"
#include "tests/conformance_support.h"
#include "tests/example_architecture.h"
#include "tests/suite.h"
#include "tests/train_test_support.h"

namespace test_conformance {

using namespace routelab;
using namespace routelab::test::conformance;
using routelab::test::short_run_config;
using routelab::test::StopAfter;

namespace {

/// A config document with model section `model`, on data the architecture's task accepts.
nlohmann::json document(const ArchitectureEntry& entry, nlohmann::json model) {
  nlohmann::json doc = {{"model", std::move(model)}};
  if (entry.task == Task::Classification) doc["data"] = {{"source", "entailment"}, {"tokenizer", "word"}};
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

/// A small eval-mode model of the entry with half of its tokens routed where a benchmark hook can force that, so
/// decisions vary between tokens and sequences.
std::shared_ptr<LanguageModel> routed_model(const ArchitectureEntry& entry, const torch::Tensor& tokens,
                                            std::uint64_t seed) {
  torch::manual_seed(seed);
  auto lm = create_model(small_model(entry), {kVocab, 32});
  lm->eval();
  if (entry.force_routed_share)
    for (int pass = 0; pass < 3; ++pass) entry.force_routed_share(*lm, tokens, 0.5);
  return lm;
}

/// One traced forward under the FLOP counter: the output and the matrix-product FLOPs ATen ran.
std::pair<ModelOutput, double> counted_forward(LanguageModel& lm, const torch::Tensor& tokens) {
  FlopCounter counter;
  auto out = lm.forward(tokens, true);
  counter.stop();
  return {std::move(out), counter.flops()};
}

/// The trace's priced layer FLOPs plus the LM head's.
double traced_flops(const ModelOutput& out, double head) {
  for (const auto& t : out.trace) head += t.flops;
  return head;
}

bool near(double a, double b, double rel) { return std::abs(a - b) <= rel * std::max(std::abs(a), std::abs(b)); }

/// The share the FLOPs model prices for each routed layer of a traced forward (the entry's priced_share_stat where
/// the layer reports it, else its routed fraction).
std::vector<double> priced_shares(const ArchitectureEntry& entry, const ModelOutput& out) {
  std::vector<double> shares;
  for (const auto& t : out.trace) {
    if (!t.routed) continue;
    const auto it = entry.priced_share_stat.empty() ? t.stats.end() : t.stats.find(entry.priced_share_stat);
    shares.push_back(it != t.stats.end() ? it->second : t.routed_fraction);
  }
  return shares;
}

}  // namespace

class TestConformance : public QObject {
  Q_OBJECT

  std::unique_ptr<ScopedArchitecture> example_;
  QTemporaryDir home_;

  /// For every other value of each option of the row's architecture that `marked` selects (no option is both
  /// training-only and for inference): the model built with it, holding a reference model's weights (the same
  /// tensors, or the check fails), and `check(spec, label, the reference's eval logits, its eval logits)`.
  template <class Marked, class Check>
  void for_each_marked_value(Marked marked, Check check) {
    QFETCH(QString, arch);
    const auto& entry = architecture(arch.toStdString());
    const auto base = small_model(entry);
    const auto reference = eval_model(entry, base, /*force_share=*/true);
    torch::NoGradGuard no_grad;
    const auto expected = reference.logits();
    for (const auto& spec : entry.options) {
      QVERIFY2(!(spec.training_only && spec.inference), spec.key.c_str());
      if (!marked(spec)) continue;
      for (const auto& value : other_values(spec)) {
        const auto what = spec.key + " = " + value.dump();
        const auto other = eval_model_with(entry, base, spec.key, value);
        if (!other) continue;
        QVERIFY2(copy_same_tensors(*reference.module, *other->module, what), qPrintable(QString::fromStdString(what)));
        check(spec, what, expected, other->logits());
        if (QTest::currentTestFailed()) return;
      }
    }
  }

 private Q_SLOTS:
  void initTestCase() {
    qputenv("ROUTELAB_HOME", home_.path().toUtf8());
    at::set_num_threads(2);
    example_ = std::make_unique<ScopedArchitecture>(example::mlp_skip_architecture());
    QVERIFY(architecture(example::kMlpSkipId).price_flops);  // registered like a built-in one
    QVERIFY_THROWS_EXCEPTION(std::logic_error, ScopedArchitecture{example::mlp_skip_architecture()});
  }
  void cleanupTestCase() {
    example_.reset();
    QVERIFY_THROWS_EXCEPTION(ConfigError, architecture(example::kMlpSkipId));
  }

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

  void optionsReachTheModel_data() { add_all_rows(); }
  void optionsReachTheModel() {
    // The schema is read into the architecture's options structs (whose defaults it states): the defaults read back
    // unchanged, and every option set to each other valid value reads back as that value with the rest unchanged,
    // so no key is ignored and no choice lands on another's enum value.
    QFETCH(QString, arch);
    const auto& entry = architecture(arch.toStdString());
    QVERIFY2(entry.read_back_options, "no read_back_options: the options are not bound to their structs");
    const auto defaults = schema_defaults(entry.options);
    QVERIFY2(entry.read_back_options(defaults) == defaults, entry.read_back_options(defaults).dump().c_str());
    for (const auto& spec : entry.options) {
      for (const auto& value : other_values(spec)) {
        auto section = defaults;
        section[spec.key] = value;
        const auto back = entry.read_back_options(section);
        QVERIFY2(back == section, qPrintable(QString::fromStdString(spec.key + " = " + value.dump() + " reads back as " +
                                                                   back.value(spec.key, nlohmann::json()).dump())));
      }
    }
  }

  void entryIsComplete_data() { add_all_rows(); }
  void entryIsComplete() {
    QFETCH(QString, arch);
    const auto& entry = architecture(arch.toStdString());
    QVERIFY(!entry.display_name.empty() && !entry.source.empty() && !entry.description.empty());
    // One colour per architecture in every figure: a palette index no other architecture of its task takes.
    QVERIFY(entry.color >= 0 && entry.color < static_cast<int>(figure_palette().size()));
    for (const auto& other : architectures())
      if (other.id != entry.id && other.task == entry.task) QVERIFY2(other.color != entry.color, other.id.c_str());
    for (const auto& [key, value] : entry.speed_options.items())  // benchmark options are options of its own
      QVERIFY2(find_option(entry.options, key), key.c_str());
    // So are the options its figures sweep: a regulariser weight, an eval-only option with values to re-evaluate.
    if (!entry.regulariser_option.empty()) {
      const auto* spec = find_option(entry.options, entry.regulariser_option);
      QVERIFY2(spec && spec->type == OptionType::Float, entry.regulariser_option.c_str());
    }
    if (!entry.eval_sweep.option.empty()) {
      QVERIFY2(find_option(entry.options, entry.eval_sweep.option), entry.eval_sweep.option.c_str());
      QVERIFY(!entry.eval_sweep.values.empty());
    }
    if (entry.task != Task::LanguageModel) {
      QVERIFY(!entry.price_flops && !entry.force_routed_share);  // classifiers are priced by the trace only
      return;
    }
    // A language model has a FLOPs model: an estimate layer by layer, with what its fractions mean.
    QVERIFY(entry.price_flops);
    QVERIFY(!entry.routed_fraction_meaning.empty());
    auto model = small_model(entry);
    for (const auto& [key, value] : entry.speed_options.items()) model[key] = value;
    FlopsQuery query;
    query.seq = 16;
    query.batch = 2;
    const auto est = estimate_flops(model, kVocab, query);
    QCOMPARE(static_cast<int>(est.layers.size()), model.at("n_layer").get<int>());
    for (const auto& l : est.layers) QVERIFY(l.flops > 0 && l.dense_flops > 0);
    QVERIFY(est.head_flops > 0 && est.total_ratio() > 0);
    // The stat it prices by is one its forward reports on every routed layer.
    torch::manual_seed(2);
    auto lm = create_model(model, {kVocab, 32});
    lm->eval();
    torch::NoGradGuard no_grad;
    const auto out = lm->forward(torch::randint(0, kVocab, {2, 16}, torch::kLong), true);
    for (const auto& t : out.trace)
      if (t.routed && !entry.priced_share_stat.empty())
        QVERIFY2(t.stats.count(entry.priced_share_stat), ("layer " + std::to_string(t.layer)).c_str());
    // A stored evaluation of this forward gives the FLOPs model the same shares.
    std::vector<LayerRouting> routed;
    for (const auto& t : out.trace)
      if (t.routed) routed.push_back({t.layer, t.kind, true, t.routed_fraction, t.flops, t.dense_flops, t.stats});
    const auto stored = read_layers(layers_json(routed), "stored layers");  // through the stored document
    QCOMPARE(fractions_from_trace(entry.id, stored), priced_shares(entry, out));
  }

  void sizedFormsRepeatTheForward_data() { add_language_model_rows(); }
  void sizedFormsRepeatTheForward() {
    // A routed model may size its compactions from the previous forward of the same batch size (the GPU's sized forms:
    // DTRNet's packed rows, padded compactions in eval, TSA's sparse FFN rows; forced on here, so the CPU runs them):
    // the second forward of a batch, sized by the first, gives the first one's logits and traced routing, in eval and
    // in training mode, in the speed benchmark's configuration (speed_options: TSA's sparse inference).
    QFETCH(QString, arch);
    const auto& entry = architecture(arch.toStdString());
    torch::manual_seed(4);
    auto model = small_model(entry);
    for (const auto& [key, value] : entry.speed_options.items()) model[key] = value;
    auto lm = create_model(model, {kVocab, 32});
    const auto tokens = torch::randint(0, kVocab, {3, 24}, torch::kLong);
    const ForcePackedRows packed;
    const ForcePaddedSized padded;
    for (const bool training : {false, true}) {
      training ? lm->train() : lm->eval();
      const auto forward = [&] {
        torch::manual_seed(5);  // the same dropout masks and Gumbel noise
        return lm->forward(tokens, true);
      };
      const auto first = forward(), second = forward();
      QVERIFY2(torch::allclose(first.logits, second.logits, 1e-5, 1e-5), training ? "training" : "eval");
      QCOMPARE(first.trace.size(), second.trace.size());
      for (std::size_t i = 0; i < first.trace.size(); ++i) {
        QCOMPARE(first.trace[i].routed_fraction, second.trace[i].routed_fraction);
        QCOMPARE(first.trace[i].tokens_processed, second.trace[i].tokens_processed);
      }
    }
  }

  void forcedShareIsReached_data() {
    add_rows([](const ArchitectureEntry& e) { return static_cast<bool>(e.force_routed_share); });
  }
  void forcedShareIsReached() {
    // The benchmark hook puts the asked share of tokens on the routed path of every routed layer, in the speed
    // benchmark's configuration (speed_options), as the FLOPs model reads the share.
    QFETCH(QString, arch);
    const auto& entry = architecture(arch.toStdString());
    auto model = small_model(entry);
    for (const auto& [key, value] : entry.speed_options.items()) model[key] = value;
    torch::manual_seed(3);
    auto lm = create_model(model, {kVocab, 32});
    lm->eval();
    const auto tokens = torch::randint(0, kVocab, {4, 32}, torch::kLong);
    for (const double target : {0.25, 0.75}) {
      for (int pass = 0; pass < 3; ++pass) entry.force_routed_share(*lm, tokens, target);
      torch::NoGradGuard no_grad;
      const auto shares = priced_shares(entry, lm->forward(tokens, true));
      QVERIFY(!shares.empty());
      for (const double s : shares)
        QVERIFY2(std::abs(s - target) < 0.05, qPrintable(QString("share %1 for target %2").arg(s).arg(target)));
    }
  }

  void stepTimeGoesToItsParts_data() { add_language_model_rows(); }
  void stepTimeGoesToItsParts() {
    // The profiles' time by part (ROUTELAB_PART): every top-level op of a training step is attributed once, most of
    // the forward and of the backward to named parts (the backward by the part of its forward op), so that a new
    // architecture built from the shared blocks is profiled by part with no more code of its own than a part's name
    // around what it adds (the example architecture's router).
    QFETCH(QString, arch);
    const auto& entry = architecture(arch.toStdString());
    torch::manual_seed(4);
    auto lm = create_model(small_model(entry), {kVocab, 32});
    lm->train();
    const auto train = adamw_options();
    auto opt = make_optimizer(*lm, train);
    const auto tokens = torch::randint(0, kVocab, {2, 24}, torch::kLong);
    train_step(*lm, *opt, {tokens, tokens, {}}, 1.0, false, false);  // the optimizer's state exists
    OpClassProfiler profiler;
    train_step(*lm, *opt, {tokens, tokens, {}}, 1.0, false, false);
    profiler.stop();
    // Shares by count of top-level ops (timings on a shared machine vary; which op lands in which part does not).
    double ops = 0, parts = 0, named_forward = 0, forward = 0, named_backward = 0, backward = 0;
    for (const auto& [cls, ms] : profiler.classes_ms())
      if (cls != "outside ops (host code)") ops += ms;
    const auto by_part = profiler.parts_ms();
    for (const auto& [name, t] : by_part) {
      parts += t.total();
      forward += t.forward_calls;
      backward += t.backward_calls;
      if (name.front() == '(') continue;
      named_forward += t.forward_calls;
      named_backward += t.backward_calls;
    }
    QVERIFY2(near(parts, ops, 1e-9), qPrintable(QString("parts %1 ms, ops %2 ms").arg(parts).arg(ops)));
    QCOMPARE(forward + backward, static_cast<double>(profiler.ops()));
    for (const auto* name : {"embedding", "norm", "head", "loss", "optimizer"})
      QVERIFY2(by_part.count(name), name);
    QVERIFY2(named_forward > 0.75 * forward && named_backward > 0.75 * backward,
             qPrintable(QString("named forward %1 of %2 ops, backward %3 of %4")
                            .arg(named_forward).arg(forward).arg(named_backward).arg(backward)));
    // Matrix products are the blocks' and the routers' work: the part that gathers rows and puts them back runs none
    // (Radial Networks' output projections had gone to it, doubling its share of the step).
    const auto pieces = profiler.part_pieces();
    if (const auto routing = pieces.find("routing"); routing != pieces.end())
      for (const auto* product : {"aten::mm", "aten::addmm", "aten::linear", "aten::matmul", "aten::bmm"})
        QVERIFY2(!routing->second.count(product), qPrintable(arch + ": " + product + " in the routing part"));
    qInfo("%s: named %.0f of %.0f forward, %.0f of %.0f backward", qPrintable(arch), named_forward, forward,
          named_backward, backward);
  }

  void causalityAtInference_data() { add_language_model_rows(); }
  void causalityAtInference() {
    // Changing the tokens after position t changes no output up to t: routing at inference uses the past only.
    // Where a benchmark hook exists, half the tokens are routed first, so the decisions vary along the sequence.
    QFETCH(QString, arch);
    const auto& entry = architecture(arch.toStdString());
    torch::manual_seed(5);
    auto lm = create_model(small_model(entry), {kVocab, 32});
    lm->eval();
    const std::int64_t T = 24;
    const auto a = torch::randint(0, kVocab, {2, T}, torch::kLong);
    if (entry.force_routed_share) entry.force_routed_share(*lm, a, 0.5);
    torch::NoGradGuard no_grad;
    for (const std::int64_t t : {0, 7, 22}) {
      auto b = a.clone();
      b.narrow(1, t + 1, T - t - 1).random_(0, kVocab);
      const auto la = lm->forward(a).logits, lb = lm->forward(b).logits;
      QVERIFY2(torch::allclose(la.narrow(1, 0, t + 1), lb.narrow(1, 0, t + 1), 1e-5, 1e-5),
               qPrintable(QString("an output up to position %1 changed").arg(t)));
      QVERIFY(!torch::allclose(la.narrow(1, t + 1, T - t - 1), lb.narrow(1, t + 1, T - t - 1)));
    }
  }

  void trainingOnlyOptionsLeaveInference_data() { add_all_rows(); }
  void trainingOnlyOptionsLeaveInference() {
    // An option the schema marks as read in training only (an eval override of it warns that it changes nothing)
    // changes neither the parameters nor the eval-mode forward of the same weights, at every other value it takes.
    for_each_marked_value([](const OptionSpec& spec) { return spec.training_only; },
                          [](const OptionSpec&, const std::string& what, const torch::Tensor& expected,
                             const torch::Tensor& logits) {
                            QVERIFY2(torch::allclose(logits, expected, 1e-6, 1e-6),
                                     qPrintable(QString::fromStdString(what + ": the eval-mode forward changed")));
                          });
  }

  void optionsAreUnreadWhereTheirSchemaSays_data() { add_all_rows(); }
  void optionsAreUnreadWhereTheirSchemaSays() {
    // An option the schema marks as read only where other options take some values (read_when; elsewhere a value set
    // away from its default is named as unread): each condition names a choice of the schema by its choices (or a
    // number, read where it is not 0), and where one fails, every other value of the option leaves the parameters,
    // the eval-mode forward and a training forward (logits and auxiliary loss, from the same seed) of the same
    // weights as they were.
    QFETCH(QString, arch);
    const auto& entry = architecture(arch.toStdString());
    for (const auto& spec : entry.options)
      for (const auto& condition : spec.read_when) {
        const auto* on = find_option(entry.options, condition.key);
        const bool number = on && (on->type == OptionType::Float || on->type == OptionType::Int);
        QVERIFY2(on && (condition.nonzero ? number && condition.values.empty() : on->type == OptionType::Choice),
                 qPrintable(QString::fromStdString(spec.key + ": " + condition.key)));
        for (const auto& v : condition.values)
          QVERIFY2(std::find(on->choices.begin(), on->choices.end(), v) != on->choices.end(), v.c_str());
        const auto base = section_failing(entry, small_model(entry), condition, *on);
        QVERIFY2(base, qPrintable(QString::fromStdString(spec.key + ": no base outside " + condition.key)));
        const auto reference = seeded_forwards(entry, *base, nullptr, "reference");
        for (const auto& value : other_values(spec)) {
          auto section = *base;
          section[spec.key] = value;
          const auto what =
              spec.key + " = " + value.dump() + " with " + condition.key + " = " + base->at(condition.key).dump();
          const auto other = seeded_forwards(entry, section, reference.module.get(), what);
          QVERIFY2(other.same, qPrintable(QString::fromStdString(what + ": other tensors")));
          QVERIFY2(torch::allclose(other.eval, reference.eval, 1e-6, 1e-6),
                   qPrintable(QString::fromStdString(what + ": eval forward")));
          QVERIFY2(torch::allclose(other.train, reference.train, 1e-6, 1e-6) &&
                       torch::allclose(other.aux, reference.aux, 1e-6, 1e-6),
                   qPrintable(QString::fromStdString(what + ": training forward")));
        }
      }
  }

  void weightLayoutOptionsReadTheSameTensorsOtherwise_data() { add_all_rows(); }
  void weightLayoutOptionsReadTheSameTensorsOtherwise() {
    // An option the schema marks as one the weights are read by (refused by name at evaluation) needs the mark: at
    // some other value the architecture's check accepts, the model holds the same tensors, so the checkpoint would
    // load, and its eval forward computes something else.
    QFETCH(QString, arch);
    const auto& entry = architecture(arch.toStdString());
    auto base = small_model(entry);
    if (base.contains("n_kv_head")) base["n_kv_head"] = 0;  // grouped key/value heads: the heads change the shapes
    const auto reference = eval_model(entry, base, /*force_share=*/false);
    torch::NoGradGuard no_grad;
    const auto expected = reference.logits();
    for (const auto& spec : entry.options) {
      if (!spec.weight_layout) continue;
      QVERIFY2(!spec.inference && !spec.training_only, spec.key.c_str());
      bool loads = false;
      for (const auto& value : other_values(spec)) {
        const auto what = spec.key + " = " + value.dump();
        const auto other = eval_model_with(entry, base, spec.key, value);
        if (!other || !copy_same_tensors(*reference.module, *other->module, what)) continue;
        loads = true;
        QVERIFY2(!torch::allclose(other->logits(), expected, 1e-4, 1e-4),
                 qPrintable(QString::fromStdString(what + ": the same forward (the mark is not needed)")));
      }
      QVERIFY2(loads, qPrintable(QString::fromStdString(spec.key + ": no other value holds the same tensors")));
    }
  }

  void inferenceOptionsKeepTheWeights_data() { add_all_rows(); }
  void inferenceOptionsKeepTheWeights() {
    // An option the schema marks as one an evaluation may set runs the trained weights at every other value it takes:
    // the same parameters and buffers, of the same shapes, and a forward of finite logits; the same logits where it
    // marks the values as computing the same result (an oracle, a sparse dispatch).
    for_each_marked_value([](const OptionSpec& spec) { return spec.inference; },
                          [](const OptionSpec& spec, const std::string& what, const torch::Tensor& expected,
                             const torch::Tensor& logits) {
                            QVERIFY2(logits.sizes() == expected.sizes() && torch::isfinite(logits).all().item<bool>(),
                                     qPrintable(QString::fromStdString(what + ": no forward of the trained weights")));
                            QVERIFY2(!spec.same_result || torch::allclose(logits, expected, 1e-5, 1e-5),
                                     qPrintable(QString::fromStdString(what + ": another result")));
                          });
  }

  void decodeEqualsForward_data() { add_language_model_rows(); }
  void decodeEqualsForward() {
    QFETCH(QString, arch);
    const auto& entry = architecture(arch.toStdString());
    const std::int64_t T = 20;
    const auto tokens = torch::randint(0, kVocab, {2, T}, torch::kLong);
    auto lm = routed_model(entry, tokens, 6);
    torch::NoGradGuard no_grad;
    const auto full = lm->forward(tokens, true);
    // Token by token: the logits of an eval-mode forward, and the cache the trace's count states.
    auto state = lm->begin_decode(2);
    std::vector<torch::Tensor> steps;
    for (std::int64_t t = 0; t < T; ++t) steps.push_back(lm->decode(*state, tokens.narrow(1, t, 1)));
    const auto diff = (torch::cat(steps, 1) - full.logits).abs().max().item<double>();
    QVERIFY2(diff < 1e-4, qPrintable(QString("max |decode - forward| = %1").arg(diff)));
    std::int64_t analytic = 0;
    for (const auto e : analytic_kv_entries(full.trace, 2, T)) analytic += e;
    QCOMPARE(state->entries(), analytic);
    QCOMPARE(state->live_bytes(), analytic * state->caches().front().entry_bytes());
    // One prompt pass: the same logits, and the cache the registered KV rule prices from the stored record.
    auto prompt = lm->begin_decode(2);
    QVERIFY((lm->decode(*prompt, tokens) - full.logits).abs().max().item<double>() < 1e-4);
    InferenceRouting routing;
    routing.add(full.trace);
    const auto stored = read_evaluation({0, "val", 0, 0, 0, evaluation_extra_json(routing.record()).dump()});
    double priced = 0;
    for (const auto& layer : stored.layers) priced += 2 * layer_kv_entries(layer, double(T));
    QVERIFY2(near(static_cast<double>(prompt->entries()), priced, 1e-9),
             qPrintable(QString("the cache holds %1 entries, the rule prices %2").arg(prompt->entries()).arg(priced)));
  }

  void countedEqualsPriced_data() { add_language_model_rows(); }
  void countedEqualsPriced() {
    // Batch 1 for the FLOPs model, whose even spread of routed tokens over sequences is then exact.
    QFETCH(QString, arch);
    const auto& entry = architecture(arch.toStdString());
    const std::int64_t T = 24;
    const auto tokens = torch::randint(0, kVocab, {1, T}, torch::kLong);
    auto lm = routed_model(entry, tokens, 7);
    const auto model = small_model(entry);
    const double head = 2.0 * T * model.at("n_embd").get<double>() * kVocab;
    torch::NoGradGuard no_grad;
    // Inference mode: the products executed equal the trace's priced layers plus the head, and estimate_flops at
    // the shares the trace measured (within 1%: Radial's estimate assumes the most even depths for the mean depth).
    auto [out, counted] = counted_forward(*lm, tokens);
    const double traced = traced_flops(out, head);
    QVERIFY2(near(counted, traced, 1e-9),
             qPrintable(QString("inference: counted %1, traced %2").arg(counted, 0, 'g', 12).arg(traced, 0, 'g', 12)));
    InferenceRouting measured;
    measured.add(out.trace);
    FlopsQuery q;
    q.seq = T;
    q.fractions = fractions_from_trace(entry.id, measured.layers());
    const auto est = estimate_flops(model, kVocab, q);
    qInfo("%s: counted %.8g, estimated %.8g", qPrintable(arch), counted, est.total_flops());
    QVERIFY2(near(counted, est.total_flops(), 0.01),
             qPrintable(QString("inference: counted %1, estimated %2").arg(counted, 0, 'g', 12).arg(est.total_flops(), 0, 'g', 12)));
    QVERIFY(near(est.head_flops, head, 1e-12));
    // Batch 2, the sequences routing differently, in inference and in training mode: the trace prices what runs,
    // padding rows of compacted sequences included.
    const auto pair = torch::randint(0, kVocab, {2, T}, torch::kLong);
    for (const bool training : {false, true}) {
      lm->train(training);
      std::tie(out, counted) = counted_forward(*lm, pair);
      const double priced = traced_flops(out, 2 * head);
      if (!training) {  // where decisions are mixed, the rows route differently somewhere (compaction pads one)
        bool mixed = false, uneven = false;
        for (const auto& t : out.trace) {
          if (!t.decision.defined() || t.decision.dim() != 2) continue;
          const auto counts = t.decision.sum(1);
          const auto all = counts.sum().item<std::int64_t>();
          if (all == 0 || all == t.decision.numel()) continue;
          mixed = true;
          uneven = uneven || counts[0].item<std::int64_t>() != counts[1].item<std::int64_t>();
        }
        QVERIFY2(!mixed || uneven, "every mixed routed layer routes as many tokens in both sequences");
      }
      QVERIFY2(near(counted, priced, 1e-9), qPrintable(QString("%1, batch 2: counted %2, priced %3")
                                                           .arg(training ? "training" : "inference")
                                                           .arg(counted, 0, 'g', 12)
                                                           .arg(priced, 0, 'g', 12)));
    }
    // Under bf16 autocast the compacted attention runs the padded B K^2 rectangle (the kernels of a GPU), not the
    // CPU's per-sequence k^2: still priced as executed.
    lm->eval();
    AutocastGuard autocast(true, torch::kCPU);
    std::tie(out, counted) = counted_forward(*lm, pair);
    const double priced = traced_flops(out, 2 * head);
    QVERIFY2(near(counted, priced, 1e-9),
             qPrintable(QString("bf16, batch 2: counted %1, priced %2").arg(counted, 0, 'g', 12).arg(priced, 0, 'g', 12)));
  }

  void resumeIsExact_data() { add_language_model_rows(); }
  void resumeIsExact() {
    // A run stopped at step 3 and resumed from its checkpoint logs the same losses, bit for bit, as the same run
    // trained without a stop (weights, optimizer, data order, RNG and schedule all travel in the checkpoint).
    QFETCH(QString, arch);
    const auto db = home_.filePath("resume-%1.sqlite").arg(arch).toStdString();
    const auto config = resolve_config(nlohmann::json::object(),
                                       {"model.arch=" + arch.toStdString(), "model.n_layer=4", "model.n_embd=32",
                                        "model.n_head=4", "data.source=copy", "train.batch_size=4", "train.steps=6",
                                        "train.eval_every=3", "train.checkpoint_every=3", "train.log_every=1",
                                        "train.eval_batches=1", "train.warmup_steps=2", "run.threads=2"},
                                       "conformance");
    const auto full = train({config, db, "full", ""});
    QCOMPARE(full.status, RunStatus::Finished);
    std::atomic<bool> cancel{false};
    StopAfter stopper(cancel, 3);
    const auto part = train({config, db, "part", ""}, &stopper, &cancel);
    QCOMPARE(part.status, RunStatus::Stopped);
    QCOMPARE(part.last_step, std::int64_t(3));
    QCOMPARE(resume(db, part.run_id).status, RunStatus::Finished);
    RunStore store(db);
    for (const char* key : {"train/loss", "val/loss"}) {
      const auto a = store.metric(full.run_id, key), b = store.metric(part.run_id, key);
      QCOMPARE(b.size(), a.size());
      for (std::size_t i = 0; i < a.size(); ++i)
        QVERIFY2(a[i].step == b[i].step && a[i].value == b[i].value,
                 qPrintable(QString("%1 at step %2: %3 vs %4").arg(key).arg(a[i].step).arg(a[i].value, 0, 'g', 17)
                                .arg(b[i].value, 0, 'g', 17)));
    }
  }

  void shardedEvaluationIsTheWhole_data() { add_language_model_rows(); }
  void shardedEvaluationIsTheWhole() {
    // Data-parallel evaluation: each rank runs every world_size-th validation batch and rank 0 merges the ranks'
    // passes, received as JSON. Three shards of five batches, merged so, are the whole evaluation: its loss,
    // statistics, and every layer's routed share, statistics and FLOPs.
    QFETCH(QString, arch);
    const auto& entry = architecture(arch.toStdString());
    const auto config = resolve_config(nlohmann::json::object(), {"data.source=copy"}, "conformance");
    const auto data = make_dataset(config.data());
    torch::manual_seed(6);
    auto lm = create_model(small_model(entry), {data->tokenizer().vocab_size(), data->context()});
    const auto evaluate = [&](std::int64_t shard, std::int64_t shards) {
      return evaluate_split(*lm, *data, Split::Val, 5, 3, 11, torch::kCPU, false, shard, shards);
    };
    const auto whole = evaluate(0, 1);
    EvalPass merged;
    for (std::int64_t shard = 0; shard < 3; ++shard)
      merged.merge(EvalPass::from_json(nlohmann::json::parse(evaluate(shard, 3).to_json().dump())));
    QCOMPARE(merged.batches, std::int64_t{5});
    QCOMPARE(whole.batches, std::int64_t{5});
    QVERIFY2(near(merged.loss, whole.loss, 1e-9), qPrintable(QString("%1 vs %2").arg(merged.loss).arg(whole.loss)));
    QCOMPARE(merged.stats.size(), whole.stats.size());
    for (const auto& [key, value] : whole.stats) QVERIFY2(near(merged.stats.at(key), value, 1e-9), key.c_str());
    const auto a = whole.routing.record(), b = merged.routing.record();
    QVERIFY(a.flops_ratio && b.flops_ratio && near(*b.flops_ratio, *a.flops_ratio, 1e-12));
    QCOMPARE(b.layers.size(), a.layers.size());
    for (std::size_t i = 0; i < a.layers.size(); ++i) {
      QCOMPARE(b.layers[i].kind, a.layers[i].kind);
      QVERIFY(near(b.layers[i].routed_fraction, a.layers[i].routed_fraction, 1e-12));
      QVERIFY(near(b.layers[i].flops, a.layers[i].flops, 1e-12));
      QCOMPARE(b.layers[i].stats.size(), a.layers[i].stats.size());
      for (const auto& [key, value] : a.layers[i].stats)
        QVERIFY2(near(b.layers[i].stats.at(key), value, 1e-9), key.c_str());
    }
  }

  void namedFiguresAndTablesRender_data() { add_all_rows(); }
  void namedFiguresAndTablesRender() {
    // Every named figure and table, asked for two short runs of the architecture, either builds with data (a figure
    // also its CSV and pgfplots exports) or refuses with a ConfigError or DataError naming itself; nothing else is
    // thrown. The generic figures that apply to every run of the architecture's task build.
    QFETCH(QString, arch);
    const auto& entry = architecture(arch.toStdString());
    const auto db = home_.filePath("figures-%1.sqlite").arg(arch).toStdString();
    std::vector<std::int64_t> runs;
    for (const int seed : {1, 2}) {
      const auto outcome = train({short_run_config(entry, seed), db, "figures-" + std::to_string(seed), ""});
      QCOMPARE(outcome.status, RunStatus::Finished);
      runs.push_back(outcome.run_id);
    }
    RunStore store(db);
    QStringList built, refused;
    for (const auto& info : figure_catalog()) {
      FigureRequest request;
      request.name = info.name;
      request.run_ids = runs;
      try {
        const auto figure = build_figure(store, request);
        QVERIFY2(!figure.empty(), qPrintable(QString::fromStdString(info.name + ": built without data")));
        QVERIFY(figure_to_csv(figure).find('\n') != std::string::npos);
        QVERIFY(!figure_to_pgfplots(figure, info.name + ".csv").empty());
        built << QString::fromStdString(info.name);
      } catch (const std::exception& e) {
        const bool clear = dynamic_cast<const ConfigError*>(&e) || dynamic_cast<const DataError*>(&e);
        QVERIFY2(clear && std::string(e.what()).find(info.name) != std::string::npos,
                 qPrintable(QString::fromStdString(info.name + " threw: " + e.what())));
        refused << QString::fromStdString(info.name + " (" + e.what() + ")");
      }
    }
    qInfo("%s: built %s", qPrintable(arch), qPrintable(built.join(", ")));
    qInfo("%s: refused %s", qPrintable(arch), qPrintable(refused.join("; ")));
    const std::vector<std::string> generic =
        entry.task == Task::LanguageModel ? std::vector<std::string>{"curves", "matched", "pareto", "cost-length", "token-maps"}
                           : std::vector<std::string>{"curves", "matched", "pareto"};
    for (const auto& name : generic) QVERIFY2(built.contains(QString::fromStdString(name)), name.c_str());
    for (const auto& spec : table_specs()) {  // the same for the named tables: rows, or a refusal naming the table
      try {
        QVERIFY2(!build_run_table(store, spec, runs).rows.empty(), spec.name.c_str());
      } catch (const std::exception& e) {
        const bool clear = dynamic_cast<const ConfigError*>(&e) || dynamic_cast<const DataError*>(&e);
        QVERIFY2(clear && std::string(e.what()).find(spec.name) != std::string::npos,
                 qPrintable(QString::fromStdString(spec.name + " threw: " + e.what())));
      }
    }
  }

  void checkpointRoundTrip_data() { add_language_model_rows(); }
  void checkpointRoundTrip() {
    QFETCH(QString, arch);
    const auto model = small_model(architecture(arch.toStdString()));
    const auto train = adamw_options();
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
