// What a router routes (core/analysis/routing_breakdown.h): token classes read from the characters, routing rules
// planted in a stand-in model found in the right groups (by class, position and predictability), every registered
// language model's groups adding up to its overall share, and clear errors.
#include <QTemporaryDir>
#include <QtTest>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>

#include "core/analysis/routing_breakdown.h"
#include "core/config/experiment_config.h"
#include "core/data/dataset.h"
#include "core/data/tokenizer.h"
#include "core/models/language_model.h"
#include "core/models/registry.h"
#include "core/report/builders/catalog.h"
#include "core/report/figure/figure.h"
#include "core/report/tables/table.h"
#include "core/store/run_store.h"
#include "core/train/evaluation.h"
#include "core/train/trainer.h"
#include "core/util/errors.h"
#include "core/util/interrupt.h"
#include "tests/conformance_support.h"
#include "tests/data_test_support.h"
#include "tests/store_test_support.h"
#include "tests/suite.h"

namespace test_routing_breakdown {

using namespace routelab;
using routelab::test::contains;
using routelab::test::error_of;
using routelab::test::RawDb;

namespace {

/// A stand-in language model: layer 0 dense, layer 1 routing the tokens `rule` picks ((B, T) ids -> (B, T) bool),
/// with gate 0.75 on them and 0 elsewhere. Its logits favour repeating the current token (by `repeat_logit`), so
/// a token equal to the one before it is predictable and every other token is not.
class RuleRouted : public LanguageModel {
 public:
  RuleRouted(std::int64_t vocab, std::function<torch::Tensor(const torch::Tensor&)> rule, double repeat_logit = 0)
      : vocab_(vocab), rule_(std::move(rule)), repeat_logit_(repeat_logit) {}

  ModelOutput forward(const torch::Tensor& tokens, bool trace) override {
    ModelOutput out;
    out.logits = torch::one_hot(tokens, vocab_).to(torch::kFloat) * repeat_logit_;
    if (!trace) return out;
    LayerTrace dense;
    dense.layer = 0;
    out.trace.push_back(dense);
    LayerTrace routed;
    routed.layer = 1;
    routed.kind = "rule";
    routed.routed = true;
    routed.decision = rule_(tokens);
    routed.gate = routed.decision.to(torch::kFloat) * 0.75;
    out.trace.push_back(routed);
    return out;
  }
  std::string arch_id() const override { return "rule-routed"; }
  std::int64_t num_layers() const override { return 2; }
  std::int64_t vocab_size() const override { return vocab_; }

 private:
  std::int64_t vocab_;
  std::function<torch::Tensor(const torch::Tensor&)> rule_;
  double repeat_logit_;
};

const BreakdownTable& table(const RoutingBreakdown& b, TokenGrouping by) {
  for (const auto& t : b.tables)
    if (t.by == by) return t;
  throw Error("no table by " + to_string(by));
}

const BreakdownGroup& group(const RoutingBreakdown& b, TokenGrouping by, const std::string& label) {
  for (const auto& g : table(b, by).groups)
    if (g.label == label) return g;
  throw Error("no group " + label);
}

}  // namespace

class TestRoutingBreakdown : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  std::string corpus_;
  std::unique_ptr<LmDataset> data_;

  RoutingBreakdown planted(std::function<torch::Tensor(const torch::Tensor&)> rule, double repeat_logit = 0) {
    RuleRouted model(data_->tokenizer().vocab_size(), std::move(rule), repeat_logit);
    RoutingBreakdownOptions options;
    options.tokens = 4096;
    options.batch_size = 16;
    options.frequency_tokens = 20000;
    return routing_breakdown(model, *data_, options);
  }

  std::string db_;
  std::map<std::string, std::int64_t> runs_;

  /// A DTRNet and a dense run of six steps on the corpus (checkpoints at steps 3 and 6), trained by the first test
  /// that asks.
  const std::map<std::string, std::int64_t>& trained() {
    if (!runs_.empty()) return runs_;
    db_ = dir_.filePath("runs.sqlite").toStdString();
    for (const std::string arch : {"dtrnet", "dense"}) {
      const auto config =
          resolve_config(nlohmann::json::object(),
                         {"model.arch=" + arch, "model.n_layer=3", "model.n_embd=32", "model.n_head=4",
                          "data.source=file", "data.path=" + corpus_, "data.context=32", "train.batch_size=8",
                          "train.steps=6", "train.eval_every=6", "train.checkpoint_every=3", "train.eval_batches=1",
                          "train.log_every=3", "train.warmup_steps=2", "run.threads=1"},
                         "test");
      const auto outcome = train({config, db_, arch, ""});
      if (outcome.status != RunStatus::Finished) throw Error(arch + ": " + outcome.message);
      runs_[arch] = outcome.run_id;
    }
    return runs_;
  }

  /// The ids of the vocabulary whose text token_class puts in `label` (after a letter, or not).
  torch::Tensor ids_of_class(const std::string& label, bool after_alnum) {
    const auto& tok = data_->tokenizer();
    std::vector<std::int64_t> ids;
    for (std::int64_t id = 0; id < tok.vocab_size(); ++id)
      if (token_class(tok.token_text(id), after_alnum) == label) ids.push_back(id);
    return torch::tensor(ids, torch::kLong);
  }

 private Q_SLOTS:
  void initTestCase() {
    qputenv("ROUTELAB_HOME", dir_.path().toUtf8());
    corpus_ = dir_.filePath("corpus.txt").toStdString();
    std::ofstream(corpus_) << routelab::test::corpus_head(60000);
    data_ = make_dataset(resolve_config(nlohmann::json::object(),
                                        {"data.source=file", "data.path=" + corpus_, "data.context=32"}, "test")
                             .data());
  }

  void tokenClassesFollowTheCharacters_data() {
    QTest::addColumn<QString>("text");
    QTest::addColumn<bool>("afterAlnum");
    QTest::addColumn<QString>("expected");
    QTest::newRow("space") << " " << true << "space";
    QTest::newRow("tab as shown") << "\u21E5" << false << "space";
    QTest::newRow("newline as shown") << "\u23CE" << true << "newline";
    QTest::newRow("spaces and a newline") << " \u23CE " << false << "newline";
    QTest::newRow("comma") << "," << true << "punctuation";
    QTest::newRow("comma after a space marker") << " ," << true << "punctuation";
    QTest::newRow("em dash") << "\u2014" << true << "punctuation";
    QTest::newRow("single angle bracket") << "<" << false << "punctuation";
    QTest::newRow("digit") << "7" << true << "digit";
    QTest::newRow("subword number") << " 12" << true << "digit";
    QTest::newRow("letter after a space") << "a" << false << "word start";
    QTest::newRow("letter inside a word") << "a" << true << "mid-word";
    QTest::newRow("subword with its space") << " the" << true << "word start";
    QTest::newRow("suffix piece") << "ing" << true << "mid-word";
    QTest::newRow("apostrophe piece") << "'s" << true << "mid-word";
    QTest::newRow("letter after a digit") << "x" << true << "mid-word";
    QTest::newRow("accented letter") << "\u00E9" << true << "mid-word";
    QTest::newRow("byte piece") << "<0xE2>" << true << "other";
    QTest::newRow("code point marker") << "<U+0001>" << false << "other";
    QTest::newRow("unknown") << "<unk>" << false << "other";
    QTest::newRow("id without text") << "\u27E817\u27E9" << false << "other";
  }
  void tokenClassesFollowTheCharacters() {
    QFETCH(QString, text);
    QFETCH(bool, afterAlnum);
    QFETCH(QString, expected);
    QCOMPARE(QString::fromStdString(token_class(text.toStdString(), afterAlnum)), expected);
  }

  void endsInAlnumReadsTheLastCharacter() {
    QVERIFY(ends_in_alnum("the"));
    QVERIFY(ends_in_alnum(" 42"));
    QVERIFY(!ends_in_alnum("the,"));
    QVERIFY(!ends_in_alnum(" "));
    QVERIFY(!ends_in_alnum("<0x41>"));
    QVERIFY(!ends_in_alnum(""));
  }

  void plantedClassRoutingIsFound() {
    // Route the spaces and the punctuation: those groups at 100% (gate 0.75), letters and digits at 0%.
    const auto picked = torch::cat({ids_of_class("space", false), ids_of_class("punctuation", false)});
    const auto b = planted([&](const torch::Tensor& t) { return torch::isin(t, picked); });
    QCOMPARE(b.layers.size(), std::size_t(1));
    QCOMPARE(b.layers[0].layer, 1);
    for (const std::string label : {"space", "punctuation"}) {
      const auto& g = group(b, TokenGrouping::Class, label);
      QVERIFY2(g.tokens > 20, label.c_str());
      QCOMPARE(g.routed[0], 1.0);
      QCOMPARE(g.gate[0], 0.75);
    }
    for (const std::string label : {"word start", "mid-word", "newline"}) {
      const auto& g = group(b, TokenGrouping::Class, label);
      QVERIFY2(g.tokens > 20, label.c_str());
      QCOMPARE(g.routed[0], 0.0);
      QCOMPARE(g.gate[0], 0.0);
    }
    QVERIFY(group(b, TokenGrouping::Class, "mid-word").tokens > group(b, TokenGrouping::Class, "word start").tokens);
  }

  void plantedPositionRoutingIsFound() {
    // Route the first four positions of every window: buckets 0 and 1-3 at 100%, the rest at 0%.
    const auto b = planted(
        [](const torch::Tensor& t) { return torch::arange(t.size(1)).lt(4).unsqueeze(0).expand_as(t).clone(); });
    const auto& positions = table(b, TokenGrouping::Position).groups;
    QCOMPARE(positions.size(), std::size_t(4));  // 0 | 1-3 | 4-15 | 16-31 for a context of 32
    QCOMPARE(positions[3].label, std::string("16-31"));
    QCOMPARE(positions[0].tokens, b.windows);
    QCOMPARE(positions[1].tokens, 3 * b.windows);
    QCOMPARE(positions[0].routed[0], 1.0);
    QCOMPARE(positions[1].routed[0], 1.0);
    QCOMPARE(positions[2].routed[0], 0.0);
    QCOMPARE(positions[3].routed[0], 0.0);
    QCOMPARE(b.all.routed[0], 4.0 / 32.0);
    QCOMPARE(b.tokens, 32 * b.windows);
    QCOMPARE(b.windows, std::int64_t{4096 / 32});
  }

  void plantedPredictabilityRoutingIsFound() {
    // The model predicts a repeat: a token equal to the one before it is the predictable one, and the rule routes
    // exactly those tokens. The most predictable quarter is then the repeats (all routed), the least none of them.
    const auto repeats = [](const torch::Tensor& t) {
      auto out = torch::zeros_like(t, torch::kBool);
      out.narrow(1, 1, t.size(1) - 1).copy_(t.narrow(1, 1, t.size(1) - 1).eq(t.narrow(1, 0, t.size(1) - 1)));
      return out;
    };
    const auto b = planted(repeats, /*repeat_logit=*/8.0);
    const auto& groups = table(b, TokenGrouping::Predictability).groups;
    QCOMPARE(groups.size(), std::size_t(5));
    QVERIFY2(groups[0].tokens > 0 && groups[0].tokens < b.tokens / 4, qPrintable(QString::number(groups[0].tokens)));
    QCOMPARE(groups[0].routed[0], 1.0);
    QCOMPARE(groups[3].routed[0], 0.0);
    QCOMPARE(groups[4].tokens, b.windows);  // each window's first token has no context
    QVERIFY2(contains(groups[0].label, "Q1 most predictable (p 0.9"), groups[0].label.c_str());
    QCOMPARE(groups[0].short_label, std::string("Q1 most"));
    QCOMPARE(groups[4].short_label, std::string("first"));
    // The difficulty groups read the loss of the next-token prediction: the groups cover the sample.
    std::int64_t covered = 0;
    for (const auto& g : table(b, TokenGrouping::Difficulty).groups) covered += g.tokens;
    QCOMPARE(covered, b.tokens);
  }

  void everyLanguageModelsGroupsAddUpToItsShare_data() { routelab::test::conformance::add_language_model_rows(); }
  void everyLanguageModelsGroupsAddUpToItsShare() {
    // For every registered language model at a small shape: each grouping's groups cover the sample and their
    // token-weighted shares are the overall share of every routed layer; a model whose trace has no routed layer
    // with decisions is refused by name.
    QFETCH(QString, arch);
    const auto& entry = architecture(arch.toStdString());
    torch::manual_seed(5);
    auto lm = create_model(routelab::test::conformance::small_model(entry),
                           {data_->tokenizer().vocab_size(), data_->context()});
    lm->eval();
    bool routes = false;
    {
      torch::NoGradGuard no_grad;
      for (const auto& t : lm->forward(data_->sample(Split::Val, 2, 1).input, true).trace)
        routes |= t.routed && t.decision.defined();
    }
    RoutingBreakdownOptions options;
    options.tokens = 1024;
    options.batch_size = 8;
    options.frequency_tokens = 10000;
    if (!routes) {
      const auto message = error_of<ConfigError>([&] { routing_breakdown(*lm, *data_, options); });
      QVERIFY2(contains(message, "'" + entry.id + "' routes no token"), message.c_str());
      return;
    }
    const auto b = routing_breakdown(*lm, *data_, options);
    QVERIFY(!b.layers.empty());
    QCOMPARE(b.tokens, std::int64_t{1024});
    QCOMPARE(b.tables.size(), all_token_groupings().size());
    for (const auto& t : b.tables) {
      std::int64_t tokens = 0;
      std::vector<double> routed(b.layers.size(), 0.0);
      for (const auto& g : t.groups) {
        tokens += g.tokens;
        for (std::size_t l = 0; l < routed.size(); ++l) {
          if (g.tokens == 0) {
            QVERIFY(std::isnan(g.routed[l]));
            continue;
          }
          QVERIFY(g.routed[l] >= 0 && g.routed[l] <= 1);
          routed[l] += g.routed[l] * static_cast<double>(g.tokens);
        }
      }
      QCOMPARE(tokens, b.tokens);
      for (std::size_t l = 0; l < routed.size(); ++l)
        QVERIFY2(std::abs(routed[l] / static_cast<double>(b.tokens) - b.all.routed[l]) < 1e-12,
                 qPrintable(QString::fromStdString(to_string(t.by) + " layer " + std::to_string(b.layers[l].layer))));
    }
    // The JSON carries the same numbers.
    const auto doc = b.to_json();
    QCOMPARE(doc["by"].size(), all_token_groupings().size());
    QCOMPARE(doc["all"]["tokens"].get<std::int64_t>(), b.tokens);
  }

  void figureShowsTheStoredRunsBreakdown() {
    // routing-by-token draws, per run, the breakdown of its checkpoint: a cell per group and routed layer, the
    // percentage routing_breakdown finds, each row labelled with its short label; a dense run draws no panel.
    const auto& runs = trained();
    const auto& db = db_;
    FigureRequest request;
    request.name = "routing-by-token";
    request.run_ids = {runs.at("dtrnet")};
    request.metric = "position";
    const auto figure = build_figure(RunStore(db), request);
    auto run = load_run(db, runs.at("dtrnet"));
    RoutingBreakdownOptions options;
    options.groupings = {TokenGrouping::Position};
    const auto b = routing_breakdown(run, options);
    QCOMPARE(figure.panels.size(), std::size_t(1));
    const auto& h = figure.panels[0].heatmap;
    const auto& groups = b.tables.front().groups;
    QCOMPARE(h.rows, groups.size());
    QCOMPARE(h.cols, b.layers.size());
    for (std::size_t r = 0; r < h.rows; ++r) {
      QCOMPARE(h.row_labels[r], groups[r].short_label);
      const auto& described = figure.meta["groups"][std::to_string(runs.at("dtrnet"))][r];
      QCOMPARE(described["tokens"].get<std::int64_t>(), groups[r].tokens);
      for (std::size_t c = 0; c < h.cols; ++c) QCOMPARE(h.values[r * h.cols + c], 100.0 * groups[r].routed[c]);
    }
    QCOMPARE(figure.meta["grouping"], nlohmann::json("position"));
    request.run_ids = {runs.at("dense"), runs.at("dtrnet")};  // a dense baseline beside it draws no panel
    QCOMPARE(build_figure(RunStore(db), request).panels.size(), std::size_t(1));
    request.run_ids = {runs.at("dense")};
    const auto refused = error_of<DataError>([&] { build_figure(RunStore(db), request); });
    QVERIFY2(contains(refused, "routing-by-token: the runs hold nothing this figure draws"), refused.c_str());
    request.metric = "colour";
    const auto unknown = error_of<ConfigError>([&] { build_figure(RunStore(db), request); });
    QVERIFY2(contains(unknown, "routing-by-token metric: unknown grouping 'colour'"), unknown.c_str());
  }

  void historyFigureFollowsTheCheckpoints() {
    // routing-by-token-history: per run a line per group through each checkpoint's breakdown (the mean over the
    // routed layers); a dense run draws no panel.
    const auto& runs = trained();
    FigureRequest request;
    request.name = "routing-by-token-history";
    request.run_ids = {runs.at("dense"), runs.at("dtrnet")};
    request.metric = "position";
    const auto figure = build_figure(RunStore(db_), request);
    QCOMPARE(figure.panels.size(), std::size_t(1));
    QCOMPARE(figure.meta["checkpoint_steps"][std::to_string(runs.at("dtrnet"))], nlohmann::json({3, 6}));
    RoutingBreakdownOptions options;
    options.groupings = {TokenGrouping::Position};
    std::map<std::int64_t, RoutingBreakdown> at;
    for (const std::int64_t step : {3, 6}) {
      auto run = load_run(db_, runs.at("dtrnet"), {}, step);
      at[step] = routing_breakdown(run, options);
    }
    const auto& series = figure.panels[0].series;
    const auto& groups = at[6].tables.front().groups;
    QCOMPARE(series.size(), groups.size());
    for (std::size_t g = 0; g < series.size(); ++g) {
      QCOMPARE(series[g].label, groups[g].short_label);
      QCOMPARE(series[g].x, (std::vector<double>{3, 6}));
      QCOMPARE(series[g].y[0], 100.0 * at[3].tables.front().groups[g].mean_routed());
      QCOMPARE(series[g].y[1], 100.0 * groups[g].mean_routed());
    }
    // A run of 14 checkpoints is drawn at 12 of them, spread from the first to the last.
    const auto config = resolve_config(
        nlohmann::json::object(),
        {"model.arch=mod", "model.n_layer=4", "model.n_embd=32", "model.n_head=4", "data.source=file",
         "data.path=" + corpus_, "data.context=32", "train.batch_size=4", "train.steps=14", "train.eval_every=14",
         "train.checkpoint_every=1", "train.eval_batches=1", "train.warmup_steps=2", "run.threads=1"},
        "test");
    const auto outcome = train({config, db_, "mod", ""});
    QVERIFY2(outcome.status == RunStatus::Finished, outcome.message.c_str());
    request.run_ids = {runs.at("dtrnet"), outcome.run_id};
    const auto both = build_figure(RunStore(db_), request);
    QCOMPARE(both.meta["checkpoint_steps"][std::to_string(outcome.run_id)],
             nlohmann::json({1, 2, 3, 5, 6, 7, 8, 9, 10, 12, 13, 14}));
    // The groups are coloured alike in both panels: the first one's legend says them; every checkpoint is marked.
    QCOMPARE(both.panels.size(), std::size_t(2));
    QVERIFY(both.panels[0].legend && !both.panels[1].legend);
    for (const auto& panel : both.panels)
      for (const auto& s : panel.series) QVERIFY(s.marked);

    // routing-by-token-history-layers: the same checkpoints, a panel per routed layer (MoD's L1 and L3), each line
    // the layer's own share of the group, as kept for each checkpoint.
    request.name = "routing-by-token-history-layers";
    request.run_ids = {outcome.run_id};
    const auto per_layer = build_figure(RunStore(db_), request);
    const auto steps = per_layer.meta["checkpoint_steps"][std::to_string(outcome.run_id)].get<std::vector<double>>();
    QCOMPARE(steps.size(), std::size_t(12));
    QCOMPARE(per_layer.panels.size(), std::size_t(2));
    bool layers_differ = false;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const auto b = stored_routing_breakdown(db_, outcome.run_id, options, {}, static_cast<std::int64_t>(steps[i]));
      const auto& kept = b.tables.front().groups;
      for (std::size_t l = 0; l < per_layer.panels.size(); ++l) {
        const auto& panel = per_layer.panels[l];
        QVERIFY2(contains(panel.title, " " + layer_label(b.layers[l].layer)), panel.title.c_str());
        QCOMPARE(panel.legend, l == 0);  // the groups alike in every panel: one legend
        for (std::size_t g = 0; g < kept.size(); ++g) {
          const auto& line = panel.series.at(g);
          const auto at = std::find(line.x.begin(), line.x.end(), steps[i]);
          if (std::isnan(kept[g].routed[l])) {
            QVERIFY(at == line.x.end());  // no token of the group in the sample: no point
            continue;
          }
          QVERIFY(at != line.x.end());
          QCOMPARE(line.y[static_cast<std::size_t>(at - line.x.begin())], 100.0 * kept[g].routed[l]);
          layers_differ = layers_differ || kept[g].routed[0] != kept[g].routed[1];
        }
      }
    }
    QVERIFY(layers_differ);  // else the panels could be the mean
  }

  void tableHasAGroupRowAndARunColumn() {
    // routing_breakdown_table: a row per group any run's sample holds, a column per run (or per run and routed
    // layer), each cell the breakdown's share; a dense run's column is dashes; two seeds of one config share a
    // column, mean +- std; two columns of one name say their runs.
    const auto& runs = trained();
    const auto dtrnet = runs.at("dtrnet"), dense = runs.at("dense");
    RoutingBreakdownOptions options;
    options.groupings = {TokenGrouping::Class};
    const auto b = stored_routing_breakdown(db_, dtrnet, options);
    std::vector<BreakdownGroup> held;  // the groups of the sample (char-level text has no "other" token)
    for (const auto& g : b.tables.front().groups)
      if (g.tokens > 0) held.push_back(g);
    const auto table = routing_breakdown_table(db_, {dtrnet, dense}, TokenGrouping::Class);
    QCOMPARE(table.row_header, std::string("class"));
    QCOMPARE(table.columns.size(), std::size_t(2));
    QCOMPARE(table.rows.size(), held.size());
    for (std::size_t r = 0; r < held.size(); ++r) {
      QCOMPARE(table.rows[r].label, held[r].short_label);
      QCOMPARE(table.rows[r].cells[0]->mean, held[r].mean_routed());
      QVERIFY(!table.rows[r].cells[1].has_value());  // dense
    }
    QVERIFY(!contains(table.caption, "over seeds"));
    const auto per_layer = routing_breakdown_table(db_, {dtrnet}, TokenGrouping::Class, {}, {.per_layer = true});
    QCOMPARE(per_layer.columns.size(), b.layers.size());
    for (std::size_t l = 0; l < b.layers.size(); ++l) {
      QVERIFY2(contains(per_layer.columns[l].header, " " + layer_label(b.layers[l].layer)),
               per_layer.columns[l].header.c_str());
      for (std::size_t r = 0; r < held.size(); ++r) QCOMPARE(per_layer.rows[r].cells[l]->mean, held[r].routed[l]);
    }
    QVERIFY(contains(to_markdown(table), "| space |"));
    // Every run at one step: the cells are that checkpoint's; a run without it is named with the steps it has.
    const auto at3 = stored_routing_breakdown(db_, dtrnet, options, {}, 3);
    const auto step3 = routing_breakdown_table(db_, {dtrnet}, TokenGrouping::Class, {}, {.step = 3});
    QVERIFY2(contains(step3.caption, " at step 3"), step3.caption.c_str());
    for (const auto& row : step3.rows)
      for (const auto& g : at3.tables.front().groups)
        if (g.short_label == row.label) QCOMPARE(row.cells[0]->mean, g.mean_routed());
    QCOMPARE(at3.step, std::int64_t(3));
    // The routed shares of 6 steps of training may stay where they were at 3; the gates move.
    const auto gates3 = routing_breakdown_table(db_, {dtrnet}, TokenGrouping::Class, {}, {.gates = true, .step = 3});
    const auto gates6 = routing_breakdown_table(db_, {dtrnet}, TokenGrouping::Class, {}, {.gates = true});
    QCOMPARE(gates3.rows.size(), gates6.rows.size());
    for (std::size_t r = 0; r < gates3.rows.size(); ++r)
      QVERIFY(gates3.rows[r].cells[0]->mean != gates6.rows[r].cells[0]->mean);
    const auto missing = error_of<CheckpointError>([&] {
      routing_breakdown_table(db_, {dtrnet, dense}, TokenGrouping::Class, {}, {.step = 4});
    });
    QVERIFY2(contains(missing, "run " + std::to_string(dtrnet) +
                                   " has no checkpoint at step 4 (its checkpoints are at steps 3, 6)"),
             missing.c_str());
    // --gates: the groups' mean gates over the layers that have one; overrides are named in the caption.
    const auto gated = routing_breakdown_table(db_, {dtrnet}, TokenGrouping::Class, {},
                                               {.gates = true, .sets = {"model.attention=masked"}});
    QVERIFY2(contains(gated.caption, "Mean gate") && contains(gated.caption, "evaluated with model.attention=masked"),
             gated.caption.c_str());
    std::size_t gated_rows = 0;
    for (const auto& g : held) {
      double sum = 0;
      int n = 0;
      for (const auto v : g.gate)
        if (std::isfinite(v)) sum += v, ++n;
      if (n == 0) continue;
      QCOMPARE(gated.rows.at(gated_rows).label, g.short_label);
      QCOMPARE(gated.rows.at(gated_rows).cells[0]->mean, sum / n);
      ++gated_rows;
    }
    QVERIFY(gated_rows > 0);  // DTRNet's router gates every token
    QCOMPARE(gated.rows.size(), gated_rows);
    // A group no run's sample holds is left out (one window of 32 characters lacks some classes).
    RoutingBreakdownOptions window;
    window.groupings = {TokenGrouping::Class};
    window.tokens = 32;
    std::vector<std::string> labels, held_labels;
    for (const auto& g : stored_routing_breakdown(db_, dtrnet, window).tables.front().groups) {
      labels.push_back(g.short_label);
      if (g.tokens > 0) held_labels.push_back(g.short_label);
    }
    QVERIFY2(held_labels.size() < labels.size(), "every class is in the window");
    std::vector<std::string> rows;
    for (const auto& row : routing_breakdown_table(db_, {dtrnet}, TokenGrouping::Class, window).rows)
      rows.push_back(row.label);
    QCOMPARE(rows, held_labels);

    auto config = resolve_config(nlohmann::json::parse(RunStore(db_).run(dtrnet)->config_json), {"run.seed=2"}, "test");
    const auto outcome = train({config, db_, "dtrnet", ""});  // the same name as the first seed's
    QVERIFY2(outcome.status == RunStatus::Finished, outcome.message.c_str());
    const auto other = stored_routing_breakdown(db_, outcome.run_id, options);
    const auto seeds = routing_breakdown_table(db_, {dtrnet, outcome.run_id}, TokenGrouping::Class);
    QCOMPARE(seeds.columns.size(), std::size_t(1));
    QCOMPARE(seeds.columns[0].header, std::string("dtrnet (2 seeds)"));
    QVERIFY(contains(seeds.caption, "mean and standard deviation over seeds"));
    for (std::size_t r = 0; r < seeds.rows.size(); ++r)
      for (const auto& g : other.tables.front().groups)
        if (g.short_label == seeds.rows[r].label && g.tokens > 0 && held[r].tokens > 0) {
          QCOMPARE(seeds.rows[r].cells[0]->n, std::int64_t(2));
          QCOMPARE(seeds.rows[r].cells[0]->mean, (held[r].mean_routed() + g.mean_routed()) / 2);
        }
    const auto apart =
        routing_breakdown_table(db_, {dtrnet, outcome.run_id}, TokenGrouping::Class, {}, {.by_seed = false});
    QCOMPARE(apart.columns.size(), std::size_t(2));
    QCOMPARE(apart.columns[0].header, "dtrnet (run " + std::to_string(dtrnet) + ")");
    QCOMPARE(apart.columns[1].header, "dtrnet (run " + std::to_string(outcome.run_id) + ")");
  }

  void keptBreakdownIsReadBackForItsCheckpoint() {
    // The first breakdown of a checkpoint is computed and kept with every grouping; asking again, for any grouping,
    // reads it back number for number; another checkpoint, sample or override is computed apart; a damaged kept
    // document is computed again; a dense run is refused from the store as from the checkpoint.
    const auto& runs = trained();
    const auto id = runs.at("dtrnet");
    RoutingBreakdownOptions by_position, by_class;
    by_position.groupings = {TokenGrouping::Position};
    by_class.groupings = {TokenGrouping::Class, TokenGrouping::Frequency};
    RawDb(db_).exec("DELETE FROM analyses");  // what a figure test kept before
    bool kept = true;
    const auto first = stored_routing_breakdown(db_, id, by_position, {}, 0, &kept);
    QVERIFY(!kept);
    QCOMPARE(first.step, std::int64_t(6));
    QCOMPARE(first.tables.size(), std::size_t(1));
    QCOMPARE(first.frequency_tokens, std::int64_t(0));  // as routing_breakdown gives it without that grouping
    const auto again = stored_routing_breakdown(db_, id, by_class, {}, 0, &kept);
    QVERIFY(kept);
    auto run = load_run(db_, id);
    QCOMPARE(again.to_json().dump(), routing_breakdown(run, by_class).to_json().dump());
    QCOMPARE(stored_routing_breakdown(db_, id, by_position, {}, 0, &kept).to_json().dump(), first.to_json().dump());
    QVERIFY(kept);
    QCOMPARE(routing_breakdown_from_json(again.to_json(), "test").to_json(), again.to_json());

    const auto earlier = stored_routing_breakdown(db_, id, by_position, {}, 3, &kept);  // the checkpoint of step 3
    QVERIFY(!kept);
    QCOMPARE(earlier.step, std::int64_t(3));
    auto smaller = by_position;
    smaller.tokens = 256;
    QCOMPARE(stored_routing_breakdown(db_, id, smaller, {}, 0, &kept).tokens, std::int64_t(256));
    QVERIFY(!kept);
    stored_routing_breakdown(db_, id, by_position, {"model.attention=masked"}, 0, &kept);
    QVERIFY(!kept);
    QCOMPARE(RawDb(db_).text("SELECT COUNT(*) FROM analyses WHERE run_id = " + std::to_string(id)), std::string("4"));

    RawDb(db_).exec("UPDATE analyses SET document = '{\"run_id\": 1}' WHERE step = 6");
    QCOMPARE(stored_routing_breakdown(db_, id, by_position, {}, 0, &kept).to_json().dump(), first.to_json().dump());
    QVERIFY(!kept);
    stored_routing_breakdown(db_, id, by_position, {}, 0, &kept);
    QVERIFY(kept);  // replaced by the one computed again

    for (int i = 0; i < 2; ++i) {
      const auto refused =
          error_of<ConfigError>([&] { stored_routing_breakdown(db_, runs.at("dense"), by_class, {}, 0, &kept); });
      QVERIFY2(contains(refused, "run " + std::to_string(runs.at("dense")) +
                                     ": routing breakdown: architecture 'dense' routes no token"),
               refused.c_str());
      QCOMPARE(kept, i == 1);
    }
  }

  void interruptedBreakdownKeepsNothing() {
    // Under an InterruptScope whose work stops being wanted after three interruption points (before the checkpoint
    // is read, then one a batch), the breakdown stops there with Interrupted and keeps nothing; without a scope, or
    // under one that never says stop, it is computed whole, number for number the same.
    const auto id = trained().at("dtrnet");
    RoutingBreakdownOptions options;
    options.groupings = {TokenGrouping::Position};
    options.tokens = 256;
    options.batch_size = 1;  // an interruption point a window
    RawDb(db_).exec("DELETE FROM analyses");
    const auto kept = [&] {
      return RawDb(db_).text("SELECT COUNT(*) FROM analyses WHERE run_id = " + std::to_string(id));
    };
    int asked = 0;
    bool interrupted = false;
    try {
      const InterruptScope scope([&] { return ++asked > 3; });
      stored_routing_breakdown(db_, id, options);
    } catch (const Interrupted&) {
      interrupted = true;
    }
    QVERIFY(interrupted);
    QCOMPARE(asked, 4);
    QCOMPARE(kept(), std::string("0"));
    interruption_point();  // no scope alive: nothing
    asked = 0;
    std::string whole;
    {
      const InterruptScope never([&] { return ++asked < 0; });
      whole = stored_routing_breakdown(db_, id, options).to_json().dump();
    }
    QVERIFY2(asked > 8, std::to_string(asked).c_str());  // the load and every window
    QCOMPARE(kept(), std::string("1"));
    RawDb(db_).exec("DELETE FROM analyses");
    QCOMPARE(stored_routing_breakdown(db_, id, options).to_json().dump(), whole);
  }

  void interruptedEvaluationsRestoreTrainingMode() {
    // A model a stopped breakdown or evaluation used goes back to the mode it had (a training loop's model, or a
    // cached one, stays in training mode), and eval mode stays eval.
    RuleRouted model(data_->tokenizer().vocab_size(), [](const torch::Tensor& t) { return t.gt(0); });
    RoutingBreakdownOptions options;
    options.groupings = {TokenGrouping::Position};
    options.tokens = 256;
    options.batch_size = 1;
    const auto stopped = [&](const std::function<void()>& work) {
      int asked = 0;
      const InterruptScope scope([&] { return ++asked > 1; });
      try {
        work();
      } catch (const Interrupted&) {
        return true;
      }
      return false;
    };
    for (const bool training : {true, false}) {
      model.train(training);
      QVERIFY(stopped([&] { routing_breakdown(model, *data_, options); }));
      QCOMPARE(model.is_training(), training);
      QVERIFY(stopped([&] { evaluate_split(model, *data_, Split::Val, 4, 1, 0, torch::kCPU, false); }));
      QCOMPARE(model.is_training(), training);
    }
  }

  void badRequestsAreNamed() {
    QVERIFY(
        contains(error_of<ConfigError>([] { parse_token_grouping("colour", "--by"); }),
                 "--by: unknown grouping 'colour' (known: class, position, frequency, predictability, difficulty)"));
    RuleRouted model(data_->tokenizer().vocab_size(), [](const torch::Tensor& t) { return t.gt(0); });
    RoutingBreakdownOptions options;
    options.tokens = 0;
    QVERIFY(contains(error_of<ConfigError>([&] { routing_breakdown(model, *data_, options); }), "--tokens"));
  }
};

}  // namespace test_routing_breakdown

ROUTELAB_TEST_SUITE(test_routing_breakdown, TestRoutingBreakdown)
#include "test_routing_breakdown.moc"
