// Qt Test suite for the compare view (offscreen): synthetic runs of three architectures (two dense seeds) in a
// temporary store; the run list and its filter, figures built off the GUI thread (curves with a seed band,
// matched budgets, Pareto, routed layers), the matched-budget table's rows, columns and values and its exports,
// the config diff listing exactly the differing keys, errors in the status line, the latest request winning (and
// builds no longer wanted stopping early), and the main window's dock, shortcut and the runs panel's compare request.
#include <QAction>
#include <QApplication>
#include <QClipboard>
#include <QComboBox>
#include <QFile>
#include <QListWidget>
#include <QPushButton>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTableView>
#include <QTemporaryDir>
#include <QThread>
#include <QtTest>

#include <chrono>
#include <cmath>
#include <memory>

#include "core/config/experiment_config.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "ui/compare_view.h"
#include "ui/figure_render.h"
#include "ui/figure_worker.h"
#include "ui/main_window.h"
#include "ui/runs_panel.h"
#include "ui/store_service.h"
#include "ui/workspace_tabs.h"
#include "widgets/qcustomplot_include.h"
#include "widgets/word_completer.h"
#include "tests/store_test_support.h"
#include "tests/suite.h"
#include "tests/synthetic_runs.h"

namespace test_gui_compare {

using routelab::CompareView;

namespace {

constexpr int kBuildTimeoutMs = 30000;

using test::SyntheticRun;

using test::addSyntheticRun;
using test::syntheticConfig;

QStringList diffKeys(const CompareView& view) {
  QStringList keys;
  const QAbstractItemModel* model = view.diffView()->model();
  for (int r = 0; r < model->rowCount(); ++r) keys << model->index(r, 0).data().toString();
  return keys;
}

int visibleItems(const QListWidget* list) {
  int n = 0;
  for (int i = 0; i < list->count(); ++i) n += list->item(i)->isHidden() ? 0 : 1;
  return n;
}

}  // namespace

class TestGuiCompare : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase();
  void runsAppearAndFilter();
  void curvesOverlayOneColourPerArchitectureWithSeedBands();
  void matchedTableHasRowsPerGroupAndColumnsPerBudget();
  void configDiffListsExactlyTheDifferingKeys();
  void otherFiguresAndErrorsInTheStatusLine();
  void latestRequestWins();
  void mainWindowHasTheDockShortcutAndCompareRequest();
  void figureWithMetricChoicesOffersThem();
  void unwantedBuildsStopEarly();

 private:
  /// A view on the test store, shown, once its runs are listed (callers check the count).
  std::unique_ptr<CompareView> makeView();
  /// Waits until a result newer than `after` is shown.
  bool waitForResult(CompareView& view, quint64 after);

  QTemporaryDir home_;
  QString dbPath_;
  std::unique_ptr<routelab::StoreService> service_;
  std::int64_t denseA_ = 0, denseB_ = 0, dtr_ = 0, mod_ = 0, other_ = 0;
};

void TestGuiCompare::initTestCase() {
  QVERIFY(home_.isValid());
  QStandardPaths::setTestModeEnabled(true);
  QCoreApplication::setOrganizationName(QStringLiteral("RouteLabTest"));
  QCoreApplication::setApplicationName(QStringLiteral("test_gui_compare"));
  qputenv("ROUTELAB_HOME", home_.path().toUtf8());
  qputenv("XDG_CONFIG_HOME", home_.filePath(QStringLiteral("config")).toUtf8());
  qputenv("ROUTELAB_NO_CONFIRM", "1");
  dbPath_ = home_.filePath(QStringLiteral("runs.sqlite"));

  routelab::RunStore store(dbPath_.toStdString(), /*mark_crashed=*/false);
  const std::string dense = R"({"arch":"dense","n_layer":2,"n_embd":32})";
  const std::string denseLayers = R"([{"routed":false,"routed_fraction":1.0},{"routed":false,"routed_fraction":1.0}])";
  denseA_ = addSyntheticRun(store, {"dense/seed=1", "dense", syntheticConfig(dense, "0.001", 1), {3.0, 2.0, 1.0}, 1.0, denseLayers, ""}, 1);
  denseB_ = addSyntheticRun(store, {"dense/seed=2", "dense", syntheticConfig(dense, "0.001", 2), {3.2, 2.2, 1.2}, 1.0, denseLayers, ""}, 2);
  dtr_ = addSyntheticRun(store,
                {"dtrnet-bilayer", "dtrnet",
                 syntheticConfig(R"({"arch":"dtrnet","n_layer":2,"n_embd":32,"pattern":"bilayer"})", "0.001", 1),
                 {2.8, 1.8, 0.9}, 0.6,
                 R"([{"routed":false,"routed_fraction":1.0},{"routed":true,"routed_fraction":0.25}])",
                 R"({"tokens":["I","n"," ","t"],"layers":[{"layer":1,"gate":[0.9,0.2,0.1,0.7],)"
                 R"("decision":[1,0,0,1]}]})"},
                1);
  mod_ = addSyntheticRun(store,
                {"mod-12.5", "mod", syntheticConfig(R"({"arch":"mod","n_layer":2,"n_embd":32,"capacity":0.125})", "0.002", 1),
                 {3.4, 2.6, 2.0}, 0.5,
                 R"([{"routed":false,"routed_fraction":1.0},{"routed":true,"routed_fraction":0.125}])",
                 R"({"tokens":["I","n"," ","t"],"layers":[{"layer":1,"gate":[0.4,0.6,0.1,0.2],)"
                 R"("decision":[0,1,0,0]}]})"},
                1);
  other_ = addSyntheticRun(store, {"unrelated", "tsa", syntheticConfig(R"({"arch":"tsa","n_layer":2})", "0.001", 1), {4.0}, 0.9,
                          R"([{"routed":true,"routed_fraction":0.5}])", ""},
                  1);
  service_ = std::make_unique<routelab::StoreService>(dbPath_);
}

std::unique_ptr<CompareView> TestGuiCompare::makeView() {
  auto view = std::make_unique<CompareView>(service_.get());
  view->resize(1200, 800);
  view->show();
  service_->requestRuns();
  (void)QTest::qWaitFor([&] { return view->runList()->count() == 5; }, kBuildTimeoutMs);
  return view;
}

bool TestGuiCompare::waitForResult(CompareView& view, quint64 after) {
  return QTest::qWaitFor([&] { return view.shownSerial() > after; }, kBuildTimeoutMs);
}

void TestGuiCompare::runsAppearAndFilter() {
  auto view = makeView();
  QCOMPARE(view->runList()->count(), 5);
  QVERIFY(view->checkedRuns().isEmpty());
  QCOMPARE(view->statusText(), QStringLiteral("Check runs to compare."));
  view->filterEdit()->setText(QStringLiteral("dtr"));
  QCOMPARE(visibleItems(view->runList()), 1);
  view->filterEdit()->setText(QStringLiteral("DENSE"));  // case-insensitive, name or architecture
  QCOMPARE(visibleItems(view->runList()), 2);
  view->filterEdit()->clear();
  QCOMPARE(visibleItems(view->runList()), 5);
  // Comparisons as in the runs browser (RunQuery): a config key by value, the run's seed; "Check shown" checks the
  // runs shown, "Uncheck all" every run.
  view->filterEdit()->setText(QStringLiteral("lr>0.0015"));
  QCOMPARE(visibleItems(view->runList()), 1);  // MoD's 0.002
  view->filterEdit()->setText(QStringLiteral("arch=dense seed=2"));
  QCOMPARE(visibleItems(view->runList()), 1);
  view->filterEdit()->setText(QStringLiteral("arch=dense"));
  auto* checkShown = view->findChild<QPushButton*>(QStringLiteral("compareCheckShown"));
  auto* uncheckAll = view->findChild<QPushButton*>(QStringLiteral("compareUncheckAll"));
  QVERIFY(checkShown && uncheckAll);
  checkShown->click();
  QCOMPARE(view->checkedRuns(), (QList<qint64>{denseA_, denseB_}));
  view->filterEdit()->clear();
  uncheckAll->click();
  QVERIFY(view->checkedRuns().isEmpty());

  // A check survives a refresh of the list (the main window refreshes every 1.5 s).
  view->setRunChecked(dtr_, true);
  QCOMPARE(view->checkedRuns(), QList<qint64>{dtr_});
  QSignalSpy loaded(service_.get(), &routelab::StoreService::runsLoaded);
  service_->requestRuns();
  QVERIFY(loaded.wait(kBuildTimeoutMs));
  QCOMPARE(view->checkedRuns(), QList<qint64>{dtr_});
}

void TestGuiCompare::curvesOverlayOneColourPerArchitectureWithSeedBands() {
  auto view = makeView();
  QCOMPARE(view->runList()->count(), 5);
  QVERIFY(view->setFigureName(QStringLiteral("curves")));
  for (const auto id : {denseA_, denseB_, dtr_, mod_}) view->setRunChecked(id, true);
  QTRY_VERIFY_WITH_TIMEOUT(view->figureView()->figure().name == "curves" &&
                               view->figureView()->figure().panels.size() == 1 &&
                               view->figureView()->figure().panels[0].series.size() == 3,
                           kBuildTimeoutMs);
  const auto& series = view->figureView()->figure().panels[0].series;
  // The two dense seeds are one line with a mean +- std band; the three architectures have three colours.
  QCOMPARE(series[0].label, std::string("dense (2 seeds)"));
  QCOMPARE(series[0].y_lo.size(), series[0].y.size());
  QVERIFY(!series[0].y_lo.empty());
  QVERIFY(series[0].color != series[1].color && series[1].color != series[2].color &&
          series[0].color != series[2].color);
  QCOMPARE(view->figureView()->plot()->axisRectCount(), 1);
  QVERIFY(view->figureView()->plot()->graphCount() >= 3);
  QVERIFY2(!view->statusText().contains(QStringLiteral("rror")), qPrintable(view->statusText()));

  // The metric combo is filled off the GUI thread with the checked runs' keys.
  QTRY_VERIFY_WITH_TIMEOUT(view->metricCombo()->findText(QStringLiteral("train/loss")) >= 0, kBuildTimeoutMs);
  QVERIFY(view->metricCombo()->findText(QStringLiteral("val/flops_ratio")) >= 0);
  QCOMPARE(view->metricCombo()->currentText(), QStringLiteral("val/loss"));

  // Without grouping, every run is its own line.
  quint64 shown = view->shownSerial();
  view->setGroupSeeds(false);
  QVERIFY(waitForResult(*view, shown));
  QCOMPARE(view->figureView()->figure().panels[0].series.size(), std::size_t{4});

  if (const QByteArray dir = qgetenv("ROUTELAB_SCREENSHOT_DIR"); !dir.isEmpty()) {
    view->setGroupSeeds(true);
    view->setBudgets(QStringLiteral("150, 250"));
    shown = view->shownSerial();
    QVERIFY(waitForResult(*view, shown));
    QTRY_VERIFY_WITH_TIMEOUT(view->matchedTable().has_value(), kBuildTimeoutMs);
    QTest::qWait(200);  // the plot's queued replot
    const QString path = QString::fromUtf8(dir) + QStringLiteral("/compare-view.png");
    QVERIFY(view->grab().save(path));
    qInfo("screenshot: %s", qPrintable(path));
  }
}

void TestGuiCompare::matchedTableHasRowsPerGroupAndColumnsPerBudget() {
  auto view = makeView();
  QCOMPARE(view->runList()->count(), 5);
  QVERIFY(view->setFigureName(QStringLiteral("matched")));
  view->setXAxis(QStringLiteral("step"));
  view->setBudgets(QStringLiteral("250, 150"));  // sorted on the way in
  for (const auto id : {denseA_, denseB_, dtr_, mod_}) view->setRunChecked(id, true);
  QTRY_VERIFY_WITH_TIMEOUT(view->matchedTable().has_value() && view->figureView()->figure().name == "matched",
                           kBuildTimeoutMs);
  const QAbstractItemModel* model = view->matchedView()->model();
  QCOMPARE(model->rowCount(), 3);     // dense (2 seeds), dtrnet, mod
  QCOMPARE(model->columnCount(), 3);  // run, @150, @250
  QCOMPARE(model->headerData(1, Qt::Horizontal).toString(), QStringLiteral("@ 150"));
  QCOMPARE(model->headerData(2, Qt::Horizontal).toString(), QStringLiteral("@ 250"));
  QCOMPARE(model->index(0, 0).data().toString(), QStringLiteral("dense (2 seeds)"));
  // Linear interpolation: dense seeds 2.5 and 2.7 at step 150 (mean 2.6, std 0.1414), dtrnet 2.3, mod 3.0.
  QCOMPARE(model->index(0, 1).data(CompareView::kValueRole).toDouble(), 2.6);
  QCOMPARE(model->index(0, 1).data().toString(), QStringLiteral("2.6000 ± 0.1414"));
  QCOMPARE(model->index(1, 1).data(CompareView::kValueRole).toDouble(), 2.3);
  QCOMPARE(model->index(2, 1).data(CompareView::kValueRole).toDouble(), 3.0);
  QCOMPARE(model->index(1, 2).data(CompareView::kValueRole).toDouble(), 1.35);
  QVERIFY(model->index(1, 1).data(Qt::FontRole).value<QFont>().bold());  // lowest loss in bold
  QCOMPARE(view->figureView()->figure().panels.size(), std::size_t{1});
  QCOMPARE(view->figureView()->figure().panels[0].series.size(), std::size_t{3});

  // The x axis reaches the builders: step 150 is 150 x 4 x 8 = 4800 tokens.
  quint64 shown = view->shownSerial();
  view->setXAxis(QStringLiteral("tokens"));
  view->setBudgets(QStringLiteral("4800"));
  QVERIFY(waitForResult(*view, shown));
  QTRY_COMPARE_WITH_TIMEOUT(view->matchedView()->model()->columnCount(), 2, kBuildTimeoutMs);
  QCOMPARE(view->matchedView()->model()->index(1, 1).data(CompareView::kValueRole).toDouble(), 2.3);

  // Exports through core/report/tables/table.h.
  QTemporaryDir out;
  const QString tex = out.filePath(QStringLiteral("m.tex")), md = out.filePath(QStringLiteral("m.md")),
                csv = out.filePath(QStringLiteral("m.csv"));
  QCOMPARE(view->saveTable(tex), QString());
  QCOMPARE(view->saveTable(md), QString());
  QCOMPARE(view->saveTable(csv), QString());
  QVERIFY(view->saveTable(out.filePath(QStringLiteral("m.docx"))).contains(QStringLiteral("m.docx")));
  QFile texFile(tex);
  QVERIFY(texFile.open(QIODevice::ReadOnly));
  const QByteArray latex = texFile.readAll();
  QVERIFY(latex.contains("\\toprule") && latex.contains("dense (2 seeds)"));
  QFile mdFile(md);
  QVERIFY(mdFile.open(QIODevice::ReadOnly));
  QVERIFY(mdFile.readAll().contains("| dense (2 seeds) |"));
  view->copyTableAsLatex();
  QVERIFY(QGuiApplication::clipboard()->text().contains(QStringLiteral("\\toprule")));

  // A bad budget is reported in the status line, not in a dialog.
  shown = view->shownSerial();
  view->setBudgets(QStringLiteral("12, abc"));
  QVERIFY(waitForResult(*view, shown));
  QVERIFY2(view->statusText().contains(QStringLiteral("'abc' is not a number")), qPrintable(view->statusText()));
  QCOMPARE(QApplication::activeModalWidget(), nullptr);

  // A named layout instead: the summary table, one row per group, the last validation loss.
  shown = view->shownSerial();
  view->tableCombo()->setCurrentIndex(view->tableCombo()->findData(QStringLiteral("summary")));
  QVERIFY(waitForResult(*view, shown));
  QTRY_COMPARE_WITH_TIMEOUT(view->matchedView()->model()->headerData(1, Qt::Horizontal).toString(),
                            QStringLiteral("Val. loss"), kBuildTimeoutMs);
  QCOMPARE(view->matchedView()->model()->rowCount(), 3);
  QCOMPARE(view->matchedTable()->label, std::string("tab:summary"));

  // A figure's table: the grid of two swept options, which these runs (one swept, train.lr) do not make.
  shown = view->shownSerial();
  QVERIFY(!view->gridOptionsEdit()->isVisibleTo(view.get()));  // the Grid field shows with a sweep grid only
  view->tableCombo()->setCurrentIndex(view->tableCombo()->findData(QStringLiteral("figure:sweep-grid")));
  QVERIFY(view->gridOptionsEdit()->isVisibleTo(view.get()));
  const QString gridTip = view->gridOptionsEdit()->toolTip();  // what it can name: the keys the runs differ in
  QVERIFY2(gridTip.contains("differ in:") && gridTip.contains("train.lr") && !gridTip.contains("run.seed"),
           qPrintable(gridTip));
  const QStringList gridWords = view->gridOptionsCompleter()->words();  // and what it completes
  QVERIFY2(gridWords.contains("train.lr") && !gridWords.contains("run.seed") && !gridWords.contains("model.arch"),
           qPrintable(gridWords.join(' ')));
  QVERIFY(waitForResult(*view, shown));
  QVERIFY2(view->statusText().contains(QStringLiteral("Table: sweep-grid: the runs sweep one option (train.lr)")),
           qPrintable(view->statusText()));
  QVERIFY(!view->matchedTable().has_value());
  shown = view->shownSerial();
  view->gridOptionsEdit()->setText(QStringLiteral("train.lr, model.n_layer"));  // the Grid field reaches the table
  view->refresh();
  QVERIFY(waitForResult(*view, shown));
  QVERIFY2(view->statusText().contains(
               QStringLiteral("'model.n_layer' is not an option the runs set to more than one value (train.lr)")),
           qPrintable(view->statusText()));
}

void TestGuiCompare::configDiffListsExactlyTheDifferingKeys() {
  auto view = makeView();
  QCOMPARE(view->runList()->count(), 5);
  QVERIFY(view->setFigureName(QStringLiteral("curves")));
  view->setRunChecked(denseA_, true);
  view->setRunChecked(denseB_, true);
  QTRY_COMPARE_WITH_TIMEOUT(view->diffView()->model()->rowCount(), 1, kBuildTimeoutMs);
  QCOMPARE(diffKeys(*view), QStringList{QStringLiteral("run.seed")});
  QCOMPARE(view->diffView()->model()->columnCount(), 3);  // key + two runs

  const quint64 shown = view->shownSerial();
  view->setRunChecked(dtr_, true);
  view->setRunChecked(mod_, true);
  QVERIFY(waitForResult(*view, shown));
  QTRY_COMPARE_WITH_TIMEOUT(view->diffView()->model()->columnCount(), 5, kBuildTimeoutMs);
  QCOMPARE(diffKeys(*view), (QStringList{"model.arch", "model.capacity", "model.pattern", "run.seed", "train.lr"}));
  const QAbstractItemModel* model = view->diffView()->model();
  // Columns follow the checked runs in id order; a key a run lacks shows a dash.
  QCOMPARE(model->headerData(3, Qt::Horizontal).toString(), QStringLiteral("#%1 dtrnet-bilayer").arg(dtr_));
  QCOMPARE(model->index(1, 4).data().toString(), QStringLiteral("0.125"));
  QCOMPARE(model->index(1, 1).data().toString(), QString::fromUtf8(routelab::kConfigDiffMissing));
  QCOMPARE(model->index(2, 3).data().toString(), QStringLiteral("bilayer"));
  QCOMPARE(view->configDiff().keys_compared, std::size_t{9});
  view->copyDiff();
  QVERIFY(QGuiApplication::clipboard()->text().contains(QStringLiteral("model.capacity\t—\t—\t—\t0.125")));
}

void TestGuiCompare::otherFiguresAndErrorsInTheStatusLine() {
  auto view = makeView();
  QCOMPARE(view->runList()->count(), 5);
  for (const auto id : {denseA_, denseB_, dtr_, mod_}) view->setRunChecked(id, true);

  QVERIFY(view->setFigureName(QStringLiteral("routed-layers")));
  QTRY_VERIFY_WITH_TIMEOUT(view->figureView()->figure().name == "routed-layers", kBuildTimeoutMs);
  const auto& bars = view->figureView()->figure().panels.at(0).bars;
  QCOMPARE(bars.categories.size(), std::size_t{2});  // two layers
  QVERIFY(bars.members.size() >= 3);

  QVERIFY(view->setFigureName(QStringLiteral("pareto")));
  QTRY_VERIFY_WITH_TIMEOUT(view->figureView()->figure().name == "pareto", kBuildTimeoutMs);
  const auto& series = view->figureView()->figure().panels.at(0).series;
  QCOMPARE(series.size(), std::size_t{4});  // three groups and the front
  QCOMPARE(series.back().label, std::string("Pareto front"));
  QCOMPARE(view->figureView()->plot()->axisRectCount(), 1);

  // Token maps need probes: the builder's error lands in the status line and the canvas is cleared.
  quint64 shown = view->shownSerial();
  QVERIFY(view->setFigureName(QStringLiteral("token-maps")));
  QVERIFY(waitForResult(*view, shown));
  QVERIFY(view->figureView()->figure().panels.empty());
  QVERIFY(!view->statusText().isEmpty() && view->statusText() != QStringLiteral("Building…"));
  QVERIFY(view->diffView()->model()->rowCount() > 0);  // the rest still shows
  QCOMPARE(QApplication::activeModalWidget(), nullptr);

  // Two runs with probes: both maps side by side and their difference on a diverging scale.
  shown = view->shownSerial();
  view->showRuns({dtr_, mod_});
  QVERIFY(waitForResult(*view, shown));
  QTRY_COMPARE_WITH_TIMEOUT(view->figureView()->figure().panels.size(), std::size_t{3}, kBuildTimeoutMs);
  {
    const auto& panels = view->figureView()->figure().panels;
    QCOMPARE(panels[0].heatmap.cols, std::size_t{4});
    QVERIFY(panels[2].heatmap.diverging);
    QCOMPARE(panels[2].heatmap.values[0], 0.9 - 0.4);
    QVERIFY(view->figureView()->plot()->axisRectCount() >= 3);
    QVERIFY(view->matchedTable().has_value());  // the table still reads val/loss
  }
  shown = view->shownSerial();
  view->setShowDecisions(true);
  QVERIFY(waitForResult(*view, shown));
  QCOMPARE(view->figureView()->figure().meta.value("map", std::string()), std::string("decision"));
  QCOMPARE(view->figureView()->figure().panels.at(2).heatmap.values[1], -1.0);  // 0 - 1

  // One run is too few for token maps: said before asking the worker.
  shown = view->shownSerial();
  view->showRuns({dtr_});
  QVERIFY(waitForResult(*view, shown));
  QVERIFY2(view->statusText().contains(QStringLiteral("needs at least 2 runs")), qPrintable(view->statusText()));

  // No run checked: everything is cleared.
  view->showRuns({});
  QTRY_COMPARE_WITH_TIMEOUT(view->statusText(), QStringLiteral("Check runs to compare."), kBuildTimeoutMs);
  QCOMPARE(view->diffView()->model()->rowCount(), 0);
}

void TestGuiCompare::latestRequestWins() {
  auto view = makeView();
  QCOMPARE(view->runList()->count(), 5);
  QSignalSpy shownSpy(view.get(), &CompareView::resultShown);
  for (const auto id : {denseA_, dtr_, mod_}) view->setRunChecked(id, true);
  // Requests faster than the worker answers: only the last one's figure may end up on screen.
  for (const char* name : {"pareto", "curves", "matched", "pareto", "curves"}) {
    QVERIFY(view->setFigureName(QString::fromLatin1(name)));
    QTest::qWait(CompareView::kUpdateDelayMs + 10);  // past the debounce: each one is a request of its own
  }
  QVERIFY(view->setFigureName(QStringLiteral("routed-layers")));
  QTRY_VERIFY_WITH_TIMEOUT(view->figureView()->figure().name == "routed-layers", kBuildTimeoutMs);
  QCOMPARE(view->shownSerial(), view->requestedSerial());
  const quint64 last = view->shownSerial();
  QTest::qWait(500);
  QCOMPARE(view->shownSerial(), last);  // nothing older arrives afterwards
  QCOMPARE(view->figureView()->figure().name, std::string("routed-layers"));
  // Every shown result is newer than the one before.
  quint64 previous = 0;
  for (const auto& args : shownSpy) {
    const quint64 serial = args.at(0).value<quint64>();
    QVERIFY(serial > previous);
    previous = serial;
  }
}

void TestGuiCompare::mainWindowHasTheDockShortcutAndCompareRequest() {
  routelab::MainWindowOptions options;
  options.dbPath = dbPath_;
  options.confirmClose = false;
  routelab::MainWindow window(options);
  window.show();
  QVERIFY(QTest::qWaitForWindowExposed(&window));
  // Compare is a tab of the workspace, opened and closed from View (and its tab's close button).
  routelab::WorkspaceTabs* tabs = window.workspace();
  CompareView* view = window.compareView();
  QVERIFY(!tabs->isPageOpen(view));
  auto* action = window.findChild<QAction*>(QStringLiteral("compareAction"));
  QVERIFY(action);
  QCOMPARE(action, window.compareAction());
  QCOMPARE(action->shortcut(), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_C));
  action->trigger();
  QVERIFY(tabs->isPageOpen(view));
  QCOMPARE(tabs->currentIndex(), tabs->tabOf(view));
  QVERIFY(view->isVisible());
  QTRY_COMPARE_WITH_TIMEOUT(view->runList()->count(), 5, kBuildTimeoutMs);

  action->trigger();
  QVERIFY(!tabs->isPageOpen(view));
  QVERIFY(!view->isVisible());
  Q_EMIT window.runsPanel()->compareRequested({dtr_, mod_});
  QVERIFY(tabs->isPageOpen(view));
  QVERIFY(action->isChecked());
  Q_EMIT tabs->tabCloseRequested(tabs->tabOf(view));
  QVERIFY(!tabs->isPageOpen(view));
  QVERIFY(!action->isChecked());
  Q_EMIT window.runsPanel()->compareRequested({dtr_, mod_});
  QCOMPARE(view->checkedRuns(), (QList<qint64>{dtr_, mod_}));
  QTRY_COMPARE_WITH_TIMEOUT(view->diffView()->model()->columnCount(), 3, kBuildTimeoutMs);

  // The runs browser's "What the routers route" opens the same view on routing-by-token for the selected runs.
  QVERIFY(view->setFigureName(QStringLiteral("curves")));
  Q_EMIT tabs->tabCloseRequested(tabs->tabOf(view));
  auto* routes = window.runsPanel()->findChild<QAction*>(QStringLiteral("routesAction"));
  QVERIFY(routes);
  window.runsPanel()->selectRun(mod_);
  QTRY_COMPARE(window.runsPanel()->selectedRunIds(), (QList<qint64>{mod_}));
  QTRY_VERIFY(routes->isEnabled());
  routes->trigger();
  QVERIFY(tabs->isPageOpen(view));
  QCOMPARE(view->figureName(), QStringLiteral("routing-by-token"));
  QCOMPARE(view->checkedRuns(), (QList<qint64>{mod_}));
}

void TestGuiCompare::figureWithMetricChoicesOffersThem() {
  // routing-by-token's `metric` is a token grouping (FigureInfo::metric_choices): chosen, the metric box lists the
  // groupings and the figure is built with the one picked (from a trained run's checkpoint); another figure gets the
  // runs' metric keys back.
  const QString db = home_.filePath(QStringLiteral("trained.sqlite"));
  routelab::TrainRequest request;
  request.config = routelab::resolve_config(
      nlohmann::json::object(),
      {"model.arch=dtrnet", "model.n_layer=3", "model.n_embd=32", "model.n_head=4", "data.source=copy",
       "train.batch_size=4", "train.steps=4", "train.warmup_steps=1", "train.eval_every=4", "train.checkpoint_every=4",
       "train.eval_batches=1", "run.threads=1"},
      "test");
  request.db_path = db.toStdString();
  const auto outcome = routelab::train(request);
  QVERIFY2(outcome.status == routelab::RunStatus::Finished, outcome.message.c_str());
  routelab::StoreService service(db);
  CompareView view(&service);
  view.resize(1200, 800);
  view.show();
  service.requestRuns();
  QTRY_COMPARE_WITH_TIMEOUT(view.runList()->count(), 1, kBuildTimeoutMs);
  view.setRunChecked(outcome.run_id, true);
  auto* metric = view.findChild<QComboBox*>(QStringLiteral("compareMetric"));
  QVERIFY(metric);
  QVERIFY(view.setFigureName(QStringLiteral("routing-by-token")));
  QStringList items;
  for (int i = 0; i < metric->count(); ++i) items << metric->itemText(i);
  QCOMPARE(items, (QStringList{"class", "position", "frequency", "predictability", "difficulty"}));
  QCOMPARE(metric->currentText(), QStringLiteral("class"));
  const auto grouping = [&] {
    const auto& f = view.figureView()->figure();
    return f.name == "routing-by-token" && f.meta.contains("grouping") ? f.meta["grouping"].get<std::string>()
                                                                        : std::string();
  };
  QTRY_COMPARE_WITH_TIMEOUT(grouping(), std::string("class"), kBuildTimeoutMs);
  view.setMetric(QStringLiteral("position"));
  QTRY_COMPARE_WITH_TIMEOUT(grouping(), std::string("position"), kBuildTimeoutMs);
  // The matched table below the figure still reads the metric key, not the grouping.
  QVERIFY2(!view.statusText().contains(QStringLiteral("metric 'position'")), qPrintable(view.statusText()));
  const auto& rows = view.figureView()->figure().panels.at(0).heatmap.row_labels;
  QVERIFY2(!rows.empty() && rows.front() == "0", rows.empty() ? "" : rows.front().c_str());
  QVERIFY(view.setFigureName(QStringLiteral("curves")));
  QTRY_VERIFY_WITH_TIMEOUT(metric->findText(QStringLiteral("val/loss")) >= 0, kBuildTimeoutMs);
  QCOMPARE(metric->findText(QStringLiteral("class")), -1);
  QCOMPARE(metric->currentText(), QStringLiteral("val/loss"));
}

void TestGuiCompare::unwantedBuildsStopEarly() {
  // A figure computed from checkpoints (a routing breakdown of each) that nobody wants any more stops at its next
  // interruption point instead of running to its end: the Compare view's worker answers a request the view has
  // replaced with no figure and nothing computed, and a closed panel's FigureWorker leaves a history of six
  // checkpoints part broken down (the breakdowns it finished kept, for the next build to read back).
  const QString db = home_.filePath(QStringLiteral("unwanted.sqlite"));
  routelab::TrainRequest train;
  train.config = routelab::resolve_config(
      nlohmann::json::object(),
      {"model.arch=dtrnet", "model.n_layer=3", "model.n_embd=32", "model.n_head=4", "data.source=copy",
       "train.batch_size=4", "train.steps=12", "train.warmup_steps=1", "train.eval_every=12",
       "train.checkpoint_every=2", "train.eval_batches=1", "run.threads=1"},
      "test");
  train.db_path = db.toStdString();
  const auto outcome = routelab::train(train);
  QVERIFY2(outcome.status == routelab::RunStatus::Finished, outcome.message.c_str());
  const auto kept = [&] {
    return std::stoi(routelab::test::RawDb(db.toStdString()).text("SELECT COUNT(*) FROM analyses"));
  };

  routelab::CompareWorker worker(db);
  QSignalSpy built(&worker, &routelab::CompareWorker::built);
  routelab::CompareRequest request;
  request.serial = 1;
  request.figure.name = "routing-by-token";
  request.figure.run_ids = {outcome.run_id};
  worker.want(2);         // the view has sent a later request since
  worker.build(request);  // on this thread: answered at once
  QCOMPARE(built.count(), 1);
  auto answer = built.at(0).at(0).value<routelab::CompareResult>();
  QCOMPARE(answer.serial, quint64(1));
  QVERIFY(!answer.figure);
  QCOMPARE(kept(), 0);
  worker.want(1);
  worker.build(request);
  QCOMPARE(built.count(), 2);
  answer = built.at(1).at(0).value<routelab::CompareResult>();
  QVERIFY2(answer.figure && answer.figure->name == "routing-by-token", qPrintable(answer.figureError));
  QCOMPARE(kept(), 1);  // the latest checkpoint's breakdown

  routelab::FigureRequest history;
  history.name = "routing-by-token-history";
  history.run_ids = {outcome.run_id};
  auto figures = std::make_unique<routelab::FigureWorker>(db);
  figures->request(history);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kBuildTimeoutMs);
  while (kept() < 2 && std::chrono::steady_clock::now() < deadline) QThread::msleep(2);
  QCOMPARE(kept(), 2);  // the history's first checkpoint broken down (step 2), four to go (step 12's is kept)
  figures.reset();      // as a dashboard closing: stops at the next checkpoint or batch, and waits for that
  QVERIFY2(kept() < 6, std::to_string(kept()).c_str());
}

}  // namespace test_gui_compare

ROUTELAB_TEST_SUITE(test_gui_compare, TestGuiCompare)
#include "test_gui_compare.moc"
