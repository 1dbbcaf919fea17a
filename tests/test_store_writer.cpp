// Tests of StoreWriter, the run store's batching writer thread: a reader during a write, flush and status,
// flushing on destruction, batching under load, heartbeats, error reporting, rows kept and retried in order
// through a brief full disk, a writer that gives up for good (no gaps), and a writer whose lease was taken.

#include <QDateTime>
#include <QDir>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTest>

#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>

#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "core/util/logging.h"
#include "tests/store_test_support.h"
#include "tests/suite.h"

namespace test_store_writer {

using namespace routelab;
using namespace routelab::test;

class TestStoreWriter : public QObject {
  Q_OBJECT


 private:
  std::unique_ptr<QTemporaryDir> dir_;
  std::string db_path() const { return dir_->filePath("runs.sqlite").toStdString(); }

 private slots:
  void initTestCase() { init_logging({.log_dir = "-", .console = true, .level = "warn"}); }

  void init() {
    dir_ = std::make_unique<QTemporaryDir>();
    QVERIFY(dir_->isValid());
  }

  void cleanup() { dir_.reset(); }


  void readerDuringWrite() {
    const int kRows = 20000;
    std::int64_t id = 0;
    {
      RunStore store(db_path());
      id = store.create_run(sample_run());
    }
    std::atomic<bool> writing_done{false};
    std::string reader_error;
    bool monotonic = true, prefix = true;
    std::size_t final_count = 0;
    int reads = 0, distinct_counts = 0;

    std::thread reader([&] {
      try {
        RunStore store(db_path());
        std::size_t last = 0;
        for (;;) {
          const bool done = writing_done.load();
          const auto points = store.metric(id, "train/loss");
          ++reads;
          if (points.size() < last) monotonic = false;
          if (points.size() != last) ++distinct_counts;
          // Transactions commit whole and in order, so a reader always sees steps 0..n-1.
          if (!points.empty() && points.back().step != static_cast<std::int64_t>(points.size()) - 1) prefix = false;
          last = points.size();
          if (done) {
            final_count = last;
            break;
          }
        }
      } catch (const std::exception& e) {
        reader_error = e.what();
      }
    });

    {
      StoreWriter writer(db_path(), id, "", 0.02);
      for (int i = 0; i < kRows; ++i) {
        writer.add_metric({"train/loss", i, 1700000000.0 + i, 10.0 / (i + 1)});
        if (i % 1000 == 999) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      writer.flush();
      writing_done = true;
      reader.join();
    }
    QVERIFY2(reader_error.empty(), reader_error.c_str());
    QVERIFY(monotonic);
    QVERIFY(prefix);
    QCOMPARE(final_count, std::size_t(kRows));
    QVERIFY(reads > 1);
    qInfo("reader: %d reads, %d distinct counts", reads, distinct_counts);

    RunStore store(db_path());
    QCOMPARE(store.metric(id, "train/loss").size(), std::size_t(kRows));
    QCOMPARE(store.run(id)->last_step, std::int64_t(kRows - 1));
  }



  void writerSetStatusAfterFlush() {
    RunStore store(db_path());
    const auto id = store.create_run(sample_run());
    StoreWriter writer(db_path(), id, "", 3600.0);  // only flush() and set_status() write
    for (int i = 0; i < 100; ++i) writer.add_metric({"train/loss", i, 0, 1.0});
    writer.add_routing({99, 0, 0.5, 0.5, 0.0, 8, 4});
    writer.add_eval({99, "val", 1.0, 2.7, 1.0, "{}"});
    writer.add_checkpoint({99, "/c/99.pt", 1, 0.0, std::nullopt});
    writer.add_probe({99, "{}"});
    writer.flush();
    QCOMPARE(store.metric(id, "train/loss").size(), std::size_t(100));
    QCOMPARE(store.routing(id).size(), std::size_t(1));
    QCOMPARE(store.evals(id).size(), std::size_t(1));
    QCOMPARE(store.checkpoints(id).size(), std::size_t(1));
    QCOMPARE(store.probes(id).size(), std::size_t(1));
    writer.flush();  // nothing pending: returns at once

    writer.add_metric({"train/loss", 100, 0, 0.5});  // not flushed: set_status writes it first
    writer.set_status(RunStatus::Finished, "done");
    const auto r = store.run(id);
    QCOMPARE(r->status, RunStatus::Finished);
    QCOMPARE(r->message, std::string("done"));
    QVERIFY(r->ended_at > 0);
    QCOMPARE(r->last_step, std::int64_t(100));
    QCOMPARE(r->last_train_loss, std::optional<double>(0.5));

    writer.set_status(RunStatus::Running);
    QCOMPARE(store.run(id)->status, RunStatus::Running);
    QCOMPARE(store.run(id)->ended_at, 0.0);
  }

  void writerDestructorFlushes() {
    RunStore store(db_path());
    const auto id = store.create_run(sample_run());
    {
      StoreWriter writer(db_path(), id, "", 3600.0);
      for (int i = 0; i < 50; ++i) writer.add_metric({"train/loss", i, 0, 1.0});
      writer.add_routing({49, 0, 0.5, 0.5, 0.0, 8, 4});
      writer.add_eval({49, "val", 1.0, 2.7, 1.0, "{}"});
      writer.add_checkpoint({49, "/c/49.pt", 1, 0.0, std::nullopt});
      writer.add_probe({49, "{}"});
      QVERIFY(store.metric(id, "train/loss").empty());  // still pending: the interval is an hour
    }
    QCOMPARE(store.metric(id, "train/loss").size(), std::size_t(50));
    QCOMPARE(store.routing(id).size(), std::size_t(1));
    QCOMPARE(store.evals(id).size(), std::size_t(1));
    QCOMPARE(store.checkpoints(id).size(), std::size_t(1));
    QCOMPARE(store.probes(id).size(), std::size_t(1));
  }

  void writerWritesWithoutFlushWhenManyPending() {
    RunStore store(db_path());
    const auto id = store.create_run(sample_run());
    StoreWriter writer(db_path(), id, "", 3600.0);
    for (int i = 0; i < 2500; ++i) writer.add_metric({"train/loss", i, 0, 1.0});
    // Over 2000 pending rows are written at once, whatever the interval.
    for (int tries = 0; tries < 500 && store.metric(id, "train/loss").empty(); ++tries)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    QVERIFY(store.metric(id, "train/loss").size() > 2000);
  }

  void writerKeepsHeartbeatFresh() {
    RunStore store(db_path());
    const auto id = store.create_run(sample_run());
    const double created = store.run(id)->heartbeat_at;
    StoreWriter writer(db_path(), id, "", 0.05);
    QTRY_VERIFY_WITH_TIMEOUT(store.run(id)->heartbeat_at > created, 5000);
  }

  void writerReportsWriteError() {
    RunStore store(db_path());
    bool threw = false;
    try {
      StoreWriter writer(db_path(), 42);
    } catch (const StoreError& e) {
      threw = std::string(e.what()).find(db_path()) != std::string::npos;
    }
    QVERIFY2(threw, "a writer for a missing run");

    const auto id = store.create_run(sample_run());
    StoreWriter writer(db_path(), id, "", 0.01);
    store.delete_run(id);  // e.g. deleted from another window
    writer.add_metric({"train/loss", 1, 0, 1.0});
    QString message;
    try {
      writer.flush();
    } catch (const StoreError& e) {
      message = QString::fromUtf8(e.what());
    }
    QVERIFY2(message.contains(QString::fromStdString(db_path())), qPrintable(message));
    writer.flush();  // the error was reported once
  }

 private:
  /// The train/loss steps stored for `id`, in order.
  std::vector<std::int64_t> stored_steps(RunStore& store, std::int64_t id) {
    std::vector<std::int64_t> steps;
    for (const auto& p : store.metric(id, "train/loss")) steps.push_back(p.step);
    return steps;
  }
  static std::vector<std::int64_t> range(std::int64_t first, std::int64_t last) {
    std::vector<std::int64_t> out;
    for (auto i = first; i <= last; ++i) out.push_back(i);
    return out;
  }

 private slots:
  void briefFullDiskLosesNoRow() {
    RunStore store(db_path());
    const auto id = store.create_run(sample_run());
    StoreWriter writer(db_path(), id, "", 0.01, /*retry_for_s=*/30.0);
    for (int step = 1; step <= 5; ++step) writer.add_metric({"train/loss", step, 0, 1.0});
    writer.flush();
    {
      FileSizeLimit full(0);  // nothing may be written
      for (int step = 6; step <= 10; ++step) writer.add_metric({"train/loss", step, 0, 1.0});
      std::this_thread::sleep_for(std::chrono::milliseconds(400));  // several failed tries
      writer.check();  // still retrying: no error yet
      QCOMPARE(stored_steps(store, id), range(1, 5));
    }
    for (int step = 11; step <= 12; ++step) writer.add_metric({"train/loss", step, 0, 1.0});
    writer.flush();
    QCOMPARE(stored_steps(store, id), range(1, 12));  // every row, in order, once
  }

  void lastingFullDiskStopsTheWriterWithoutGaps() {
    RunStore store(db_path());
    const auto id = store.create_run(sample_run());
    StoreWriter writer(db_path(), id, "", 0.01, /*retry_for_s=*/0.2);
    for (int step = 1; step <= 5; ++step) writer.add_metric({"train/loss", step, 0, 1.0});
    writer.flush();
    std::string message;
    {
      FileSizeLimit full(0);  // nothing may be written
      for (int step = 6; step <= 10; ++step) writer.add_metric({"train/loss", step, 0, 1.0});
      try {
        writer.flush();
      } catch (const StoreError& e) {
        message = e.what();
      }
    }
    QVERIFY2(message.find("5 rows were not stored") != std::string::npos, message.c_str());
    // The disk has room again, but nothing after the lost rows is written: the stored steps stay contiguous.
    writer.add_metric({"train/loss", 11, 0, 1.0});
    writer.flush();
    writer.check();  // reported once
    QCOMPARE(stored_steps(store, id), range(1, 5));
    writer.set_status(RunStatus::Failed, message);
    QCOMPARE(store.run(id)->status, RunStatus::Failed);
    QCOMPARE(store.run(id)->last_step, std::int64_t{5});
  }

  void writerStopsWhenItsLeaseIsTaken() {
    RunStore store(db_path());
    NewRun row = sample_run();
    row.lease_token = new_lease_token();
    const auto id = store.create_run(row);
    StoreWriter writer(db_path(), id, row.lease_token, 0.01);
    writer.add_metric({"train/loss", 1, 0, 1.0});
    writer.flush();
    RawDb(db_path()).exec("UPDATE runs SET lease_token = 'another-writer' WHERE id = " + std::to_string(id));
    writer.add_metric({"train/loss", 2, 0, 1.0});
    std::string message;
    try {
      writer.flush();
    } catch (const LeaseLostError& e) {
      message = e.what();
    } catch (const StoreError& e) {
      message = e.what();
    }
    QVERIFY2(message.find("this process stops writing it") != std::string::npos, message.c_str());
    writer.set_status(RunStatus::Finished, "done");  // not this writer's run any more: nothing written
    QCOMPARE(stored_steps(store, id), range(1, 1));
    QCOMPARE(store.run(id)->status, RunStatus::Running);
    QCOMPARE(store.lease(id)->token, std::string("another-writer"));
  }
};

}  // namespace test_store_writer

ROUTELAB_TEST_SUITE(test_store_writer, TestStoreWriter)
#include "test_store_writer.moc"
