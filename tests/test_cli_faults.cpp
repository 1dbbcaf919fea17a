// The fault-injection suite: routelab-cli processes as a user's machine treats them. kill -9 at random points of
// training and checkpointing, then resume, again and again; a writer paused (SIGSTOP) for what looks like an hour;
// two resumes started at once; a disk too small for a checkpoint; an --out naming the store. After each: the store
// passes SQLite's integrity check, every step is stored once, and the resumed curve equals the uninterrupted one.
#include <QProcess>
#include <QRandomGenerator>
#include <QTemporaryDir>
#include <QtTest>

#include <signal.h>
#include <sqlite3.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/suite.h"

namespace test_cli_faults {

namespace {

using Clock = std::chrono::steady_clock;

/// A read-only look at a store with SQLite itself, beside the processes that write it.
class Peek {
 public:
  explicit Peek(const QString& path) {
    sqlite3_open_v2(path.toUtf8().constData(), &db_, SQLITE_OPEN_READONLY, nullptr);
    sqlite3_busy_timeout(db_, 5000);
  }
  ~Peek() { sqlite3_close(db_); }
  Peek(const Peek&) = delete;
  Peek& operator=(const Peek&) = delete;

  std::vector<std::pair<qint64, double>> rows(const std::string& sql) {
    std::vector<std::pair<qint64, double>> out;
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr) != SQLITE_OK) return out;
    while (sqlite3_step(s) == SQLITE_ROW) out.emplace_back(sqlite3_column_int64(s, 0), sqlite3_column_double(s, 1));
    sqlite3_finalize(s);
    return out;
  }
  QString text(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    QString out;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr) != SQLITE_OK) return "(" + QString(sqlite3_errmsg(db_)) + ")";
    if (sqlite3_step(s) == SQLITE_ROW && sqlite3_column_text(s, 0))
      out = QString::fromUtf8(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)));
    sqlite3_finalize(s);
    return out;
  }
  /// train/loss of a run, in step order.
  std::vector<std::pair<qint64, double>> losses(int run) {
    return rows("SELECT step, value FROM metrics WHERE run_id = " + std::to_string(run) +
                " AND key = 'train/loss' ORDER BY step, rowid");
  }

 private:
  sqlite3* db_ = nullptr;
};

constexpr int kSteps = 40;

}  // namespace

class TestCliFaults : public QObject {
  Q_OBJECT
  QTemporaryDir home_;

  QProcessEnvironment environment() const {
    auto env = QProcessEnvironment::systemEnvironment();
    env.insert("ROUTELAB_HOME", home_.path());
    return env;
  }

  /// A CLI process, started (not waited for). `shell_prefix` runs it under `bash -c "<prefix>; exec cli ..."`.
  std::unique_ptr<QProcess> start(const QStringList& args, const QString& shell_prefix = {}) {
    auto p = std::make_unique<QProcess>();
    p->setProcessEnvironment(environment());
    p->setProcessChannelMode(QProcess::MergedChannels);
    const QString cli = qEnvironmentVariable("ROUTELAB_CLI");
    if (shell_prefix.isEmpty()) {
      p->start(cli, args);
    } else {
      QString line = shell_prefix + "; exec '" + cli + "'";
      for (const auto& a : args) line += " '" + a + "'";
      p->start("bash", {"-c", line});
    }
    p->waitForStarted();
    return p;
  }

  /// Runs to the end: exit code (-2 for a crash or a signal) and output.
  std::pair<int, QString> run(const QStringList& args, const QString& shell_prefix = {}) {
    auto p = start(args, shell_prefix);
    if (!p->waitForFinished(300000)) return {-1, "timed out"};
    return {p->exitStatus() == QProcess::NormalExit ? p->exitCode() : -2, QString::fromUtf8(p->readAll())};
  }

  /// The training options every run here shares: small, a checkpoint every 5 steps, one thread.
  QStringList train_args(const QString& db, int steps = kSteps) const {
    return {"train", "--preset", "tiny", "--steps", QString::number(steps), "--db", db, "--quiet", "--threads", "1",
            "--set", "train.checkpoint_every=5", "--set", "train.log_every=1"};
  }

  static void wait_for(const std::function<bool()>& ready, int timeout_ms = 60000) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!ready() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  static void expect_intact(const QString& db) {
    Peek peek(db);
    QCOMPARE(peek.text("PRAGMA integrity_check"), QString("ok"));
  }

  /// `run`'s curve in `db` equals the reference, each step stored once.
  void expect_reference_curve(const QString& db, int run) {
    const auto got = Peek(db).losses(run);
    QCOMPARE(got.size(), reference_.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      QCOMPARE(got[i].first, reference_[i].first);
      QVERIFY2(got[i].second == reference_[i].second,
               qPrintable(QString("step %1: %2 vs %3").arg(got[i].first).arg(got[i].second, 0, 'g', 17)
                              .arg(reference_[i].second, 0, 'g', 17)));
    }
  }

  std::vector<std::pair<qint64, double>> reference_;  ///< the uninterrupted curve

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY2(QFile::exists(qEnvironmentVariable("ROUTELAB_CLI")), "ROUTELAB_CLI not set");
    // The uninterrupted run every interrupted one must reproduce (it also caches the corpus for the runs below).
    const auto db = home_.filePath("reference.sqlite");
    const auto [code, output] = run(train_args(db));
    QVERIFY2(code == 0, qPrintable(output));
    reference_ = Peek(db).losses(1);
    QCOMPARE(reference_.size(), std::size_t(kSteps));
  }

  void killedAtRandomPointsResumesToTheSameCurve() {
    const auto db = home_.filePath("kills.sqlite");
    QRandomGenerator random(20261125);
    auto process = start(train_args(db));
    int kills = 0;
    bool ended = false;  // a kill landed after the run had finished (on its way out): nothing left to resume
    for (int round = 0; round < 5; ++round) {
      // A kill only once a checkpoint exists (before it, nothing can be resumed), then at a random moment.
      wait_for([&] { return !Peek(db).rows("SELECT step, 0 FROM checkpoints WHERE run_id = 1").empty(); });
      std::this_thread::sleep_for(std::chrono::milliseconds(random.bounded(50, 900)));
      if (process->state() == QProcess::NotRunning) break;  // it finished first
      ::kill(static_cast<pid_t>(process->processId()), SIGKILL);
      process->waitForFinished();
      ++kills;
      expect_intact(db);
      if ((ended = Peek(db).text("SELECT status FROM runs WHERE id = 1") == "finished")) break;
      process = start({"resume", "1", "--db", db, "--quiet"});
    }
    if (!ended) {
      QVERIFY2(process->waitForFinished(300000), "the last resume did not end");
      const auto output = QString::fromUtf8(process->readAll());
      QVERIFY2(process->exitCode() == 0, qPrintable(output));
    }
    qInfo(ended ? "killed %d times, the last on its way out" : "killed %d times, then resumed to the end", kills);
    QVERIFY(kills > 0);
    expect_intact(db);
    expect_reference_curve(db, 1);
    QCOMPARE(Peek(db).text("SELECT status FROM runs WHERE id = 1"), QString("finished"));
  }

  void pausedWriterKeepsItsRun() {
    const auto db = home_.filePath("paused.sqlite");
    auto writer = start(train_args(db));
    wait_for([&] { return Peek(db).losses(1).size() >= 3; });
    const auto pid = static_cast<pid_t>(writer->processId());
    ::kill(pid, SIGSTOP);
    {
      // An hour without a heartbeat, as after a laptop's suspend.
      sqlite3* raw = nullptr;
      sqlite3_open(db.toUtf8().constData(), &raw);
      sqlite3_busy_timeout(raw, 5000);
      sqlite3_exec(raw, "UPDATE runs SET heartbeat_at = heartbeat_at - 3600", nullptr, nullptr, nullptr);
      sqlite3_close(raw);
    }
    const auto [list_code, listing] = run({"runs", "--db", db, "--json"});
    QVERIFY2(list_code == 0 && listing.contains("\"status\": \"running\""), qPrintable(listing));
    const auto [code, refused] = run({"resume", "1", "--db", db, "--quiet"});
    QVERIFY2(code > 0 && refused.contains("is being written by process " + QString::number(pid)), qPrintable(refused));
    ::kill(pid, SIGCONT);
    QVERIFY(writer->waitForFinished(300000));
    QVERIFY2(writer->exitCode() == 0, qPrintable(QString::fromUtf8(writer->readAll())));
    expect_intact(db);
    expect_reference_curve(db, 1);
  }

  void twoResumesAtOnceOneWins() {
    const auto db = home_.filePath("two.sqlite");
    auto first = start(train_args(db));
    wait_for([&] { return Peek(db).rows("SELECT step, 0 FROM checkpoints WHERE run_id = 1").size() >= 2; });
    ::kill(static_cast<pid_t>(first->processId()), SIGKILL);
    first->waitForFinished();
    auto a = start({"resume", "1", "--db", db, "--quiet"});
    auto b = start({"resume", "1", "--db", db, "--quiet"});
    QVERIFY(a->waitForFinished(300000) && b->waitForFinished(300000));
    const QString out_a = QString::fromUtf8(a->readAll()), out_b = QString::fromUtf8(b->readAll());
    QVERIFY2((a->exitCode() == 0) != (b->exitCode() == 0), qPrintable(out_a + "\n---\n" + out_b));
    QVERIFY2((a->exitCode() == 0 ? out_b : out_a).contains("is being written by process"), qPrintable(out_a + out_b));
    expect_intact(db);
    expect_reference_curve(db, 1);
  }

  void diskTooSmallForACheckpointIsAClearError() {
    const auto db = home_.filePath("small-disk.sqlite");
    // No file of the process may pass 1 MiB: the store fits, a checkpoint (1.4 MB) does not.
    const auto [code, output] = run(train_args(db), "trap '' XFSZ; ulimit -f 1024");
    QVERIFY2(code > 0 && output.contains("cannot write checkpoint") && !output.contains("terminate called"),
             qPrintable(QString("exit %1: %2").arg(code).arg(output)));
    expect_intact(db);
    Peek peek(db);
    QCOMPARE(peek.text("SELECT status FROM runs WHERE id = 1"), QString("failed"));
    QVERIFY(peek.rows("SELECT step, 0 FROM checkpoints").empty());
    // The very first checkpoint failed: nothing to resume, said plainly; the run and its rows stay.
    const auto [resume_code, said] = run({"resume", "1", "--db", db});
    QVERIFY2(resume_code > 0 && said.contains("no checkpoint"), qPrintable(said));
    // The failed write of step 5's checkpoint, on its own thread, is seen by a later step, at the latest by the
    // checkpoint of step 10, which waits for it: the steps up to then stay stored.
    const auto kept = peek.losses(1).size();
    QVERIFY2(kept >= 5 && kept <= 10, qPrintable(QString::number(kept)));
  }

  void outputNeverOverwritesTheStore_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("said");
    const auto db = home_.filePath("reference.sqlite");
    const auto checkpoint = home_.filePath("checkpoints/reference/run-1/step-00000005.pt");
    QTest::newRow("export onto the store") << QStringList{"export", "1", "--db", db, "--out", db} << "names the run store";
    QTest::newRow("export onto its WAL") << QStringList{"export", "1", "--db", db, "--out", db + "-wal"}
                                          << "names the run store";
    QTest::newRow("export onto a checkpoint") << QStringList{"export", "1", "--db", db, "--out", checkpoint}
                                              << "lies in the checkpoint folder";
    QTest::newRow("table onto the store") << QStringList{"table", "--runs", "1", "--db", db, "--out", db}
                                          << "names the run store";
    QTest::newRow("profile onto the store") << QStringList{"profile", "1", "--db", db, "--out", db}
                                            << "names the run store";
    QTest::newRow("figure onto another store")
        << QStringList{"figure", "curves", "--runs", "1", "--db", db, "--out", home_.filePath("kills.sqlite")}
        << "is an SQLite database";
  }
  void outputNeverOverwritesTheStore() {
    QFETCH(QStringList, args);
    QFETCH(QString, said);
    const auto db = home_.filePath("reference.sqlite");
    const auto [code, output] = run(args);
    QVERIFY2(code > 0 && output.contains(said), qPrintable(QString("exit %1: %2").arg(code).arg(output)));
    expect_intact(db);
    QCOMPARE(Peek(db).losses(1).size(), std::size_t(kSteps));
  }
};

}  // namespace test_cli_faults

ROUTELAB_TEST_SUITE(test_cli_faults, TestCliFaults)
#include "test_cli_faults.moc"
