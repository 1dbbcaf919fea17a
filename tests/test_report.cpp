// Paper tables and curve arithmetic: LaTeX/Markdown/CSV writers, grouping of seeds into mean ± std, the
// matched-budget interpolation and bands against hand computations, the Pareto front.
#include <QFile>
#include <QProcess>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

#include <cmath>
#include <limits>

#include "core/report/figure/curves.h"
#include "core/report/tables/run_tables.h"
#include "core/report/tables/table.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "store_test_support.h"
#include "tests/suite.h"

namespace test_report {

using namespace routelab;

namespace {

ReportTable two_by_two() {
  ReportTable t;
  t.caption = "Loss & cost";
  t.label = "tab:x";
  t.columns = {{"Val. loss", "", Better::Lower, 3, 1.0}, {"Accuracy", "%", Better::Higher, 1, 100.0}};
  t.rows = {{"dense_1", {CellSummary{2.5, 0.1, 3}, CellSummary{0.5, 0.0, 3}}},
            {"dtr#net", {CellSummary{2.25, 0.05, 3}, std::nullopt}}};
  return t;
}

std::int64_t add_run(RunStore& store, const std::string& name, const std::string& config, std::int64_t seed,
                     const std::vector<double>& losses) {
  auto r = test::sample_run(name);
  r.config_json = config;
  r.seed = seed;
  const auto id = store.create_run(r);
  std::vector<MetricRow> rows;
  for (std::size_t i = 0; i < losses.size(); ++i)
    rows.push_back({"val/loss", static_cast<std::int64_t>(100 * (i + 1)), 0.0, losses[i]});
  store.insert_metrics(id, rows);
  return id;
}

/// Compiles a booktabs table in a minimal document with pdflatex and returns the PDF's text (pdftotext) in
/// `text`. False, with the log in `text`, when pdflatex fails.
bool compile_latex(const std::string& table_tex, QString& text) {
  QTemporaryDir dir;
  QFile tex(dir.filePath("t.tex"));
  if (!tex.open(QIODevice::WriteOnly)) return false;
  const std::string doc = "\\documentclass{article}\n\\usepackage{booktabs}\n\\begin{document}\n" + table_tex +
                          "\\end{document}\n";
  tex.write(doc.c_str());
  tex.close();
  QProcess latex;
  latex.setWorkingDirectory(dir.path());
  latex.start(QStandardPaths::findExecutable("pdflatex"), {"-interaction=nonstopmode", "-halt-on-error", "t.tex"});
  if (!latex.waitForFinished(120000) || latex.exitCode() != 0) {
    text = QString::fromUtf8(latex.readAllStandardOutput().right(2000));
    return false;
  }
  QProcess pdf;
  pdf.start(QStandardPaths::findExecutable("pdftotext"), {dir.filePath("t.pdf"), "-"});
  if (!pdf.waitForFinished(60000)) return false;
  text = QString::fromUtf8(pdf.readAllStandardOutput());
  return true;
}

}  // namespace

class TestReport : public QObject {
  Q_OBJECT

 private slots:
  void summarizeUsesSampleStd() {
    const auto s = summarize({1.0, 2.0, 3.0, std::numeric_limits<double>::quiet_NaN()});
    QVERIFY(s.has_value());
    QCOMPARE(s->n, std::int64_t{3});
    QCOMPARE(s->mean, 2.0);
    QCOMPARE(s->std, 1.0);  // sqrt(((1)^2 + 0 + (1)^2) / 2)
    QCOMPARE(summarize({5.0})->std, 0.0);
    QVERIFY(!summarize({}).has_value());
  }

  void latexEscapesBoldsBestAndShowsSpread() {
    const auto tex = to_latex(two_by_two());
    QVERIFY(tex.find("\\toprule") != std::string::npos && tex.find("\\bottomrule") != std::string::npos);
    QVERIFY(tex.find("\\caption{Loss \\& cost}") != std::string::npos);
    QVERIFY(tex.find("\\label{tab:x}") != std::string::npos);
    QVERIFY(tex.find("dense\\_1") != std::string::npos);
    QVERIFY(tex.find("dtr\\#net") != std::string::npos);
    QVERIFY(tex.find("Accuracy (\\%) $\\uparrow$") != std::string::npos);
    // The lower loss (2.25) is best and bold; every cell of the column shows its std since groups have n 3.
    QVERIFY(tex.find("$\\mathbf{2.250 \\pm 0.050}$") != std::string::npos);
    QVERIFY(tex.find("$2.500 \\pm 0.100$") != std::string::npos);
    // Scaled by 100, the only value of the column is its best; a missing cell is a dash.
    QVERIFY(tex.find("$\\mathbf{50.0 \\pm 0.0}$") != std::string::npos);
    QVERIFY(tex.find(" & -- \\\\") != std::string::npos);
    QCOMPARE(latex_escape("a_b%c{d}~^\\"), std::string("a\\_b\\%c\\{d\\}\\textasciitilde{}\\textasciicircum{}"
                                                        "\\textbackslash{}"));
  }

  void latexCompilesWithPdflatex() {
    if (QStandardPaths::findExecutable("pdflatex").isEmpty() || QStandardPaths::findExecutable("pdftotext").isEmpty())
      QSKIP("pdflatex or pdftotext is not installed");
    QString out;
    QVERIFY(compile_latex(to_latex(two_by_two()), out));
    QVERIFY2(out.contains("2.250") && out.contains("dtr#net"), qPrintable(out));
  }

  void markdownMatchesTheTable() {
    const auto md = to_markdown(two_by_two());
    QVERIFY(md.find("| Run | Val. loss ↓ | Accuracy (%) ↑ |") == 0);
    QVERIFY(md.find("| dtr#net | **2.250 ± 0.050** | – |") != std::string::npos);
  }

  void singleRunsShowNoSpread() {
    // A group of several seeds shows its std; a single run beside it has none to show, not a std of 0.
    auto table = two_by_two();
    table.rows[1].cells[0] = CellSummary{2.4, 0.0, 1};
    const auto md = to_markdown(table), tex = to_latex(table);
    QVERIFY2(md.find("| dtr#net | **2.400** | – |") != std::string::npos, md.c_str());
    QVERIFY2(md.find("| dense_1 | 2.500 ± 0.100 |") != std::string::npos, md.c_str());
    QVERIFY2(tex.find("$\\mathbf{2.400}$") != std::string::npos, tex.c_str());
    QVERIFY2(tex.find("$2.500 \\pm 0.100$") != std::string::npos, tex.c_str());
  }

  void csvRoundTrips() {
    auto table = two_by_two();
    table.rows[0].label = "a, \"quoted\"\nname";
    const auto rows = parse_csv(to_csv(table));
    QCOMPARE(rows.size(), std::size_t{4});  // header + 3 present cells
    QCOMPARE(rows[0], (std::vector<std::string>{"row", "column", "unit", "mean", "std", "n"}));
    QCOMPARE(rows[1][0], table.rows[0].label);
    QCOMPARE(std::stod(rows[1][3]), 2.5);
    QCOMPARE(rows[2][2], std::string("%"));
    QCOMPARE(std::stod(rows[2][3]), 0.5);  // stored values, unscaled
    QCOMPARE(rows[3][0], std::string("dtr#net"));
    QVERIFY_EXCEPTION_THROWN(parse_csv("a,\"open\n", "t.csv"), DataError);
  }

  void seedsGroupIntoMeanAndStd() {
    QTemporaryDir dir;
    RunStore store(dir.filePath("runs.sqlite").toStdString());
    const std::string a = R"({"model":{"arch":"dense"},"run":{"seed":1}})";
    const std::string a2 = R"({"model":{"arch":"dense"},"run":{"seed":2}})";
    const std::string b = R"({"model":{"arch":"mod"},"run":{"seed":1}})";
    const auto r1 = add_run(store, "dense", a, 1, {3.0, 2.0});
    const auto r2 = add_run(store, "dense", a2, 2, {3.0, 2.5});
    const auto r3 = add_run(store, "mod", b, 1, {3.0, 1.5});
    const auto groups = group_runs(store, {r1, r3, r2}, true);
    QCOMPARE(groups.size(), std::size_t{2});
    QCOMPARE(groups[0].run_ids, (std::vector<std::int64_t>{r1, r2}));
    QCOMPARE(groups[0].label, std::string("dense (2 seeds)"));
    const auto table = build_run_table(store, custom_table_spec({"val/loss", "val/accuracy"}), {r1, r2, r3});
    QCOMPARE(table.rows.size(), std::size_t{2});
    QCOMPARE(table.rows[0].cells[0]->mean, 2.25);
    QCOMPARE(table.rows[0].cells[0]->std, std::sqrt(0.125));
    QCOMPARE(table.rows[1].cells[0]->mean, 1.5);
    QVERIFY(!table.rows[0].cells[1].has_value());  // no accuracy stored
    QCOMPARE(best_row(table, 0), 1);
    QCOMPARE(reduce_metric(store, r2, "val/loss", Reduce::Min), 2.5);
    QCOMPARE(build_run_table(store, custom_table_spec({"val/loss"}), {r1, r2}, false).rows.size(), std::size_t{2});
    // The table built from the store compiles, and the PDF shows the stored numbers.
    QString out;
    if (!QStandardPaths::findExecutable("pdflatex").isEmpty() && !QStandardPaths::findExecutable("pdftotext").isEmpty()) {
      QVERIFY(compile_latex(to_latex(table), out));
      QVERIFY2(out.contains("2.250") && out.contains("1.500") && out.contains("dense (2 seeds)"), qPrintable(out));
    }
    QVERIFY_EXCEPTION_THROWN(group_runs(store, {999}, true), StoreError);
    QVERIFY_EXCEPTION_THROWN(table_spec("no-such-table"), ConfigError);
    for (const auto& spec : table_specs()) QVERIFY(!table_spec(spec.name).columns.empty());
  }

  void perEpochTableReadsEachEpochsEnd() {
    QTemporaryDir dir;
    RunStore store(dir.filePath("runs.sqlite").toStdString());
    const auto id = add_run(store, "tagat", R"({"model":{"arch":"tagat"},"run":{"seed":1}})", 1, {});
    // Two epochs ending at steps 10 and 20; an evaluation mid-epoch (step 15) is superseded by the one at 20.
    std::vector<MetricRow> rows = {{"train/epoch_loss", 10, 0, 1.5},   {"train/epoch_loss", 20, 0, 1.2},
                                   {"val/accuracy", 10, 0, 0.5},       {"val/accuracy", 15, 0, 0.55},
                                   {"val/accuracy", 20, 0, 0.6},       {"val/load/E0", 10, 0, 0.7},
                                   {"val/load/E1", 10, 0, 0.3},        {"val/load/E0", 20, 0, 0.55},
                                   {"val/load/E1", 20, 0, 0.45}};
    store.insert_metrics(id, rows);
    const auto table = build_run_table(store, table_spec("tagat-table1"), {id});
    QCOMPARE(table.rows.size(), std::size_t{2});
    QCOMPARE(table.rows[1].label, std::string("2"));
    QCOMPARE(table.columns.size(), std::size_t{8});  // 6 named + 2 experts found in the store
    QCOMPARE(table.columns[7].header, std::string("Expert 2 load"));
    QCOMPARE(table.rows[0].cells[0]->mean, 1.5);
    QCOMPARE(table.rows[1].cells[2]->mean, 0.6);
    QCOMPARE(table.rows[1].cells[7]->mean, 0.45);
    QVERIFY(!table.rows[0].cells[3].has_value());  // no macro-F1 stored
    const auto lm = add_run(store, "dense", R"({"model":{"arch":"dense"},"run":{"seed":1}})", 1, {2.0});
    QVERIFY_EXCEPTION_THROWN(build_run_table(store, table_spec("tagat-table3"), {lm}), DataError);
  }

  void interpolationMatchesHandComputation() {
    // Loss at matched FLOPs: a curve sampled at 1, 3, 7 (cumulative FLOPs) read at 2 and 5.
    const Curve c{{1, 3, 7}, {4.0, 3.0, 1.0}};
    const auto v = interpolate(c, {0.5, 1, 2, 5, 7, 8});
    QVERIFY(std::isnan(v[0]));
    QCOMPARE(v[1], 4.0);
    QCOMPARE(v[2], 3.5);   // halfway from 4 to 3
    QCOMPARE(v[3], 2.0);   // halfway from 3 to 1
    QCOMPARE(v[4], 1.0);
    QVERIFY(std::isnan(v[5]));
    QVERIFY_EXCEPTION_THROWN(interpolate(Curve{{2, 1}, {0, 0}}, {1}), std::invalid_argument);
    QCOMPARE(cumulative({1, 2, 4}), (std::vector<double>{1, 3, 7}));
    const auto g = make_grid(1, 100, 3, true);
    QCOMPARE(g[1], 10.0);
  }

  void cumulativeFlopsPricesEachStepAtItsRatio() {
    // Dense step 10 FLOPs; ratio 0.5 logged at step 5 (also covers steps 1-4), 0.2 from step 10 on.
    const CumulativeFlops axis(10, {5, 10}, {0.5, 0.2});
    QCOMPARE(axis.at(0), 0.0);
    QCOMPARE(axis.at(3), 15.0);
    QCOMPARE(axis.at(9), 45.0);
    QCOMPARE(axis.at(10), 47.0);
    QCOMPARE(axis.at(12), 51.0);
    QCOMPARE(CumulativeFlops(10, {}, {}).at(4), 40.0);  // nothing measured: every step at the dense price
    QVERIFY_EXCEPTION_THROWN(CumulativeFlops(10, {5, 2}, {1, 1}), std::invalid_argument);
  }

  void bandAveragesWhereCurvesExist() {
    const auto band = mean_band({Curve{{0, 2}, {1, 3}}, Curve{{0, 1}, {3, 3}}}, {0, 1, 2});
    QCOMPARE(band.mean[0], 2.0);
    QCOMPARE(band.std[0], std::sqrt(2.0));
    QCOMPARE(band.mean[1], 2.5);   // (2 + 3) / 2
    QCOMPARE(band.count[2], 1);    // the second curve ends at 1
    QCOMPARE(band.mean[2], 3.0);
    QCOMPARE(band.std[2], 0.0);
  }

  void paretoFrontDropsDominatedPoints() {
    // (cost, loss): B dominates D; C is cheapest; A is best quality.
    const std::vector<TradeoffPoint> p = {{1.0, 2.0}, {0.7, 2.2}, {0.5, 2.6}, {0.8, 2.3}};
    QCOMPARE(pareto_front(p), (std::vector<std::size_t>{2, 1, 0}));
    // Accuracy-like quality: higher is better.
    const std::vector<TradeoffPoint> acc = {{1.0, 0.9}, {0.5, 0.8}, {0.6, 0.7}};
    QCOMPARE(pareto_front(acc, true), (std::vector<std::size_t>{1, 0}));
  }
};

}  // namespace test_report

ROUTELAB_TEST_SUITE(test_report, TestReport)
#include "test_report.moc"
