// Tests of StoreWriter, the run store's batching writer thread: a reader during a write, flush and status,
// flushing on destruction, batching under load, heartbeats and error reporting.

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
      StoreWriter writer(db_path(), id, 0.02);
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
    StoreWriter writer(db_path(), id, 3600.0);  // only flush() and set_status() write
    for (int i = 0; i < 100; ++i) writer.add_metric({"train/loss", i, 0, 1.0});
    writer.add_routing({99, 0, 0.5, 0.5, 0.0, 8, 4});
    writer.add_eval({99, "val", 1.0, 2.7, 1.0, "{}"});
    writer.add_checkpoint({99, "/c/99.pt", 1, 0.0});
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
      StoreWriter writer(db_path(), id, 3600.0);
      for (int i = 0; i < 50; ++i) writer.add_metric({"train/loss", i, 0, 1.0});
      writer.add_routing({49, 0, 0.5, 0.5, 0.0, 8, 4});
      writer.add_eval({49, "val", 1.0, 2.7, 1.0, "{}"});
      writer.add_checkpoint({49, "/c/49.pt", 1, 0.0});
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
    StoreWriter writer(db_path(), id, 3600.0);
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
    StoreWriter writer(db_path(), id, 0.05);
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
    StoreWriter writer(db_path(), id, 0.01);
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
};

QTEST_GUILESS_MAIN(TestStoreWriter)
#include "test_store_writer.moc"
