// The main window at laptop and desktop sizes: with a dashboard, the Compare view and the token inspector open,
// its minimum size fits the screen, and each panel's key widgets are on screen at a usable size, without
// floating a dock or scrolling sideways. And the overview: the runs selected in the browser overlaid in one plot
// whose legend and markers cover and cut no data.
#include <QAction>
#include <QCoreApplication>
#include <QDockWidget>
#include <QFormLayout>
#include <QHeaderView>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QStandardPaths>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>

#include <memory>

#include "core/store/run_store.h"
#include "ui/compare_view.h"
#include "ui/experiment_designer.h"
#include "ui/main_window.h"
#include "ui/run_dashboard.h"
#include "ui/runs_panel.h"
#include "ui/runs_table_model.h"
#include "ui/token_inspector.h"
#include "ui/workspace_tabs.h"
#include "widgets/loss_plot_widget.h"
#include "widgets/qcustomplot_include.h"
#include "tests/suite.h"
#include "tests/synthetic_runs.h"

namespace test_gui_layout {

using routelab::MainWindow;
using routelab::RunsTableModel;

namespace {

constexpr int kLoadTimeoutMs = 20000;

/// Whether the whole of `widget` is on screen: shown, and not clipped by a scroll area or its window (for a widget
/// without children: children cover their parent's visible region).
bool wholeOnScreen(const QWidget* widget) {
  return widget->isVisible() && widget->visibleRegion().boundingRect().size() == widget->size();
}

QString sizeText(const QSize& s) { return QStringLiteral("%1x%2").arg(s.width()).arg(s.height()); }

/// The fields of the designer's forms that are wholly on screen.
int visibleFormRows(const QWidget* designer) {
  int n = 0;
  for (const QFormLayout* form : designer->findChildren<QFormLayout*>())
    for (int r = 0; r < form->rowCount(); ++r)
      if (const QLayoutItem* item = form->itemAt(r, QFormLayout::FieldRole); item && item->widget())
        n += wholeOnScreen(item->widget()) ? 1 : 0;
  return n;
}

/// Whether column `c` of `view` lies wholly inside its viewport, at least `minWidth` wide.
bool columnOnScreen(const QTableView* view, int c, int minWidth) {
  const int x = view->columnViewportPosition(c);
  return !view->isColumnHidden(c) && x >= 0 && x + view->columnWidth(c) <= view->viewport()->width() &&
         view->columnWidth(c) >= minWidth;
}

/// The index of run `runId` in `view` (sorted and filtered as shown).
QModelIndex rowOf(const QTableView* view, qint64 runId) {
  for (int r = 0; r < view->model()->rowCount(); ++r)
    if (view->model()->index(r, 0).data(RunsTableModel::RunIdRole).toLongLong() == runId)
      return view->model()->index(r, 0);
  return {};
}

/// The graph of `plot` whose legend name is `name`, or null.
QCPGraph* graphNamed(QCustomPlot* plot, const QString& name) {
  for (int i = 0; i < plot->graphCount(); ++i)
    if (plot->graph(i)->name() == name && plot->legend->hasItemWithPlottable(plot->graph(i))) return plot->graph(i);
  return nullptr;
}

/// The scroll area a workspace page sits in.
const QScrollArea* frameOf(const QWidget* page) {
  return qobject_cast<const QScrollArea*>(page->parentWidget() ? page->parentWidget()->parentWidget() : nullptr);
}

}  // namespace

class TestGuiLayout : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase();
  void everyViewFitsTheScreen_data();
  void everyViewFitsTheScreen();
  void resetLayoutBringsBackTheDocks();
  void selectedRunsOverlayInTheOverview();

 private:
  /// A main window on the test store at `size`, shown.
  std::unique_ptr<MainWindow> openWindow(QSize size) const {
    routelab::MainWindowOptions options;
    options.dbPath = dbPath_;
    options.confirmClose = false;
    auto window = std::make_unique<MainWindow>(options);
    window->resize(size);
    window->show();
    return window;
  }

  QTemporaryDir home_;
  QString dbPath_;
  std::int64_t dense_ = 0, dtr_ = 0, mod_ = 0;
};

void TestGuiLayout::initTestCase() {
  QVERIFY(home_.isValid());
  QStandardPaths::setTestModeEnabled(true);
  QCoreApplication::setOrganizationName(QStringLiteral("RouteLabTest"));
  QCoreApplication::setApplicationName(QStringLiteral("test_gui_layout"));
  qputenv("ROUTELAB_HOME", home_.path().toUtf8());
  qputenv("XDG_CONFIG_HOME", home_.filePath(QStringLiteral("config")).toUtf8());
  qputenv("ROUTELAB_NO_CONFIRM", "1");
  dbPath_ = home_.filePath(QStringLiteral("runs.sqlite"));
  routelab::RunStore store(dbPath_.toStdString(), /*mark_crashed=*/false);
  const std::string routed = R"([{"routed":false,"routed_fraction":1.0},{"routed":true,"routed_fraction":0.3}])";
  const std::string probe = R"({"tokens":["I","n"," ","t","h","e"],"layers":[{"layer":1,"gate":[0.9,0.2,0.1,0.7,0.4,0.6],)"
                            R"("decision":[1,0,0,1,0,1]}]})";
  dense_ = test::addSyntheticRun(
      store, {"dense-s1", "dense", test::syntheticConfig(R"({"arch":"dense","n_layer":2})", "0.001", 1),
              {3.0, 2.0, 1.5, 1.2}, 1.0, R"([{"routed":false,"routed_fraction":1.0}])", ""}, 1);
  dtr_ = test::addSyntheticRun(
      store, {"dtrnet-bilayer-with-a-long-name-s2", "dtrnet",
              test::syntheticConfig(R"({"arch":"dtrnet","n_layer":4,"pattern":"bilayer"})", "0.001", 2),
              {2.8, 1.8, 1.4, 1.1}, 0.6, routed, probe}, 2);
  mod_ = test::addSyntheticRun(
      store, {"mod-c0.125-s1", "mod", test::syntheticConfig(R"({"arch":"mod","n_layer":2,"capacity":0.125})", "0.002", 1),
              {3.4, 2.6, 2.0, 1.8}, 0.5, routed, probe}, 1);
}

void TestGuiLayout::everyViewFitsTheScreen_data() {
  QTest::addColumn<QSize>("screen");
  QTest::newRow("1280x720") << QSize(1280, 720);
  QTest::newRow("1920x1080") << QSize(1920, 1080);
}

void TestGuiLayout::everyViewFitsTheScreen() {
  QFETCH(QSize, screen);
  const auto shown = openWindow(screen);
  MainWindow& window = *shown;
  QVERIFY(QTest::qWaitForWindowExposed(&window));
  QTRY_COMPARE_WITH_TIMEOUT(window.runsPanel()->model()->rowCount(), 3, kLoadTimeoutMs);

  routelab::WorkspaceTabs* tabs = window.workspace();
  routelab::RunDashboard* dashboard = tabs->open(dtr_);
  QVERIFY(dashboard);
  window.compareView()->showRuns({dense_, dtr_, mod_});
  window.compareAction()->trigger();
  window.inspectorAction()->trigger();
  QTest::qWait(300);  // the docks' first sizing and the pages' first layout

  const auto fits = [&] {
    const QSize minimum = window.minimumSizeHint().expandedTo(window.minimumSize());
    return minimum.width() <= screen.width() && minimum.height() <= screen.height() && window.size() == screen;
  };
  const QList<QWidget*> pages{window.lossPlot(), dashboard, window.compareView(), window.inspector()};
  for (QWidget* page : pages) {
    tabs->showPage(page);
    QTest::qWait(50);
    QVERIFY2(fits(), qPrintable(QStringLiteral("%1: window minimum %2, size %3")
                                    .arg(page->objectName(), sizeText(window.minimumSizeHint()), sizeText(window.size()))));
    // No page is wider than its tab: nothing to scroll sideways to.
    const QScrollArea* frame = frameOf(page);
    QVERIFY(frame);
    QVERIFY2(page->minimumSizeHint().width() <= frame->viewport()->width(),
             qPrintable(QStringLiteral("%1 needs %2, has %3")
                            .arg(page->objectName(), sizeText(page->minimumSizeHint()), sizeText(frame->viewport()->size()))));
  }

  // Overview: a plot to read, not a strip.
  tabs->showPage(window.lossPlot());
  QVERIFY(window.lossPlot()->plot()->width() >= 500);
  QVERIFY(window.lossPlot()->plot()->height() >= 300);
  // Dashboard: its tab names the run in full (not "run 2 · dtr…"), its loss plot whole on screen.
  tabs->showPage(dashboard);
  QTest::qWait(50);
  QTRY_COMPARE_WITH_TIMEOUT(tabs->tabText(tabs->tabOf(dashboard)),
                            QStringLiteral("run %1 · dtrnet-bilayer-with-a-long-name-s2").arg(dtr_), kLoadTimeoutMs);
  QCOMPARE(tabs->elideMode(), Qt::ElideNone);
  QVERIFY(wholeOnScreen(dashboard->lossPlot()->plot()));
  QVERIFY(dashboard->lossPlot()->plot()->height() >= 150);
  // On a laptop the token view and the cost panel take a tab of their own rather than a strip below the fold; on a
  // desktop they stay under the loss and routing panels. Either way the page fits its tab's height: no scrolling.
  const bool laptop = screen.height() < 900;
  QCOMPARE(dashboard->isCompact(), laptop);
  QCOMPARE(dashboard->tabs()->indexOf(dashboard->lowerPanels()) >= 0, laptop);
  if (laptop) dashboard->tabs()->setCurrentWidget(dashboard->lowerPanels());
  QTest::qWait(50);
  QVERIFY2(dashboard->minimumSizeHint().height() <= frameOf(dashboard)->viewport()->height(),
           qPrintable(QStringLiteral("dashboard needs %1, has %2")
                          .arg(dashboard->minimumSizeHint().height()).arg(frameOf(dashboard)->viewport()->height())));
  QVERIFY(wholeOnScreen(dashboard->costView()->plot()));
  QVERIFY(wholeOnScreen(dashboard->probeSlider()));
  QVERIFY(dashboard->probeSlider()->width() >= 100);
  QVERIFY(dashboard->tokenView()->visibleRegion().boundingRect().height() >= 40);
  dashboard->tabs()->setCurrentIndex(0);
  // Compare: the figure at a readable size (its controls, the table under it), the run list beside it.
  tabs->showPage(window.compareView());
  QTest::qWait(50);
  auto* figure = window.compareView()->findChild<QWidget*>(QStringLiteral("compareFigureView"));
  QVERIFY(figure);
  QVERIFY2(figure->width() >= 400 && figure->height() >= 200, qPrintable(sizeText(figure->size())));
  QVERIFY(wholeOnScreen(window.compareView()->runList()));
  // Inspector: its Run button on screen.
  tabs->showPage(window.inspector());
  QTest::qWait(50);
  QVERIFY(wholeOnScreen(window.inspector()->findChild<QPushButton*>(QStringLiteral("inspectorRunButton"))));

  // Runs browser: the columns that tell runs apart, whole.
  const QTableView* table = window.runsPanel()->view();
  for (const int c : {RunsTableModel::NameColumn, RunsTableModel::ArchColumn, RunsTableModel::SeedColumn,
                      RunsTableModel::StatusColumn, RunsTableModel::StepsColumn, RunsTableModel::BestValLossColumn})
    QVERIFY2(columnOnScreen(table, c, c == RunsTableModel::NameColumn ? 90 : 30),
             qPrintable(QStringLiteral("column %1 at %2, width %3 of %4")
                            .arg(c).arg(table->columnViewportPosition(c)).arg(table->columnWidth(c))
                            .arg(table->viewport()->width())));
  QVERIFY(table->height() >= 200);
  // Designer: raised, at least 8 rows of its forms whole on screen.
  auto* designerDock = window.findChild<QDockWidget*>(QStringLiteral("designerDock"));
  QVERIFY(designerDock);
  designerDock->raise();
  QTest::qWait(50);
  QVERIFY2(visibleFormRows(window.designer()) >= 8, qPrintable(QString::number(visibleFormRows(window.designer()))));

  // View > Close tab (Ctrl+W): the current dashboard goes, the overview stays.
  auto* closeTab = window.findChild<QAction*>(QStringLiteral("closeTabAction"));
  QVERIFY(closeTab);
  tabs->showPage(dashboard);
  closeTab->trigger();
  QCOMPARE(tabs->dashboardCount(), 0);
  tabs->showPage(window.lossPlot());
  closeTab->trigger();
  QCOMPARE(tabs->tabOf(window.lossPlot()), 0);
}

void TestGuiLayout::resetLayoutBringsBackTheDocks() {
  const auto shown = openWindow(QSize(1280, 720));
  MainWindow& window = *shown;
  QVERIFY(QTest::qWaitForWindowExposed(&window));
  auto* runsDock = window.findChild<QDockWidget*>(QStringLiteral("runsDock"));
  auto* logDock = window.findChild<QDockWidget*>(QStringLiteral("logDock"));
  QVERIFY(runsDock && logDock);
  runsDock->setFloating(true);
  logDock->hide();
  auto* reset = window.findChild<QAction*>(QStringLiteral("resetLayoutAction"));
  QVERIFY(reset);
  reset->trigger();
  QTest::qWait(50);
  QVERIFY(!runsDock->isFloating());
  QVERIFY(runsDock->isVisible());
  QVERIFY(logDock->isVisible());
  QCOMPARE(window.dockWidgetArea(runsDock), Qt::LeftDockWidgetArea);
  QCOMPARE(window.dockWidgetArea(logDock), Qt::BottomDockWidgetArea);
  QVERIFY(runsDock->width() >= 360);
}

void TestGuiLayout::selectedRunsOverlayInTheOverview() {
  const auto shown = openWindow(QSize(1280, 720));
  MainWindow& window = *shown;
  QVERIFY(QTest::qWaitForWindowExposed(&window));
  QTRY_COMPARE_WITH_TIMEOUT(window.runsPanel()->model()->rowCount(), 3, kLoadTimeoutMs);
  routelab::LossPlotWidget* overview = window.lossPlot();
  QCustomPlot* plot = overview->plot();
  QTableView* table = window.runsPanel()->view();
  QItemSelectionModel* selection = table->selectionModel();

  // One run: its own curves, a legend row above the axes, whole markers at both ends.
  selection->setCurrentIndex(rowOf(table, dense_), QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  QTRY_COMPARE_WITH_TIMEOUT(overview->pointCount(routelab::LossPlotWidget::Series::Validation), 4, kLoadTimeoutMs);
  QCOMPARE(overview->overlayCount(), 0);
  plot->replot();
  QVERIFY(!plot->legend->outerRect().intersects(plot->axisRect()->rect()));
  QVERIFY(plot->xAxis->range().lower < 0);
  QVERIFY(plot->xAxis->range().upper > 400);

  // Ctrl+click two more: drawn over it, one legend entry and colour per run, their stored values.
  for (const qint64 id : {dtr_, mod_}) selection->select(rowOf(table, id), QItemSelectionModel::Select | QItemSelectionModel::Rows);
  QTRY_COMPARE_WITH_TIMEOUT(overview->overlayCount(), 2, kLoadTimeoutMs);
  QCOMPARE(plot->legend->itemCount(), 3);
  QVERIFY2(overview->title().contains(QStringLiteral("+ 2 more")), qPrintable(overview->title()));
  QCPGraph* dtr = graphNamed(plot, QStringLiteral("run %1 · dtrnet-bilayer-with-a-long-name-s2").arg(dtr_));
  QCPGraph* mod = graphNamed(plot, QStringLiteral("run %1 · mod-c0.125-s1").arg(mod_));
  QVERIFY(dtr && mod);
  QVERIFY(dtr->pen().color() != mod->pen().color());
  QCOMPARE(dtr->data()->size(), 4);
  QCOMPARE(mod->data()->size(), 4);
  // Its validation points (off the legend, named for the hover readout) in its colour: 1.8 at step 400.
  const QCPGraph* modValidation = nullptr;
  for (int i = 0; i < plot->graphCount(); ++i)
    if (plot->graph(i)->name() == QStringLiteral("run %1 · mod-c0.125-s1 · validation").arg(mod_)) modValidation = plot->graph(i);
  QVERIFY(modValidation);
  QCOMPARE(modValidation->pen().color(), mod->pen().color());
  QCOMPARE(modValidation->data()->size(), 4);
  QCOMPARE((modValidation->data()->constEnd() - 1)->key, 400.0);
  QCOMPARE((modValidation->data()->constEnd() - 1)->value, 1.8);
  QVERIFY(plot->yAxis->range().contains(3.5));  // mod's first training loss (3.4 + 0.1) is in view
  plot->replot();
  QVERIFY(!plot->legend->outerRect().intersects(plot->axisRect()->rect()));

  // Back to one run: the overlays go, the title names the run drawn.
  selection->setCurrentIndex(rowOf(table, mod_), QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  QTRY_COMPARE_WITH_TIMEOUT(overview->overlayCount(), 0, kLoadTimeoutMs);
  QTRY_VERIFY_WITH_TIMEOUT(overview->title().startsWith(QStringLiteral("run %1").arg(mod_)), kLoadTimeoutMs);
  QCOMPARE(plot->legend->itemCount(), 3);  // train (raw), train (smoothed), validation
}

}  // namespace test_gui_layout

ROUTELAB_TEST_SUITE(test_gui_layout, TestGuiLayout)
#include "test_gui_layout.moc"
