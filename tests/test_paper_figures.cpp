// The seeds' named figures (core/report/builders/papers/paper_figures.h): every figure built from a store holding two tiny trained
// runs (DTRNet, early exit) and synthetic rows (TSA, TAGAT, DRR, Radial, a context-length curve), checked for its
// panels' shapes and values against the stored numbers or an independent computation; plus the per-layer outputs
// behind DTRNet's Figure 1.
#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/analysis/layer_similarity.h"
#include "core/analysis/run_analysis.h"
#include "core/config/experiment_config.h"
#include "core/cost/flops_model.h"
#include "core/data/dataset.h"
#include "core/models/blocks/norm.h"
#include "core/models/drr.h"
#include "core/models/radial.h"
#include "core/models/registry.h"
#include "core/report/builders/catalog.h"
#include "core/report/builders/papers/paper_figures.h"
#include "core/report/export/figure_files.h"
#include "core/run/evaluation_record.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "core/util/errors.h"
#include "tests/suite.h"

namespace test_paper_figures {

using namespace routelab;
using nlohmann::json;

namespace {

ExperimentConfig small_config(const std::string& arch, std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"model.arch=" + arch, "model.n_embd=32", "model.n_head=4", "data.source=copy",
                                   "train.batch_size=8", "train.steps=20", "train.eval_every=10",
                                   "train.checkpoint_every=10", "train.eval_batches=2", "train.log_every=5",
                                   "train.lr=3e-3", "train.warmup_steps=5", "run.threads=2"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return resolve_config(nlohmann::json::object(), sets, "test");
}

const FigureInfo& info(const std::string& name) {
  static const auto catalog = paper_figures();
  for (const auto& f : catalog)
    if (f.name == name) return f;
  throw std::runtime_error("no figure " + name);
}

/// Figures drawn by the GUI's renderer (routelab-render, next to this suite when the GUI is built).
struct RenderLog {
  bool available = false;
  std::set<std::string> rendered;
  std::vector<std::string> failures;
};

RenderLog& render_log() {
  static RenderLog log;
  return log;
}

/// Writes the figure's sidecar and draws it to PDF with routelab-render, once per name; the outcome goes to
/// render_log(), checked by the suite's last case.
void render_once(const Figure& figure, const std::string& name) {
  const QString exe = QDir(QCoreApplication::applicationDirPath()).filePath(QStringLiteral("../app/routelab-render"));
  auto& log = render_log();
  if (!QFileInfo::exists(exe) || log.rendered.count(name)) return;
  log.available = true;
  QTemporaryDir dir;
  const auto stem = dir.filePath(QString::fromStdString(name)).toStdString();
  write_figure_data_files(figure, stem);
  QProcess process;
  process.start(exe, {QString::fromStdString(stem + ".json"), QStringLiteral("--out"), QString::fromStdString(stem + ".pdf")});
  const bool ok = process.waitForFinished(120000) && process.exitStatus() == QProcess::NormalExit &&
                  process.exitCode() == 0 && QFileInfo(QString::fromStdString(stem + ".pdf")).size() > 1000;
  if (ok) log.rendered.insert(name);
  else log.failures.push_back(name + ": " + process.readAllStandardError().toStdString());
}

Figure build(const RunStore& store, const std::string& name, std::vector<std::int64_t> runs, std::int64_t step = 0) {
  FigureRequest r;
  r.name = name;
  r.run_ids = std::move(runs);
  r.step = step;
  auto figure = info(name).build(store, r);
  render_once(figure, name);
  return figure;
}

std::int64_t synthetic_run(RunStore& store, const std::string& name, const std::string& arch, const json& config,
                           const std::string& tags = "") {
  NewRun r;
  r.name = name;
  r.arch = arch;
  r.config_json = config.dump();
  r.total_steps = 20;
  const auto id = store.create_run(r);
  store.set_status(id, RunStatus::Finished);
  if (!tags.empty()) {
    RunPatch patch;
    patch.tags = tags;
    store.patch_run(id, patch);
  }
  return id;
}

bool near(double a, double b, double tol = 1e-9) { return std::abs(a - b) <= tol * std::max(1.0, std::abs(b)); }

}  // namespace

class TestPaperFigures : public QObject {
  Q_OBJECT
  QTemporaryDir home_;
  std::string db_;
  std::int64_t dtr_ = 0, exit_ = 0;

 private Q_SLOTS:
  void initTestCase() {
    qputenv("ROUTELAB_HOME", home_.path().toUtf8());
    db_ = (home_.path() + "/runs.sqlite").toStdString();
    torch::manual_seed(5);
    const auto a = train({small_config("dtrnet", {"model.n_layer=4"}), db_, "dtr", ""});
    QCOMPARE(a.status, RunStatus::Finished);
    dtr_ = a.run_id;
    const auto b = train({small_config("early-exit", {"model.n_layer=3"}), db_, "exit", ""});
    QCOMPARE(b.status, RunStatus::Finished);
    exit_ = b.run_id;
  }

  void catalogIsSortedAndComplete() {
    const auto catalog = paper_figures();
    std::vector<std::string> names;
    for (const auto& f : catalog) {
      names.push_back(f.name);
      QVERIFY(f.build);
      QVERIFY(f.min_runs >= 1);
      // The title cites its paper by method, as the id does ("tsa-fig3": "... (TSA, Figure 3)"); "seed" means a
      // random seed only.
      const std::map<std::string, std::string> method = {
          {"dtrnet", "DTRNet"}, {"drr", "DRR"}, {"tagat", "TAGAT"}, {"tsa", "TSA"}, {"radial", "Radial Networks"}};
      const auto cited = method.find(f.name.substr(0, f.name.find('-')));
      QVERIFY2(cited != method.end(), f.name.c_str());
      QVERIFY2(f.title.find("(" + cited->second + ", ") != std::string::npos, f.title.c_str());
      QVERIFY2(f.title.find("seed") == std::string::npos, f.title.c_str());
      QVERIFY(!f.description.empty());
    }
    QVERIFY(std::is_sorted(names.begin(), names.end()));
    const std::set<std::string> expected = {
        "dtrnet-fig1", "dtrnet-fig3", "dtrnet-fig4", "dtrnet-fig5", "dtrnet-fig6", "drr-overhead",
        "tagat-fig3", "tagat-fig4", "tsa-fig2", "tsa-fig3", "tsa-fig4", "radial-fig5",
        "radial-fig6", "radial-fig7", "radial-fig9", "radial-fig10"};
    QCOMPARE(std::set<std::string>(names.begin(), names.end()), expected);
    QCOMPARE(names.size(), expected.size());
  }

  void layerOutputsReproduceTheLogits() {
    torch::NoGradGuard no_grad;
    auto run = load_run(db_, dtr_);
    const auto batch = run.dataset->sample(Split::Val, 2, 7);
    // final_norm + head of the last layer's output = the model's own logits.
    const auto check = [&](LanguageModel& model, const std::string& arch) {
      const auto states = layer_outputs(model, batch.input);
      const auto* radial = dynamic_cast<RadialNetwork*>(&model);
      QCOMPARE(static_cast<std::int64_t>(states.size()), radial ? radial->max_depth() : model.num_layers());
      auto norm = std::dynamic_pointer_cast<NormImpl>(model.named_children()["final_norm"]);
      QVERIFY(norm);
      const auto params = model.named_parameters();
      const auto* head = params.find("lm_head.weight");
      const auto weight = head ? *head : params["tok_emb.weight"];
      const auto logits = torch::linear(norm->forward(states.back()), weight);
      QVERIFY2(torch::allclose(logits, model.forward(batch.input).logits, 1e-4, 1e-5), arch.c_str());
    };
    check(*run.model, "dtrnet");  // trained
    // Fresh weights; D-LLM's decision modules start near p_exec 0.87: threshold 0.87 skips part of the tokens.
    // Early exit at threshold 0.3: part of the tokens exit; Radial reports its routing steps (min_depth 1: tokens
    // may exit early and keep their state).
    const std::map<std::string, std::vector<std::string>> extra = {
        {"dllm", {"model.threshold=0.87"}}, {"early-exit", {"model.exit_threshold=0.3"}}, {"radial", {"model.min_depth=1"}}};
    // Every registered language model, so that a new architecture that forgets record_layer_state fails here.
    int checked = 0;
    for (const auto& entry : architectures()) {
      if (entry.task != Task::LanguageModel) continue;
      const auto& arch = entry.id;
      ++checked;
      std::vector<std::string> sets = {"model.n_layer=4"};
      if (extra.count(arch)) sets.insert(sets.end(), extra.at(arch).begin(), extra.at(arch).end());
      const auto config = small_config(arch, sets);
      auto model = create_model(config.model(), {run.dataset->tokenizer().vocab_size(), run.dataset->context()});
      model->eval();
      check(*model, arch);
    }
    QVERIFY(checked >= 8);  // dense, dllm, drr, dtrnet, early-exit, mod, radial, tsa
  }

  void cosineMatrixOfKnownStates() {
    // Two layers, two tokens: h0 = (e1, e1), h1 = (e1, e2): cos = (1 + 0) / 2 off the diagonal.
    const auto h0 = torch::tensor({1.0f, 0.0f, 1.0f, 0.0f}).view({1, 2, 2});
    const auto h1 = torch::tensor({3.0f, 0.0f, 0.0f, 2.0f}).view({1, 2, 2});
    const auto c = mean_token_cosine({h0, h1});
    QCOMPARE(c.size(0), 2);
    QVERIFY(near(c[0][1].item<double>(), 0.5));
    QVERIFY(near(c[0][0].item<double>(), 1.0) && near(c[1][1].item<double>(), 1.0));
  }

  void fig1CosineMatrix() {
    const auto f = build(RunStore(db_), "dtrnet-fig1", {dtr_});
    QCOMPARE(f.panels.size(), std::size_t(1));
    const auto& h = f.panels[0].heatmap;
    QCOMPARE(h.rows, std::size_t(4));
    QCOMPARE(h.cols, std::size_t(4));
    QCOMPARE(h.row_labels.front(), std::string("L0"));
    for (std::size_t i = 0; i < 4; ++i) {
      QVERIFY(near(h.values[i * 4 + i], 1.0, 1e-9));
      for (std::size_t j = 0; j < 4; ++j) {
        QVERIFY(near(h.values[i * 4 + j], h.values[j * 4 + i], 1e-12));
        QVERIFY(h.values[i * 4 + j] <= 1.0 + 1e-9 && h.values[i * 4 + j] >= -1.0 - 1e-9);
      }
    }
    QVERIFY(h.values[1] < 1.0 - 1e-6);  // different layers differ
  }

  void fig3ContextCurves() {
    RunStore store(db_);
    const auto id = synthetic_run(store, "ctx", "dense", json::object());
    EvalRow row;
    row.step = 20;
    row.split = "context:nonex1";
    row.extra_json = json({{"trained_context", 64},
                           {"points", {{{"length", 64}, {"ppl", 3.5}}, {{"length", 128}, {"ppl", 4.25}}}}})
                         .dump();
    store.insert_eval(id, row);
    const auto f = build(store, "dtrnet-fig3", {id, dtr_});  // the DTRNet run has no curve: left out
    QCOMPARE(f.panels.size(), std::size_t(1));
    QCOMPARE(f.panels[0].series.size(), std::size_t(1));
    const auto& s = f.panels[0].series[0];
    QCOMPARE(s.x, (std::vector<double>{64, 128}));
    QCOMPARE(s.y, (std::vector<double>{3.5, 4.25}));
    QVERIFY(f.panels[0].log_x);
    QVERIFY_EXCEPTION_THROWN(build(store, "dtrnet-fig3", {dtr_}), ConfigError);
  }

  void fig4And5And6FromTheEvaluation() {
    RunStore store(db_);
    const auto rec = *store.run(dtr_);
    const auto config = json::parse(rec.config_json);
    const auto evals = store.evals(dtr_);
    const auto extra = json::parse(evals.back().extra_json);
    const auto measured = read_evaluation(evals.back()).layers;
    double per_token = 0;
    std::vector<double> percent;
    for (const auto& l : extra["layers"]) {
      const bool routed = l["routed"].get<bool>();
      per_token += routed ? l["routed_fraction"].get<double>() : 1.0;
      percent.push_back(routed ? 100.0 * l["routed_fraction"].get<double>() : 100.0);
    }
    FigureRequest r;
    r.name = "dtrnet-fig4";
    r.run_ids = {dtr_};
    r.lengths = {64, 256};
    const auto f4 = info(r.name).build(store, r);
    render_once(f4, r.name);
    const auto vocab = make_dataset(config["data"])->tokenizer().vocab_size();
    const auto& s4 = f4.panels.at(0).series.at(0);
    QCOMPARE(s4.x, (std::vector<double>{64, 256}));
    for (std::size_t i = 0; i < 2; ++i) {
      FlopsQuery q;
      q.seq = static_cast<std::int64_t>(s4.x[i]);
      q.fractions = fractions_from_trace("dtrnet", measured);
      QVERIFY(near(s4.y[i], estimate_flops(config["model"], vocab, q).total_ratio()));
      QVERIFY(s4.y[i] > 0 && s4.y[i] < 1.5);
    }

    const auto f5 = build(store, "dtrnet-fig5", {dtr_});
    const auto& bars = f5.panels.at(0).bars;
    QCOMPARE(bars.categories.size(), std::size_t(4));
    QCOMPARE(bars.members.size(), std::size_t(1));
    QCOMPARE(bars.members[0].values, percent);
    QVERIFY(std::count(percent.begin(), percent.end(), 100.0) >= 2);  // bilayer: dense layers at 100%

    r.name = "dtrnet-fig6";
    const auto f6 = info(r.name).build(store, r);
    render_once(f6, r.name);
    const auto& s6 = f6.panels.at(0).series.at(0);
    const double entry = 2.0 * 32 * 4;  // K and V, 4 heads x 8 dims, fp32
    for (std::size_t i = 0; i < 2; ++i) QVERIFY(near(s6.y[i], per_token * s6.x[i] * entry / (1024.0 * 1024.0)));
    QVERIFY(per_token < 4.0);
  }

  void drrOverheadAgainstPreNorm() {
    RunStore store(db_);
    const auto config = small_config("drr", {"model.n_layer=4"});
    const auto id = synthetic_run(store, "drr", "drr", config.doc);
    const auto f = build(store, "drr-overhead", {id});
    QCOMPARE(f.panels.size(), std::size_t(2));
    const auto data = make_dataset(config.data());
    const auto t = drr_transformer_options_from_json(config.model(), data->tokenizer().vocab_size(), data->context());
    const auto o = drr_overhead(t, drr_options_table().read(config.model()), data->context());
    const auto& params = f.panels[0].bars;
    QCOMPARE(params.categories, (std::vector<std::string>{"model", "layers"}));
    QCOMPARE(params.members.size(), std::size_t(2));
    QVERIFY(near(params.members[0].values[0], o.base_params / 1e6));
    QVERIFY(near(params.members[1].values[0], o.arch_params / 1e6));
    QVERIFY(params.members[1].values[0] > params.members[0].values[0]);  // DRR adds parameters
    QVERIFY(near(f.panels[1].bars.members[1].values[1], o.arch_stack_flops / 1e9));
    QVERIFY(f.panels[1].bars.members[1].values[0] > f.panels[1].bars.members[0].values[0]);
    QVERIFY_EXCEPTION_THROWN(build(store, "drr-overhead", {dtr_}), ConfigError);
  }

  void tagatBalanceAndGates() {
    RunStore store(db_);
    const auto id = synthetic_run(store, "tagat", "tagat", json::object());
    json stats;
    for (int l = 0; l < 2; ++l)
      for (int e = 0; e < 4; ++e) stats["load/L" + std::to_string(l) + "/E" + std::to_string(e)] = 0.1 * (l + 1) + 0.01 * e;
    stats["load/E0"] = 0.3;  // the model-wide mean is not a per-layer entry
    EvalRow eval;
    eval.step = 10;
    eval.extra_json = json({{"stats", stats}}).dump();
    store.insert_eval(id, eval);
    std::vector<MetricRow> rows;
    for (int e = 0; e < 4; ++e) rows.push_back({"val/load/E" + std::to_string(e), 10, 0, 0.25 + 0.01 * e});
    rows.push_back({"val/epoch", 10, 0, 1.0});
    store.insert_metrics(id, rows);
    json gate = json::array();  // (T 3, L 2, N 4)
    for (int t = 0; t < 3; ++t) {
      json per_layer = json::array();
      for (int l = 0; l < 2; ++l) per_layer.push_back({0.1 * t, 0.2, 0.3, 0.4 + l * 0.1});
      gate.push_back(per_layer);
    }
    store.insert_probe(id, {10, json({{"tokens", {"a", " ", "b"}}, {"token_data", {{"gate", gate}}}}).dump()});

    const auto f3 = build(store, "tagat-fig3", {id});
    QCOMPARE(f3.panels.size(), std::size_t(2));
    const auto& bars = f3.panels[0].bars;
    QCOMPARE(bars.categories, (std::vector<std::string>{"L0", "L1"}));
    QCOMPARE(bars.members.size(), std::size_t(4));
    QVERIFY(near(bars.members[2].values[1], 0.2 + 0.02));
    const auto& epochs = f3.panels[1];
    QCOMPARE(epochs.x_label, std::string("Epoch"));
    QCOMPARE(epochs.series.size(), std::size_t(5));  // four experts and the uniform line
    QVERIFY(near(epochs.series[3].y[0], 0.28));
    QVERIFY(near(epochs.series[4].y[0], 0.25));

    const auto f4 = build(store, "tagat-fig4", {id});
    QCOMPARE(f4.panels.size(), std::size_t(2));
    const auto& h = f4.panels[1].heatmap;
    QCOMPARE(h.rows, std::size_t(4));
    QCOMPARE(h.cols, std::size_t(3));
    QVERIFY(near(h.values[0 * 3 + 2], 0.2));  // expert 0, token 2
    QVERIFY(near(h.values[3 * 3 + 0], 0.5));  // expert 3 in layer 1
    QCOMPARE(h.col_labels.size(), std::size_t(3));
    QVERIFY_EXCEPTION_THROWN(build(store, "tagat-fig4", {dtr_}), ConfigError);
  }

  void tsaCurvesSweepAndProbe() {
    RunStore store(db_);
    auto config = small_config("tsa", {"model.n_layer=3", "train.batch_size=2"}).doc;
    const auto context = make_dataset(config["data"])->context();
    std::vector<std::int64_t> ids;
    for (const double lambda : {0.05, 0.0}) {
      config["model"]["depth_coeff"] = lambda;
      const auto id = synthetic_run(store, "tsa", "tsa", config, "sweep:lam");
      store.insert_metrics(id, {{"train/alpha", 5, 0, 0.5}, {"train/alpha", 10, 0, 0.25},
                                {"val/loss", 10, 0, 2.0 + lambda}, {"val/alpha", 10, 0, 0.7 - lambda}});
      EvalRow e;
      e.step = 10;
      e.loss = 2.0 + lambda;
      store.insert_eval(id, e);
      ids.push_back(id);
    }
    const auto f2 = build(store, "tsa-fig2", {ids[0]});
    QCOMPARE(f2.panels.size(), std::size_t(2));
    QCOMPARE(f2.panels[0].series[0].x, (std::vector<double>{10}));
    // steps 1-9 at alpha 0.5 (first logged value until step 10), step 10 at 0.25: 2 x context tokens x (1 + 2 alpha)
    const double tokens = 2.0 * static_cast<double>(context);
    QVERIFY(near(f2.panels[1].series[0].x[0], (9 * tokens * 2.0 + tokens * 1.5) / 1e9, 1e-12));
    QVERIFY(near(f2.panels[1].series[0].y[0], 2.05));

    const auto f3 = build(store, "tsa-fig3", {ids[0], ids[1], exit_});
    const auto& sweep = f3.panels.at(0);
    QCOMPARE(sweep.series.size(), std::size_t(1));
    QCOMPARE(sweep.series[0].x, (std::vector<double>{0.0, 0.05}));
    QVERIFY(near(sweep.series[0].y[0], 2.0) && near(sweep.series[0].y[1], 2.05));
    const auto& pareto = f3.panels.at(1);
    QCOMPARE(pareto.series.size(), std::size_t(2));  // the early-exit sweep, then the TSA points
    const auto& exit_line = pareto.series[0];
    QCOMPARE(exit_line.x.size(), std::size_t(9));
    for (const auto a : exit_line.x) QVERIFY(a > 0 && a <= 1.0 + 1e-9);
    // Threshold 1 is the full model: alpha 1 and the loss of the run's own last evaluation.
    QVERIFY(near(exit_line.x.back(), 1.0, 1e-9));
    QVERIFY(near(exit_line.y.back(), store.evals(exit_).back().loss, 1e-5));
    QCOMPARE(pareto.series[1].x.size(), std::size_t(2));
    QVERIFY(near(pareto.series[1].x[0], 0.65) && near(pareto.series[1].x[1], 0.7));

    json probe = {{"tokens", {"a", "b", "c"}},
                  {"layers", {{{"layer", 0}, {"routed", false}},
                              {{"layer", 1}, {"routed", true}, {"gate", {0.9, 0.5, 0.1}}},
                              {{"layer", 2}, {"routed", true}, {"gate", {1.0, 0.0, 0.25}}}}}};
    store.insert_probe(ids[0], {10, probe.dump()});
    const auto f4 = build(store, "tsa-fig4", {ids[0]});
    const auto& h = f4.panels.at(0).heatmap;
    QCOMPARE(h.rows, std::size_t(2));
    QCOMPARE(h.cols, std::size_t(3));
    QCOMPARE(h.row_labels, (std::vector<std::string>{"L1", "L2"}));
    QCOMPARE(h.values, (std::vector<double>{0.9, 0.5, 0.1, 1.0, 0.0, 0.25}));
  }

  void radialProfileFigures() {
    RunStore store(db_);
    const auto f5 = build(store, "radial-fig5", {dtr_});
    const auto& bars = f5.panels.at(0).bars;
    QCOMPARE(bars.categories.size(), std::size_t(8));  // 4 layers x (ATT, FFN)
    QCOMPARE(bars.categories[0], std::string("L0 ATT"));
    QCOMPARE(bars.categories[1], std::string("L0 FFN"));
    for (const auto v : bars.members.at(0).values) QVERIFY(v >= 0 && v <= 100);
    double depth_total = 0;
    for (const auto v : f5.panels.at(1).series.at(0).y) depth_total += v;
    QVERIFY(near(depth_total, 100.0, 1e-9));

    const auto f6 = build(store, "radial-fig6", {dtr_});
    QCOMPARE(f6.panels.size(), std::size_t(2));
    for (const auto& p : f6.panels) {
      double total = 0;
      for (const auto v : p.series.at(0).y) total += v;
      QVERIFY(near(total, 100.0, 1e-9));
      QCOMPARE(p.series[0].x.size(), std::size_t(32));
    }

    const auto f7 = build(store, "radial-fig7", {dtr_});
    const auto& h = f7.panels.at(0).heatmap;
    QCOMPARE(h.rows, std::size_t(8));
    QVERIFY(h.cols > 1);
    for (const auto v : h.values) QVERIFY(std::isnan(v) || v == 0.0 || v == 1.0);

    const auto f9 = build(store, "radial-fig9", {dtr_});
    QCOMPARE(f9.panels.at(0).series.size(), std::size_t(2));
    const auto& att = f9.panels[0].series[0];
    QCOMPARE(att.x.size(), std::size_t(4));
    for (std::size_t i = 0; i < att.x.size(); ++i) QVERIFY(att.y_lo[i] <= att.y_hi[i] && att.y[i] > 0);

    const auto f10 = build(store, "radial-fig10", {dtr_});
    const auto& series = f10.panels.at(0).series;
    QCOMPARE(series.size(), std::size_t(2));
    const double median = series[1].x[0];
    double below = 0;  // the share of the bins entirely below the median is under 50%
    for (std::size_t i = 0; i < series[0].x.size(); ++i)
      if (std::pow(10.0, std::log10(series[0].x[i]) + 2.0 / 32) <= median) below += series[0].y[i];
    QVERIFY(below <= 50.0 + 1e-9);
  }

  void radialPathMap() {
    RunStore store(db_);
    const auto id = synthetic_run(store, "radial", "radial", json({{"model", {{"n_layer", 3}}}}));
    json path = {{0, 2, -1}, {1, -1, -1}};  // (T 2, S 3)
    store.insert_probe(id, {10, json({{"tokens", {"x", "y"}}, {"token_data", {{"path", path}}}}).dump()});
    const auto f = build(store, "radial-fig7", {id});
    const auto& h = f.panels.at(0).heatmap;
    QCOMPARE(h.rows, std::size_t(3));
    QCOMPARE(h.cols, std::size_t(2));
    QCOMPARE(h.values[0], 0.0);
    QCOMPARE(h.values[1], 1.0);
    QCOMPARE(h.values[2], 2.0);
    QVERIFY(std::isnan(h.values[3]) && std::isnan(h.values[5]));
    QCOMPARE(h.hi, 2.0);
  }

  void unknownRunIsAStoreError() {
    RunStore store(db_);
    QVERIFY_EXCEPTION_THROWN(build(store, "dtrnet-fig5", {9999}), StoreError);
  }

  /// Last: every named figure built above was also drawn to PDF by the GUI's renderer.
  void everyNamedFigureRendersToPdf() {
    const auto& log = render_log();
    if (!log.available) QSKIP("routelab-render is not built here (configured without the GUI)");
    std::string failures;
    for (const auto& f : log.failures) failures += f + "\n";
    QVERIFY2(log.failures.empty(), failures.c_str());
    for (const auto& f : paper_figures()) QVERIFY2(log.rendered.count(f.name), (f.name + " was not rendered").c_str());
  }
};

}  // namespace test_paper_figures

ROUTELAB_TEST_SUITE(test_paper_figures, TestPaperFigures)
#include "test_paper_figures.moc"
