// Faults end to end through the trainer: a second resume while the first trains, damaged and foreign
// checkpoints (resume falls back to the newest intact one and the curve is still the uninterrupted one), a stop
// before the first step, a store reached by a relative path from another directory, a brief full disk during
// metric writes (no row lost), and a full disk during a checkpoint (a clear failure, resumable exactly).
#include <QDir>
#include <QTemporaryDir>
#include <QtTest>

#include <sys/mount.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "core/config/experiment_config.h"
#include "core/store/run_store.h"
#include "core/train/trainer.h"
#include "core/util/errors.h"
#include "tests/store_test_support.h"
#include "tests/suite.h"

namespace test_faults {

using namespace routelab;
using namespace routelab::test;
namespace fs = std::filesystem;

namespace {

/// The copy task on a small model: 24 steps, an evaluation and a checkpoint every 8.
ExperimentConfig small_config(std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"model.n_layer=2", "model.n_embd=64", "model.n_head=4", "model.style=gpt2",
                                   "data.source=copy", "train.batch_size=16", "train.lr=3e-3", "train.min_lr=3e-4",
                                   "train.warmup_steps=4", "train.eval_batches=2", "train.log_every=4",
                                   "train.steps=24", "train.eval_every=8", "train.checkpoint_every=8",
                                   "run.threads=2"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return resolve_config(nlohmann::json::object(), sets, "test");
}

/// Calls `at(step)` after each step the trainer reports; cancels once `stop_after` is reached (0: never).
class Hook : public TrainObserver {
 public:
  Hook(std::atomic<bool>* cancel, std::int64_t stop_after, std::function<void(std::int64_t)> at = {})
      : cancel_(cancel), stop_after_(stop_after), at_(std::move(at)) {}
  void on_step(const StepMetrics& m) override {
    if (at_) at_(m.step);
    if (cancel_ && stop_after_ > 0 && m.step >= stop_after_) *cancel_ = true;
  }

 private:
  std::atomic<bool>* cancel_;
  std::int64_t stop_after_;
  std::function<void(std::int64_t)> at_;
};

std::vector<MetricPoint> losses(const std::string& db, std::int64_t id) { return RunStore(db).metric(id, "train/loss"); }

/// The stored curve of `part` equals the uninterrupted `full` one, value for value, each step once.
void expect_same_curve(const std::string& db, std::int64_t full, std::int64_t part) {
  const auto a = losses(db, full), b = losses(db, part);
  QCOMPARE(b.size(), a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    QCOMPARE(b[i].step, a[i].step);
    QVERIFY2(a[i].value == b[i].value, qPrintable(QString("step %1: %2 vs %3")
                                                      .arg(a[i].step)
                                                      .arg(a[i].value, 0, 'g', 17)
                                                      .arg(b[i].value, 0, 'g', 17)));
  }
}

void overwrite_middle(const std::string& path) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(static_cast<std::streamoff>(fs::file_size(path) / 2));
  const char garbage[64] = {};
  file.write(garbage, sizeof garbage);
}

}  // namespace

class TestFaults : public QObject {
  Q_OBJECT
  QTemporaryDir home_;

  std::string db(const QString& name) const { return home_.filePath(name + ".sqlite").toStdString(); }

  /// Trains `cfg` until `stop_after` and returns the stopped run.
  TrainOutcome stopped_run(const std::string& store, const ExperimentConfig& cfg, std::int64_t stop_after) {
    std::atomic<bool> cancel{false};
    Hook hook(&cancel, stop_after);
    auto part = train({cfg, store, "part", ""}, &hook, &cancel);
    if (part.status != RunStatus::Stopped) qWarning("the run did not stop: %s", part.message.c_str());
    return part;
  }

 private Q_SLOTS:
  void initTestCase() { qputenv("ROUTELAB_HOME", home_.path().toUtf8()); }

  void secondResumeIsRefusedWhileTheFirstTrains() {
    const auto store = db("two-resumes");
    const auto cfg = small_config();
    const auto part = stopped_run(store, cfg, 8);
    QCOMPARE(part.status, RunStatus::Stopped);

    // The first resume trains on another thread and waits inside its first step until the second has been tried.
    std::mutex mutex;
    std::condition_variable cv;
    bool in_step = false, tried = false;
    Hook hold(nullptr, 0, [&](std::int64_t) {
      std::unique_lock lock(mutex);
      in_step = true;
      cv.notify_all();
      cv.wait(lock, [&] { return tried; });
    });
    TrainOutcome first;
    std::thread worker([&] { first = resume(store, part.run_id, &hold); });
    {
      std::unique_lock lock(mutex);
      cv.wait(lock, [&] { return in_step; });
    }
    std::string refused;
    try {
      resume(store, part.run_id);
    } catch (const StoreError& e) {
      refused = e.what();
    }
    {
      std::lock_guard lock(mutex);
      tried = true;
    }
    cv.notify_all();
    worker.join();
    QVERIFY2(refused.find("is being written by process") != std::string::npos, refused.c_str());
    QCOMPARE(first.status, RunStatus::Finished);
    // One writer: every step stored once.
    const auto stored = losses(store, part.run_id);
    QCOMPARE(stored.size(), std::size_t{24});
    for (std::size_t i = 0; i < stored.size(); ++i) QCOMPARE(stored[i].step, std::int64_t(i + 1));
  }

  void resumePassesOverUnusableCheckpoints_data() {
    QTest::addColumn<QString>("fault");
    QTest::addColumn<QString>("reason");
    QTest::newRow("damaged bytes") << "damaged" << "damaged or changed since it was written";
    QTest::newRow("another run's checkpoint") << "foreign" << "a checkpoint of run";
    QTest::newRow("another step's checkpoint") << "other step" << "holds step 16";
    QTest::newRow("missing file") << "missing" << "checkpoint file not found";
  }
  void resumePassesOverUnusableCheckpoints() {
    QFETCH(QString, fault);
    QFETCH(QString, reason);
    const auto store = db("fallback-" + QString(fault).replace(' ', '-'));
    const auto cfg = small_config();
    const auto full = train({cfg, store, "full", ""});
    QCOMPARE(full.status, RunStatus::Finished);
    const auto part = stopped_run(store, cfg, 20);  // checkpoints at 8, 16 and 20 (the stop)
    QCOMPARE(part.status, RunStatus::Stopped);
    std::map<std::int64_t, std::string> part_files, full_files;
    {
      RunStore s(store);
      for (const auto& c : s.checkpoints(part.run_id)) part_files[c.step] = c.path;
      for (const auto& c : s.checkpoints(full.run_id)) full_files[c.step] = c.path;
    }
    const auto file20 = part_files[20], file16 = part_files[16], full16 = full_files[16];
    QVERIFY(!file20.empty() && !file16.empty() && !full16.empty());
    if (fault == "damaged") {
      overwrite_middle(file20);
    } else if (fault == "missing") {
      fs::remove(file20);
    } else {
      // A file of the same model shape put in its place, as an older RouteLab's row (no hash) would accept it.
      fs::copy_file(fault == "foreign" ? full16 : file16, file20, fs::copy_options::overwrite_existing);
      RawDb(store).exec("UPDATE checkpoints SET crc32 = NULL WHERE step = 20 AND run_id = " +
                        std::to_string(part.run_id));
    }
    const auto resumed = resume(store, part.run_id);
    QCOMPARE(resumed.status, RunStatus::Finished);
    RunStore s(store);
    QCOMPARE(s.run(part.run_id)->resumed_from_step.value_or(-1), std::int64_t{16});
    expect_same_curve(store, full.run_id, part.run_id);
    // The run's final message says which checkpoint was passed over, and why.
    const auto message = s.run(part.run_id)->message;
    QVERIFY2(message.find("resumed from step 16, passing over 1 unusable checkpoint (step 20: ") != std::string::npos &&
                 message.find(reason.toStdString()) != std::string::npos,
             message.c_str());
    // The file passed over went with its row (the run wrote no step 20 again: a checkpoint every 8 of 24 steps).
    QVERIFY2(!fs::exists(file20), file20.c_str());
    QVERIFY(fs::exists(file16));
  }

  void noIntactCheckpointIsAClearErrorAndChangesNothing() {
    const auto store = db("none-intact");
    const auto part = stopped_run(store, small_config(), 8);
    const auto path = RunStore(store).latest_checkpoint(part.run_id)->path;
    overwrite_middle(path);
    std::string message;
    try {
      resume(store, part.run_id);
    } catch (const CheckpointError& e) {
      message = e.what();
    }
    QVERIFY2(message.find("no intact checkpoint") != std::string::npos &&
                 message.find("damaged or changed since it was written") != std::string::npos,
             message.c_str());
    RunStore s(store);
    QCOMPARE(s.run(part.run_id)->status, RunStatus::Stopped);
    QVERIFY(!s.lease(part.run_id).has_value());  // given back: the next resume is not refused for it
    QCOMPARE(losses(store, part.run_id).size(), std::size_t{8});
  }

  void stopBeforeTheFirstStepCanBeResumed() {
    const auto store = db("stop-at-0");
    const auto cfg = small_config();
    const auto full = train({cfg, store, "full", ""});
    std::atomic<bool> cancel{true};  // Ctrl-C before step 1
    const auto part = train({cfg, store, "part", ""}, nullptr, &cancel);
    QCOMPARE(part.status, RunStatus::Stopped);
    QCOMPARE(part.last_step, std::int64_t{0});
    QCOMPARE(RunStore(store).latest_checkpoint(part.run_id)->step, std::int64_t{0});
    const auto resumed = resume(store, part.run_id);
    QCOMPARE(resumed.status, RunStatus::Finished);
    expect_same_curve(store, full.run_id, part.run_id);
    const auto val = RunStore(store).metric(part.run_id, "val/loss");
    QCOMPARE(val.size(), RunStore(store).metric(full.run_id, "val/loss").size());  // step 0 evaluated once
  }

  void relativeStoreWorksFromAnotherDirectory() {
    const QString before = QDir::currentPath();
    const QString work = home_.filePath("cwd");
    QVERIFY(QDir().mkpath(work + "/elsewhere"));
    QDir::setCurrent(work);
    const auto part = stopped_run("rel.sqlite", small_config(), 8);  // the README's `--db runs.sqlite`
    QDir::setCurrent(work + "/elsewhere");
    const auto absolute = (work + "/rel.sqlite").toStdString();
    const auto path = RunStore(absolute).latest_checkpoint(part.run_id)->path;
    QVERIFY2(fs::path(path).is_absolute() && fs::exists(path), path.c_str());
    const auto resumed = resume(absolute, part.run_id);
    QDir::setCurrent(before);
    QCOMPARE(resumed.status, RunStatus::Finished);
  }

  void briefFullDiskDuringMetricWritesLosesNoRow() {
    const auto store = db("brief-full");
    std::unique_ptr<FileSizeLimit> full;
    std::size_t stored_while_full = 0;
    Hook hook(nullptr, 0, [&](std::int64_t step) {
      if (step == 5) full = std::make_unique<FileSizeLimit>(0);  // nothing may be written
      if (step == 14) {
        // Long enough for the writer to have tried (and failed) more than once: nothing after step 5 got in.
        std::this_thread::sleep_for(std::chrono::milliseconds(800));
        stored_while_full = losses(store, 1).size();
        full.reset();
      }
    });
    const auto outcome = train({small_config({"train.checkpoint_every=1000"}), store, "brief", ""}, &hook);
    full.reset();
    QCOMPARE(outcome.status, RunStatus::Finished);
    QVERIFY2(stored_while_full <= 5, qPrintable(QString::number(stored_while_full)));
    const auto stored = losses(store, outcome.run_id);
    QCOMPARE(stored.size(), std::size_t{24});
    for (std::size_t i = 0; i < stored.size(); ++i) QCOMPARE(stored[i].step, std::int64_t(i + 1));
  }

  void diskWithoutRoomIsAnErrorBeforeWriting() {
    // A real small disk (a 1 MiB tmpfs) where mounting is allowed: the first checkpoint (~1.3 MB) cannot fit.
    const QString mount = home_.filePath("small-disk");
    QVERIFY(QDir().mkpath(mount));
    if (::geteuid() != 0 ||
        ::mount("tmpfs", mount.toUtf8().constData(), "tmpfs", 0, "size=1m") != 0)
      QSKIP("a small tmpfs needs root (the full-disk paths are also tested with RLIMIT_FSIZE)");
    const auto store = (mount + "/runs.sqlite").toStdString();
    const auto outcome = train({small_config(), store, "small", ""});
    const std::string message = outcome.message;
    std::vector<std::string> left;
    for (const auto& entry : fs::recursive_directory_iterator((mount + "/checkpoints").toStdString()))
      if (entry.is_regular_file()) left.push_back(entry.path().string());
    const auto status = RunStore(store).run(outcome.run_id)->status;
    ::umount(mount.toUtf8().constData());
    QCOMPARE(outcome.status, RunStatus::Failed);
    QVERIFY2(message.find("cannot write checkpoint (it needs about") != std::string::npos, message.c_str());
    QVERIFY(left.empty());  // nothing half-written
    QCOMPARE(status, RunStatus::Failed);
  }

  void onlyTheNewestCheckpointsAreKept() {
    // train.keep_checkpoints=2: once a checkpoint is stored, those older than the newest two lose their row, then
    // their file. A run stopped and resumed among them, its newest damaged, resumes from the older one kept, still
    // stores the uninterrupted curve and leaves no file of the damaged one.
    const auto store = db("keep");
    const auto cfg = small_config({"train.keep_checkpoints=2"});  // a checkpoint every 8 of 24 steps
    const auto steps = [&](std::int64_t run) {
      std::vector<std::int64_t> out;
      for (const auto& c : RunStore(store).checkpoints(run)) out.push_back(c.step);
      return out;
    };
    const auto files = [&](std::int64_t run) {
      std::set<std::string> out;
      const auto folder = fs::path(RunStore(store).latest_checkpoint(run)->path).parent_path();
      for (const auto& entry : fs::directory_iterator(folder)) out.insert(entry.path().filename().string());
      return out;
    };
    const auto full = train({cfg, store, "full", ""});
    QCOMPARE(full.status, RunStatus::Finished);
    QCOMPARE(steps(full.run_id), (std::vector<std::int64_t>{16, 24}));
    QCOMPARE(files(full.run_id), (std::set<std::string>{"step-00000016.pt", "step-00000024.pt"}));
    const auto part = stopped_run(store, cfg, 20);  // checkpoints at 8, 16 and 20 (the stop)
    QCOMPARE(steps(part.run_id), (std::vector<std::int64_t>{16, 20}));
    QCOMPARE(files(part.run_id), (std::set<std::string>{"step-00000016.pt", "step-00000020.pt"}));
    overwrite_middle(RunStore(store).latest_checkpoint(part.run_id)->path);
    const auto resumed = resume(store, part.run_id);
    QCOMPARE(resumed.status, RunStatus::Finished);
    QVERIFY2(resumed.message.find("resumed from step 16") != std::string::npos, resumed.message.c_str());
    expect_same_curve(store, full.run_id, part.run_id);
    QCOMPARE(steps(part.run_id), (std::vector<std::int64_t>{16, 24}));
    QCOMPARE(files(part.run_id), (std::set<std::string>{"step-00000016.pt", "step-00000024.pt"}));
  }

  void fullDiskDuringCheckpointFailsCleanlyAndResumesExactly_data() {
    QTest::addColumn<bool>("async");
    QTest::newRow("written on its own thread") << true;  // the failure is seen at a later step or the run's end
    QTest::newRow("written by the step") << false;
  }

  void fullDiskDuringCheckpointFailsCleanlyAndResumesExactly() {
    QFETCH(bool, async);
    const auto store = db(async ? "ckpt-full-async" : "ckpt-full");
    const auto cfg = small_config({std::string("train.checkpoint_async=") + (async ? "true" : "false")});
    const auto full = train({cfg, store, "full", ""});
    // From step 10 the store may still grow a little, but no checkpoint fits: the one of step 16 fails.
    std::unique_ptr<FileSizeLimit> limit;
    Hook hook(nullptr, 0, [&](std::int64_t step) {
      if (step == 10) limit = std::make_unique<FileSizeLimit>(store_bytes(store) + 256 * 1024);
    });
    const auto failed = train({cfg, store, "part", ""}, &hook);
    limit.reset();
    QCOMPARE(failed.status, RunStatus::Failed);
    QVERIFY2(failed.message.find("cannot write checkpoint") != std::string::npos &&
                 failed.message.find("step-00000016.pt") != std::string::npos,
             failed.message.c_str());
    {
      RunStore s(store);
      QCOMPARE(s.run(failed.run_id)->status, RunStatus::Failed);
      QCOMPARE(s.latest_checkpoint(failed.run_id)->step, std::int64_t{8});
      for (const auto& entry : fs::directory_iterator(fs::path(s.latest_checkpoint(failed.run_id)->path).parent_path()))
        QVERIFY2(entry.path().extension() != ".tmp", entry.path().c_str());  // no half-written file left
    }
    const auto resumed = resume(store, failed.run_id);  // the disk has room again
    QCOMPARE(resumed.status, RunStatus::Finished);
    expect_same_curve(store, full.run_id, failed.run_id);
  }
};

}  // namespace test_faults

ROUTELAB_TEST_SUITE(test_faults, TestFaults)
#include "test_faults.moc"
