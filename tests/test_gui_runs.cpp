// GUI suite for the runs browser and the run queue (offscreen, a temporary store per test, preset "tiny" with a
// few steps): filtering, rename/tags/note/archive round trips, delete with files, resume, clone into the
// designer, a queue of three runs two at a time, persistence of pending items, a queued sweep, and a data-parallel
// run of two processes (the GUI trains rank 0, routelab-cli rank 1).
#include <QCheckBox>
#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLineEdit>
#include <QSignalSpy>
#include <QTableView>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/config/experiment_config.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "core/util/paths.h"
#include "ui/experiment_designer.h"
#include "ui/main_window.h"
#include "ui/run_controller.h"
#include "ui/run_queue.h"
#include "ui/runs_panel.h"
#include "ui/runs_query.h"
#include "ui/runs_table_model.h"
#include "ui/store_service.h"
#include "tests/suite.h"

namespace test_gui_runs {

using routelab::MainWindow;
using routelab::RunQueue;
using routelab::RunStore;

namespace {

constexpr int kRunTimeoutMs = 120000;

/// Stops a tiny run once it has done `stop_at` steps (so it ends `stopped` with a checkpoint).
class StopAt final : public routelab::TrainObserver {
 public:
  StopAt(std::int64_t stop_at, std::atomic<bool>& cancel) : stop_at_(stop_at), cancel_(cancel) {}
  void on_step(const routelab::StepMetrics& m) override {
    if (m.step >= stop_at_) cancel_.store(true);
  }

 private:
  std::int64_t stop_at_;
  std::atomic<bool>& cancel_;
};

}  // namespace

class TestGuiRuns : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase();
  void init();
  void cleanup();

  void filterBoxNarrowsRows();
  void configColumnsGroupRunsByAnyKey();
  void searchComparesRunValues();
  void tabLeavesTheRunsTable();
  void editsRoundTripThroughTheStore();
  void deleteRemovesRowsAndCheckpoints();
  void resumeContinuesAStoppedRunAndCloneFillsTheDesigner();
  void queueRunsThreeTwoAtATime();
  void pendingItemsSurviveARestart();
  void malformedQueueItemFailsAndTheQueueGoesOn();
  void queuedSweepExpandsIntoItsPoints();
  void queueRunsADataParallelRun();
  void routingQuickstartQueuesDtrnetBesideDense();

 private:
  std::unique_ptr<MainWindow> makeWindow();
  std::int64_t seedRun(RunStore& store, const std::string& name, const std::string& arch,
                       routelab::RunStatus status, std::int64_t seed = 1337);
  qint64 stoppedTinyRun(std::int64_t stopAt);

  QTemporaryDir home_;
  std::unique_ptr<QTemporaryDir> dir_;  ///< one folder per test: checkpoints sit beside their store
  QString dbPath_;
};

void TestGuiRuns::initTestCase() {
  QVERIFY(home_.isValid());
  QStandardPaths::setTestModeEnabled(true);
  QCoreApplication::setOrganizationName(QStringLiteral("RouteLabTest"));
  QCoreApplication::setApplicationName(QStringLiteral("test_gui_runs"));
  qputenv("ROUTELAB_HOME", home_.path().toUtf8());
  qputenv("XDG_CONFIG_HOME", home_.filePath(QStringLiteral("config")).toUtf8());
  qputenv("ROUTELAB_NO_CONFIRM", "1");
}

void TestGuiRuns::init() {
  dir_ = std::make_unique<QTemporaryDir>(home_.filePath(QStringLiteral("store-XXXXXX")));
  QVERIFY(dir_->isValid());
  dbPath_ = dir_->filePath(QStringLiteral("runs.sqlite"));
}

void TestGuiRuns::cleanup() { dir_.reset(); }

std::unique_ptr<MainWindow> TestGuiRuns::makeWindow() {
  routelab::MainWindowOptions options;
  options.dbPath = dbPath_;
  options.confirmClose = false;
  auto window = std::make_unique<MainWindow>(options);
  window->show();
  return window;
}

std::int64_t TestGuiRuns::seedRun(RunStore& store, const std::string& name, const std::string& arch,
                                  routelab::RunStatus status, std::int64_t seed) {
  routelab::NewRun run;
  run.name = name;
  run.seed = seed;
  run.arch = arch;
  run.preset = "tiny";
  run.total_steps = 30;
  const std::int64_t id = store.create_run(run);
  store.insert_metrics(id, {{"train/loss", 10, 1.0, 3.5}});
  if (status != routelab::RunStatus::Running) store.set_status(id, status);
  return id;
}

qint64 TestGuiRuns::stoppedTinyRun(std::int64_t stopAt) {
  std::atomic<bool> cancel{false};
  StopAt observer(stopAt, cancel);
  routelab::TrainRequest request;
  request.config = routelab::preset_config("tiny", {"run.threads=1"});
  request.db_path = dbPath_.toStdString();
  const routelab::TrainOutcome outcome = routelab::train(request, &observer, &cancel);
  if (outcome.status != routelab::RunStatus::Stopped) return 0;
  return outcome.run_id;
}

void TestGuiRuns::filterBoxNarrowsRows() {
  {
    RunStore store(dbPath_.toStdString());
    seedRun(store, "alpha-run", "dense", routelab::RunStatus::Finished);
    const auto beta = seedRun(store, "beta-run", "dtrnet", routelab::RunStatus::Stopped);
    seedRun(store, "gamma-run", "mod", routelab::RunStatus::Failed, 42);
    routelab::RunPatch patch;
    patch.notes = "the interesting one";
    store.patch_run(beta, patch);
  }
  auto window = makeWindow();
  routelab::RunsPanel* panel = window->runsPanel();
  QTRY_COMPARE_WITH_TIMEOUT(panel->proxy()->rowCount(), 3, 10000);
  panel->searchBox()->setText(QStringLiteral("dtrnet"));
  QCOMPARE(panel->proxy()->rowCount(), 1);
  panel->searchBox()->setText(QStringLiteral("INTERESTING"));  // notes, case-insensitive
  QCOMPARE(panel->proxy()->rowCount(), 1);
  panel->searchBox()->setText(QStringLiteral("run failed"));    // every word must match
  QCOMPARE(panel->proxy()->rowCount(), 1);
  QCOMPARE(panel->proxy()->index(0, routelab::RunsTableModel::NameColumn).data().toString(),
           QStringLiteral("gamma-run"));
  panel->searchBox()->setText(QStringLiteral("seed 42"));  // the seed column, searchable
  QCOMPARE(panel->proxy()->rowCount(), 1);
  QCOMPARE(panel->proxy()->index(0, routelab::RunsTableModel::SeedColumn).data().toLongLong(), 42LL);
  QCOMPARE(panel->proxy()->headerData(routelab::RunsTableModel::SeedColumn, Qt::Horizontal).toString(),
           QStringLiteral("Seed"));
  panel->searchBox()->setText(QStringLiteral("nothing-matches"));
  QCOMPARE(panel->proxy()->rowCount(), 0);
  panel->searchBox()->clear();
  QCOMPARE(panel->proxy()->rowCount(), 3);
  // Sorting by a column sorts by value.
  panel->view()->sortByColumn(routelab::RunsTableModel::NameColumn, Qt::AscendingOrder);
  QCOMPARE(panel->proxy()->index(0, routelab::RunsTableModel::NameColumn).data().toString(),
           QStringLiteral("alpha-run"));
}

void TestGuiRuns::configColumnsGroupRunsByAnyKey() {
  {
    RunStore store(dbPath_.toStdString());
    const std::vector<std::pair<double, double>> settings = {{0.002, 0.5}, {0.003, 0.7}, {0.002, 0.7}};
    for (std::size_t i = 0; i < settings.size(); ++i) {
      routelab::NewRun run;
      run.name = "run-" + std::to_string(i);
      run.arch = "mod";
      run.config_json = nlohmann::json{{"train", {{"lr", settings[i].first}}},
                                       {"model", {{"capacity", settings[i].second}, {"arch", "mod"}}}}
                            .dump();
      store.create_run(run);
    }
  }
  using routelab::RunsTableModel;
  {
    auto window = makeWindow();
    routelab::RunsPanel* panel = window->runsPanel();
    QTRY_COMPARE_WITH_TIMEOUT(panel->proxy()->rowCount(), 3, 10000);
    panel->configColumnsBox()->setText(QStringLiteral("train.lr, model.capacity model.missing"));
    const int lr = RunsTableModel::ColumnCount, capacity = lr + 1, missing = lr + 2;
    QCOMPARE(panel->proxy()->columnCount(), RunsTableModel::ColumnCount + 3);
    QCOMPARE(panel->proxy()->headerData(lr, Qt::Horizontal).toString(), QStringLiteral("train.lr"));
    QCOMPARE(panel->proxy()->headerData(capacity, Qt::Horizontal).toString(), QStringLiteral("model.capacity"));
    // Sorting by a config column groups the runs by its value (numbers by value), the name breaking no ties here.
    panel->view()->sortByColumn(lr, Qt::DescendingOrder);
    QCOMPARE(panel->proxy()->index(0, lr).data().toString(), QStringLiteral("0.003"));
    QCOMPARE(panel->proxy()->index(1, lr).data().toString(), QStringLiteral("0.002"));
    QCOMPARE(panel->proxy()->index(2, lr).data().toString(), QStringLiteral("0.002"));
    QCOMPARE(panel->proxy()->index(0, missing).data().toString(), QString());  // a key no run has: empty cells
    // The search box matches a config column's "key=value".
    panel->searchBox()->setText(QStringLiteral("lr=0.002 capacity=0.7"));
    QCOMPARE(panel->proxy()->rowCount(), 1);
    QCOMPARE(panel->proxy()->index(0, RunsTableModel::NameColumn).data().toString(), QStringLiteral("run-2"));
    // Comparisons of any config key (by its last part or its path) and of the run's fields, numbers by value.
    const auto rows = [&](const char* text) {
      panel->searchBox()->setText(QString::fromUtf8(text));
      QStringList names;
      for (int r = 0; r < panel->proxy()->rowCount(); ++r)
        names << panel->proxy()->index(r, RunsTableModel::NameColumn).data().toString();
      names.sort();
      return names.join(QLatin1Char(','));
    };
    QCOMPARE(rows("lr<0.0025"), QStringLiteral("run-0,run-2"));
    QCOMPARE(rows("capacity>=0.6 train.lr>0.0025"), QStringLiteral("run-1"));
    QCOMPARE(rows("capacity=0.70"), QStringLiteral("run-1,run-2"));  // by value, not as text
    QCOMPARE(rows("model.capacity!=0.7"), QStringLiteral("run-0"));
    QCOMPARE(rows("arch=MOD steps>=0"), QStringLiteral("run-0,run-1,run-2"));
    QCOMPARE(rows("best<10"), QString());  // no validation loss yet: meets nothing
    QCOMPARE(rows("nokey=1"), QString());  // names nothing: a plain word, found nowhere
    panel->searchBox()->clear();
  }
  // The columns come back at the next start.
  auto window = makeWindow();
  QCOMPARE(window->runsPanel()->configColumnsBox()->text(), QStringLiteral("train.lr, model.capacity model.missing"));
  QTRY_COMPARE_WITH_TIMEOUT(window->runsPanel()->proxy()->columnCount(), RunsTableModel::ColumnCount + 3, 10000);
  window->runsPanel()->configColumnsBox()->clear();
}

void TestGuiRuns::searchComparesRunValues() {
  // RunSearch alone (RunQuery over a RunSummary): a dense run has no capacity (a comparison of it fails), losses
  // compare by value, a missing loss meets nothing, text compares without case and without order, and a key naming
  // nothing is a plain word.
  routelab::RunSummary dense, mod;
  dense.arch = QStringLiteral("dense");
  dense.bestValLoss = 2.3;
  dense.config = {{QStringLiteral("train.lr"), 0.003}, {QStringLiteral("train.min_lr"), 0.0003}};
  mod.arch = QStringLiteral("mod");
  mod.config = {{QStringLiteral("train.lr"), 0.003},
                {QStringLiteral("model.capacity"), 0.5},
                {QStringLiteral("train.tf32"), true}};
  const auto match = [](const char* text, const routelab::RunSummary& run, const QString& search = {}) {
    return routelab::RunSearch(QString::fromUtf8(text)).matches(run, search);
  };
  QVERIFY(match("lr=0.003", dense) && match("lr=0.003", mod));  // train.lr, not train.min_lr
  QVERIFY(!match("lr<0.001", dense));
  QVERIFY(match("min_lr<0.001", dense));
  QVERIFY(match("capacity>=0.5", mod) && !match("capacity>=0.5", dense));
  QVERIFY(match("best<2.4", dense) && !match("best<2.2", dense) && !match("best<2.4", mod));
  QVERIFY(match("arch=Dense", dense) && match("arch!=dense", mod) && !match("arch<e", dense));
  QVERIFY(match("tf32=true", mod));
  QVERIFY(match("x=y", dense, QStringLiteral("notes: x=y")) && !match("x=y", dense, QStringLiteral("notes")));
  QVERIFY(match("dense lr>0.001", dense, QStringLiteral("dense")) &&
          !match("mod lr>0.001", dense, QStringLiteral("dense")));
  QCOMPARE(routelab::RunSearch(QStringLiteral("  a   lr<1 ")).text(), QStringLiteral("a lr<1"));
  // or (looser than side by side), negation, parentheses; an operator with no operand, a missing or a stray ")".
  QVERIFY(match("arch=mod or arch=dense", dense) && match("arch=mod OR arch=dense", mod));
  QVERIFY(!match("arch=mod | capacity>=0.5", dense));
  QVERIFY(match("arch=mod lr=0.1 or best<2.4", dense) && !match("arch=mod (lr=0.1 or best<2.4)", mod));
  QVERIFY(match("arch=dense (lr<0.001 or best<2.4)", dense) && !match("arch=dense (lr<0.001 or best<2.2)", dense));
  QVERIFY(match("-tf32=true", dense) && !match("-tf32=true", mod) && match("not arch=mod", dense));
  QVERIFY(!match("not (arch=mod or arch=dense)", mod) && match("-x", dense, QStringLiteral("y")));
  QVERIFY(match("(arch=dense", dense) && match("arch=dense)", dense) && !match("arch=dense) arch=mod", dense));
  QVERIFY(match("or", mod) && match("arch=mod or", mod) && !match("arch=mod or", dense) &&
          match("not", dense, QStringLiteral("not")));
  for (const auto& field : routelab::RunQuery::fields())  // every field of the language is one the GUI reads
    QVERIFY2(!routelab::RunSearch::values(dense, QString::fromStdString(field)).isEmpty(), field.c_str());
  mod.tags = QStringLiteral("sweep:a,best");  // each tag a value of tags; != where none is it
  QVERIFY(match("tags=best", mod) && !match("tags=sweep", mod) && !match("tags!=best", mod) &&
          match("tags!=best", dense));
}

void TestGuiRuns::tabLeavesTheRunsTable() {
  // Tab moves the keyboard focus on to the next widget; the arrow keys move between rows.
  {
    RunStore store(dbPath_.toStdString());
    seedRun(store, "first", "dense", routelab::RunStatus::Finished);
    seedRun(store, "second", "mod", routelab::RunStatus::Finished);
  }
  auto window = makeWindow();
  routelab::RunsPanel* panel = window->runsPanel();
  QTRY_COMPARE_WITH_TIMEOUT(panel->proxy()->rowCount(), 2, 10000);
  window->activateWindow();
  if (!QTest::qWaitForWindowActive(window.get())) QSKIP("this platform does not activate windows");
  QTableView* view = panel->view();
  view->setFocus(Qt::OtherFocusReason);
  QTRY_VERIFY(view->hasFocus());
  view->setCurrentIndex(panel->proxy()->index(0, routelab::RunsTableModel::NameColumn));
  QTest::keyClick(view, Qt::Key_Down);
  QCOMPARE(view->currentIndex().row(), 1);
  QTest::keyClick(view, Qt::Key_Tab);
  QTRY_VERIFY(!view->hasFocus());
  QCOMPARE(view->currentIndex().row(), 1);  // the selection stayed where it was
}

void TestGuiRuns::editsRoundTripThroughTheStore() {
  std::int64_t a = 0, b = 0;
  {
    RunStore store(dbPath_.toStdString());
    a = seedRun(store, "first", "dense", routelab::RunStatus::Finished);
    b = seedRun(store, "second", "dense", routelab::RunStatus::Finished);
  }
  auto window = makeWindow();
  routelab::RunsPanel* panel = window->runsPanel();
  QTRY_COMPARE_WITH_TIMEOUT(panel->proxy()->rowCount(), 2, 10000);
  RunStore store(dbPath_.toStdString(), false);
  panel->view()->selectAll();  // "Copy ids" (Ctrl+C in the table): the selected runs' ids for --runs, in id order
  QGuiApplication::clipboard()->clear();
  QVERIFY(QTest::qWaitForWindowActive(window.get()));
  panel->view()->setFocus();
  QTest::keySequence(panel->view(), QKeySequence::Copy);
  QCOMPARE(QGuiApplication::clipboard()->text(), QStringLiteral("%1,%2").arg(a).arg(b));

  panel->renameRun(a, QStringLiteral("renamed"));
  QTRY_COMPARE_WITH_TIMEOUT(QString::fromStdString(store.run(a)->name), QStringLiteral("renamed"), 10000);
  panel->setTags({a, b}, QStringLiteral(" x, y,,x "));
  QTRY_COMPARE_WITH_TIMEOUT(QString::fromStdString(store.run(b)->tags), QStringLiteral("x,y"), 10000);
  QCOMPARE(QString::fromStdString(store.run(a)->tags), QStringLiteral("x,y"));
  panel->setNote({b}, QStringLiteral("a note"));
  QTRY_COMPARE_WITH_TIMEOUT(QString::fromStdString(store.run(b)->notes), QStringLiteral("a note"), 10000);
  // The table refreshes after each edit.
  QTRY_COMPARE_WITH_TIMEOUT(panel->model()->index(panel->model()->rowOf(a), routelab::RunsTableModel::NameColumn)
                                .data()
                                .toString(),
                            QStringLiteral("renamed"), 10000);
  QTRY_COMPARE_WITH_TIMEOUT(
      panel->model()->index(panel->model()->rowOf(a), routelab::RunsTableModel::TagsColumn).data().toString(),
      QStringLiteral("x,y"), 10000);

  panel->setArchived({a}, true);
  QTRY_VERIFY_WITH_TIMEOUT(store.run(a)->archived, 10000);
  QTRY_COMPARE_WITH_TIMEOUT(panel->proxy()->rowCount(), 1, 10000);  // archived runs are hidden...
  panel->showArchivedBox()->setChecked(true);
  QCOMPARE(panel->proxy()->rowCount(), 2);  // ...unless asked for
  panel->setArchived({a}, false);
  QTRY_VERIFY_WITH_TIMEOUT(!store.run(a)->archived, 10000);
}

void TestGuiRuns::deleteRemovesRowsAndCheckpoints() {
  std::int64_t done = 0, live = 0;
  {
    RunStore store(dbPath_.toStdString());
    done = seedRun(store, "done", "dense", routelab::RunStatus::Finished);
    live = seedRun(store, "live", "dense", routelab::RunStatus::Running);  // fresh heartbeat: running
  }
  const auto writeFile = [](const QString& path) {
    QVERIFY(QDir().mkpath(QFileInfo(path).path()));
    QFile file(path);
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write("weights");
  };
  const QString ckptDir = QString::fromStdString(routelab::checkpoint_dir(dbPath_.toStdString(), done));
  writeFile(QDir(ckptDir).filePath(QStringLiteral("step-10.pt")));
  // A checkpoint in the shared folder of older versions, listed by the store: removed with the run...
  const QString legacyDir = dir_->filePath(QStringLiteral("checkpoints/run-%1").arg(done));
  const QString legacyFile = QDir(legacyDir).filePath(QStringLiteral("step-20.pt"));
  writeFile(legacyFile);
  {
    RunStore store(dbPath_.toStdString());
    store.insert_checkpoint(done, {20, legacyFile.toStdString(), 7, 0.0, std::nullopt});
  }
  // ...while another store in the same folder, whose run has the same id, keeps its files.
  const QString otherFile = QDir(QString::fromStdString(routelab::checkpoint_dir(
                                     dir_->filePath(QStringLiteral("other.sqlite")).toStdString(), done)))
                                .filePath(QStringLiteral("step-10.pt"));
  writeFile(otherFile);
  const QString otherLegacy = QDir(legacyDir).filePath(QStringLiteral("step-30.pt"));
  writeFile(otherLegacy);

  auto window = makeWindow();
  routelab::RunsPanel* panel = window->runsPanel();
  QTRY_COMPARE_WITH_TIMEOUT(panel->proxy()->rowCount(), 2, 10000);
  const QString refusal = panel->deleteRuns({done, live});
  QVERIFY2(refusal.contains(QStringLiteral("running")), qPrintable(refusal));
  QSignalSpy edited(panel, &routelab::RunsPanel::editFinished);
  QVERIFY(panel->deleteRuns({done}).isEmpty());
  QTRY_COMPARE_WITH_TIMEOUT(edited.count(), 1, 10000);
  QVERIFY2(edited.first().first().toString().isEmpty(), qPrintable(edited.first().first().toString()));
  RunStore store(dbPath_.toStdString(), false);
  QVERIFY(!store.run(done).has_value());
  QVERIFY(store.run(live).has_value());
  QVERIFY(!QFileInfo::exists(ckptDir));
  QVERIFY(!QFileInfo::exists(legacyFile));
  QVERIFY(QFileInfo::exists(otherFile));
  QVERIFY(QFileInfo::exists(otherLegacy));
  QTRY_COMPARE_WITH_TIMEOUT(panel->model()->rowCount(), 1, 10000);
}

void TestGuiRuns::resumeContinuesAStoppedRunAndCloneFillsTheDesigner() {
  const qint64 runId = stoppedTinyRun(8);
  QVERIFY(runId > 0);
  auto window = makeWindow();
  routelab::RunsPanel* panel = window->runsPanel();
  QTRY_COMPARE_WITH_TIMEOUT(panel->model()->rowCount(), 1, 10000);
  const routelab::RunSummary* summary = panel->model()->run(runId);
  QVERIFY(summary);
  QCOMPARE(summary->status, QStringLiteral("stopped"));
  QVERIFY(summary->checkpointStep > 0);
  QVERIFY(panel->canResume(*summary));

  QSignalSpy finished(window->runQueue(), &RunQueue::runFinished);
  QCOMPARE(panel->resumeRuns({runId}), 1);
  QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, kRunTimeoutMs);
  RunStore store(dbPath_.toStdString(), false);
  const auto record = store.run(runId);
  QCOMPARE(record->status, routelab::RunStatus::Finished);
  QCOMPARE(record->last_step, record->total_steps);  // the same run went on to its 30 steps
  QCOMPARE(record->total_steps, std::int64_t{30});
  QVERIFY(record->resumed_from_step.has_value());
  QCOMPARE(window->runQueue()->entries().size(), 1);
  QCOMPARE(window->runQueue()->entries().first().state, QStringLiteral("done"));

  // Clone: the designer takes the run's architecture and values.
  routelab::ExperimentDesigner* designer = window->designer();
  QVERIFY(designer->setArchitecture(QStringLiteral("mod")));
  panel->cloneRun(runId);
  QTRY_COMPARE_WITH_TIMEOUT(designer->architecture(), QStringLiteral("dense"), 10000);
  const nlohmann::json overrides = nlohmann::json::parse(designer->overridesJson().toStdString());
  QCOMPARE(overrides["model"]["n_layer"].get<int>(), 2);
  QCOMPARE(overrides["model"]["n_embd"].get<int>(), 64);
  QCOMPARE(overrides["data"]["context"].get<int>(), 64);
  QVERIFY2(designer->isValid(), qPrintable(designer->formError()));
}

void TestGuiRuns::queueRunsThreeTwoAtATime() {
  if (RunQueue::maxParallel() < 2) QSKIP("needs at least two cores for two runs side by side");
  auto window = makeWindow();
  RunQueue* queue = window->runQueue();
  QTRY_VERIFY_WITH_TIMEOUT(queue->isLoaded(), 10000);
  queue->setParallel(2);
  QCOMPARE(queue->threadsPerRun(), std::max(1, RunQueue::maxParallel() / 2));
  int mostAtOnce = 0;
  connect(queue, &RunQueue::progressReceived, this,
          [&](qint64, const routelab::ProgressBatch&) { mostAtOnce = std::max(mostAtOnce, queue->runningCount()); });
  for (int i = 0; i < 3; ++i) {
    routelab::RunRequest request;
    request.preset = QStringLiteral("tiny");
    request.stepsOverride = 10;
    request.name = QStringLiteral("queued-%1").arg(i);
    queue->submit(request);
  }
  QCOMPARE(queue->runningCount(), 2);
  QCOMPARE(queue->entries().at(2).state, QStringLiteral("pending"));
  QTRY_VERIFY_WITH_TIMEOUT(std::all_of(queue->entries().begin(), queue->entries().end(),
                                       [](const routelab::QueueEntry& e) { return e.state == "done"; }),
                           3 * kRunTimeoutMs);
  QCOMPARE(mostAtOnce, 2);
  RunStore store(dbPath_.toStdString(), false);
  const auto runs = store.list_runs();
  QCOMPARE(runs.size(), std::size_t{3});
  for (const auto& run : runs) {
    QCOMPARE(run.status, routelab::RunStatus::Finished);
    QCOMPARE(run.last_step, std::int64_t{10});
    // Side by side, each run got its share of the cores.
    QCOMPARE(nlohmann::json::parse(run.config_json)["run"]["threads"].get<int>(), queue->threadsPerRun());
  }
  // The store's copy of the queue says the same.
  const auto allItemsDone = [&store] {
    const auto items = store.queue_items();
    return std::all_of(items.begin(), items.end(),
                       [](const routelab::QueueItem& q) { return q.state == routelab::QueueState::Done; });
  };
  QTRY_VERIFY_WITH_TIMEOUT(allItemsDone(), 10000);
  queue->clearFinished();
  QVERIFY(queue->entries().isEmpty());
  QTRY_VERIFY_WITH_TIMEOUT(store.queue_items().empty(), 10000);
}

void TestGuiRuns::pendingItemsSurviveARestart() {
  std::int64_t crashedItem = 0;
  {
    RunStore store(dbPath_.toStdString());
    crashedItem = store.enqueue(R"({"preset":"tiny"})", routelab::QueueState::Running);  // a crash left it running
  }
  qint64 liveRunId = 0;
  {
    auto window = makeWindow();
    RunQueue* queue = window->runQueue();
    QTRY_VERIFY_WITH_TIMEOUT(queue->isLoaded(), 10000);
    QCOMPARE(queue->entries().size(), 1);
    QCOMPARE(queue->entries().first().state, QStringLiteral("failed"));
    QVERIFY(queue->entries().first().message.contains(QStringLiteral("interrupted")));
    routelab::RunRequest longRun;
    longRun.preset = QStringLiteral("tiny");
    longRun.stepsOverride = 100000;
    queue->submit(longRun);
    routelab::RunRequest waiting;
    waiting.preset = QStringLiteral("tiny");
    waiting.name = QStringLiteral("waiting");
    queue->submit(waiting);
    QCOMPARE(queue->entries().at(1).state, QStringLiteral("running"));
    QCOMPARE(queue->entries().at(2).state, QStringLiteral("pending"));
    QTRY_VERIFY_WITH_TIMEOUT((liveRunId = window->runController()->currentRunId()) > 0, kRunTimeoutMs);
    // Destroying the window stops the live run; its item becomes a pending resume of it.
  }
  {
    RunStore store(dbPath_.toStdString(), false);
    const auto items = store.queue_items();
    QCOMPARE(items.size(), std::size_t{3});
    QCOMPARE(items[0].id, crashedItem);
    QCOMPARE(items[1].state, routelab::QueueState::Pending);
    QCOMPARE(nlohmann::json::parse(items[1].request_json)["resume"].get<qint64>(), liveRunId);
    QCOMPARE(items[2].state, routelab::QueueState::Pending);
    QCOMPARE(nlohmann::json::parse(items[2].request_json)["name"].get<std::string>(), std::string("waiting"));
    QCOMPARE(store.run(liveRunId)->status, routelab::RunStatus::Stopped);
  }
  auto window = makeWindow();
  RunQueue* queue = window->runQueue();
  queue->stopAll();  // hold before the stored queue arrives: nothing starts
  QTRY_VERIFY_WITH_TIMEOUT(queue->isLoaded(), 10000);
  QCOMPARE(queue->entries().size(), 3);
  QCOMPARE(queue->entries().at(1).state, QStringLiteral("pending"));
  QCOMPARE(RunQueue::requestFromJson(queue->entries().at(1).requestJson).resumeRunId, liveRunId);
  QCOMPARE(RunQueue::requestFromJson(queue->entries().at(2).requestJson).name, QStringLiteral("waiting"));
  QVERIFY(!queue->isRunning());
  // Reordering and removing persist too.
  queue->move(queue->entries().at(2).key, -1);
  queue->remove({queue->entries().at(0).key});
  RunStore store(dbPath_.toStdString(), false);
  QTRY_COMPARE_WITH_TIMEOUT(store.queue_items().size(), std::size_t{2}, 10000);
  QTRY_COMPARE_WITH_TIMEOUT(nlohmann::json::parse(store.queue_items()[0].request_json).value("name", std::string()),
                            std::string("waiting"), 10000);
}

void TestGuiRuns::malformedQueueItemFailsAndTheQueueGoesOn() {
  {
    RunStore store(dbPath_.toStdString());
    store.enqueue(R"({"preset":"tiny","sets":["train.lr=1e-3", 2]})");  // hand-edited: a number among the overrides
    store.enqueue(R"({"preset":"tiny","steps":10,"name":"after"})");
  }
  auto window = makeWindow();
  RunQueue* queue = window->runQueue();
  QTRY_VERIFY_WITH_TIMEOUT(queue->isLoaded(), 10000);
  QTRY_COMPARE_WITH_TIMEOUT(queue->entries().at(1).state, QStringLiteral("done"), kRunTimeoutMs);
  QCOMPARE(queue->entries().at(0).state, QStringLiteral("failed"));
  QVERIFY2(queue->entries().at(0).message.startsWith(
               QStringLiteral("queue item %1: sets[1]: expected a string").arg(queue->entries().at(0).key)),
           qPrintable(queue->entries().at(0).message));
  QVERIFY(RunQueue::describe(queue->entries().at(0).requestJson).startsWith(QStringLiteral("unreadable")));
}

void TestGuiRuns::queuedSweepExpandsIntoItsPoints() {
  const QString sweepPath = dir_->filePath(QStringLiteral("tiny-seeds.json"));
  QFile sweep(sweepPath);
  QVERIFY(sweep.open(QIODevice::WriteOnly));
  sweep.write(R"({"name": "tiny-seeds", "base": "tiny",
                  "train": {"steps": 4, "eval_every": 2, "log_every": 1, "checkpoint_every": 4, "warmup_steps": 1},
                  "grid": {"run.seed": [1, 2]}})");
  sweep.close();

  routelab::StoreService service(dbPath_);
  RunQueue queue(&service);
  QString error;
  QCOMPARE(queue.submitSweep(dir_->filePath(QStringLiteral("missing.json")), &error), -1);
  QVERIFY(error.contains(QStringLiteral("missing.json")));
  QCOMPARE(queue.submitSweep(sweepPath, &error), 2);
  QCOMPARE(queue.entries().size(), 2);
  QVERIFY(RunQueue::describe(queue.entries().at(0).requestJson).contains(QStringLiteral("tiny-seeds")));
  QTRY_VERIFY_WITH_TIMEOUT(std::all_of(queue.entries().begin(), queue.entries().end(),
                                       [](const routelab::QueueEntry& e) { return e.state == "done"; }),
                           2 * kRunTimeoutMs);
  RunStore store(dbPath_.toStdString(), false);
  const auto allTagged = [&store] {
    const auto runs = store.list_runs();
    return std::all_of(runs.begin(), runs.end(),
                       [](const routelab::RunRecord& r) { return r.tags == "sweep:tiny-seeds"; });
  };
  QTRY_VERIFY_WITH_TIMEOUT(allTagged(), 10000);
  const auto runs = store.list_runs();
  QCOMPARE(runs.size(), std::size_t{2});
  QList<qint64> seeds;
  for (const auto& run : runs) {
    QCOMPARE(run.last_step, std::int64_t{4});
    seeds << run.seed;
  }
  std::sort(seeds.begin(), seeds.end());
  QCOMPARE(seeds, (QList<qint64>{1, 2}));
}

void TestGuiRuns::queueRunsADataParallelRun() {
  QVERIFY2(QFile::exists(qEnvironmentVariable("ROUTELAB_CLI")), "ROUTELAB_CLI not set");
  auto window = makeWindow();
  RunQueue* queue = window->runQueue();
  QTRY_VERIFY_WITH_TIMEOUT(queue->isLoaded(), 10000);
  routelab::RunRequest request;
  request.preset = QStringLiteral("tiny");
  request.stepsOverride = 10;
  request.sets = {QStringLiteral("run.threads=1")};
  request.processes = 2;
  const auto json = RunQueue::requestToJson(request, {});
  QCOMPARE(RunQueue::requestFromJson(json).processes, 2);
  QVERIFY(RunQueue::describe(json).contains(QStringLiteral("2 processes")));
  int steps = 0;
  connect(queue, &RunQueue::progressReceived, this,
          [&](qint64, const routelab::ProgressBatch& batch) { steps += static_cast<int>(batch.steps.size()); });
  queue->submit(request);
  QTRY_VERIFY_WITH_TIMEOUT(queue->entries().first().state == QStringLiteral("done") ||
                               queue->entries().first().state == QStringLiteral("failed"),
                           kRunTimeoutMs);
  QVERIFY2(queue->entries().first().state == QStringLiteral("done"), qPrintable(queue->entries().first().message));
  QVERIFY(steps > 0);  // rank 0's progress reached the window live
  RunStore store(dbPath_.toStdString(), false);
  const auto runs = store.list_runs();
  QCOMPARE(runs.size(), std::size_t{1});
  QCOMPARE(runs[0].status, routelab::RunStatus::Finished);
  QCOMPARE(runs[0].last_step, std::int64_t{10});
  QCOMPARE(runs[0].world_size, 2);
  QCOMPARE(runs[0].backend, std::string("gloo"));
}

void TestGuiRuns::routingQuickstartQueuesDtrnetBesideDense() {
  auto window = makeWindow();
  RunQueue* queue = window->runQueue();
  queue->stopAll();  // hold: the two requests stay pending to be read
  QTRY_VERIFY_WITH_TIMEOUT(queue->isLoaded(), 10000);
  // A fresh store points at routing.
  QTRY_VERIFY_WITH_TIMEOUT(window->statusBar()->currentMessage().contains(QStringLiteral("Quick start with routing")),
                           10000);
  window->routingQuickstartAction()->trigger();
  QCOMPARE(queue->entries().size(), 2);
  QStringList presets;
  for (const auto& e : queue->entries()) presets << RunQueue::requestFromJson(e.requestJson).preset;
  QCOMPARE(presets, (QStringList{QStringLiteral("quickstart-dtrnet"), QStringLiteral("quickstart")}));
  // The routed preset resolves to DTRNet at the dense quick-start's shape.
  const auto routed = routelab::preset_config("quickstart-dtrnet", {});
  const auto dense = routelab::preset_config("quickstart", {});
  QCOMPARE(routed.arch(), std::string("dtrnet"));
  for (const char* key : {"n_layer", "n_embd", "n_head", "style"})
    QCOMPARE(routed.model().at(key), dense.model().at(key));
  QCOMPARE(routed.train().at("batch_size"), dense.train().at("batch_size"));
}

}  // namespace test_gui_runs

ROUTELAB_TEST_SUITE(test_gui_runs, TestGuiRuns)
#include "test_gui_runs.moc"
