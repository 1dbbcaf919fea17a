// One writer per run, and a store that travels: the lease (taken atomically, refused while its holder lives, a
// paused holder kept, a dead one replaced, another host's only after the user's timeout), leased status writes,
// crash marking by liveness, checkpoint paths relative to the store, run names, and stores opened read-only.
#include <QTemporaryDir>
#include <QTest>

#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "core/util/logging.h"
#include "core/util/paths.h"
#include "core/util/process.h"
#include "tests/store_test_support.h"
#include "tests/suite.h"

namespace test_run_lease {

using namespace routelab;
using namespace routelab::test;
namespace fs = std::filesystem;

namespace {

/// A child process stopped by SIGSTOP (a paused writer) until killed.
class PausedChild {
 public:
  PausedChild() {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::raise(SIGSTOP);
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(pid_, &status, WUNTRACED);  // returns once it is stopped
  }
  ~PausedChild() { end(); }
  pid_t pid() const { return pid_; }
  void end() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = 0;
  }

 private:
  pid_t pid_ = 0;
};

/// The pid of a process that has ended (and been reaped).
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

}  // namespace

class TestRunLease : public QObject {
  Q_OBJECT

 private:
  std::unique_ptr<QTemporaryDir> dir_;
  std::string db_path() const { return dir_->filePath("runs.sqlite").toStdString(); }

  /// A run created leased to this process.
  std::int64_t leased_run(RunStore& store, std::string* token = nullptr) {
    NewRun row = sample_run();
    row.lease_token = new_lease_token();
    if (token) *token = row.lease_token;
    return store.create_run(row);
  }

 private slots:
  void initTestCase() { init_logging({.log_dir = "-", .console = true, .level = "error"}); }
  void init() {
    dir_ = std::make_unique<QTemporaryDir>();
    QVERIFY(dir_->isValid());
  }
  void cleanup() { dir_.reset(); }

  void createdRunIsLeasedToItsProcess() {
    RunStore store(db_path());
    std::string token;
    const auto id = leased_run(store, &token);
    const auto lease = store.lease(id);
    QVERIFY(lease.has_value());
    QCOMPARE(lease->token, token);
    QCOMPARE(lease->holder.pid, static_cast<long long>(::getpid()));
    QCOMPARE(lease->holder.host, this_process().host);
    QCOMPARE(liveness(lease->holder), Liveness::Alive);
    // The holder (this very process) is alive: a second writer is refused, and the message names the holder.
    const auto refused = error_of<std::exception>([&] { store.acquire_lease(id); });
    QVERIFY2(refused.find("is being written by process " + std::to_string(::getpid())) != std::string::npos,
             refused.c_str());
    QCOMPARE(store.lease(id)->token, token);
  }

  void leasedWritesNeedTheLease() {
    RunStore store(db_path());
    std::string token;
    const auto id = leased_run(store, &token);
    QVERIFY_THROWS_EXCEPTION(LeaseLostError, store.heartbeat(id, "not-the-token"));
    QVERIFY_THROWS_EXCEPTION(LeaseLostError, store.set_status(id, RunStatus::Finished, "", "not-the-token"));
    QCOMPARE(store.run(id)->status, RunStatus::Running);
    // A reader marked the run crashed while its writer was paused: the writer's next heartbeat revives it.
    RawDb(db_path()).exec("UPDATE runs SET status = 'crashed', message = 'x', ended_at = 1 WHERE id = " +
                          std::to_string(id));
    store.heartbeat(id, token);
    QCOMPARE(store.run(id)->status, RunStatus::Running);
    QCOMPARE(store.run(id)->message, std::string());
    // The terminal status gives the lease back; the run can then be resumed by anyone.
    store.set_status(id, RunStatus::Stopped, "stopped", token);
    QVERIFY(!store.lease(id).has_value());
    QVERIFY_THROWS_EXCEPTION(LeaseLostError, store.heartbeat(id, token));
    const auto next = store.acquire_lease(id);
    QCOMPARE(store.lease(id)->token, next);
    QVERIFY(next != token);
  }

  void deadHolderIsReplacedAndMarkedCrashed() {
    RunStore store(db_path(), /*mark_crashed=*/false);
    const auto id = leased_run(store);
    RawDb(db_path()).exec("UPDATE runs SET lease_pid = " + std::to_string(dead_pid()) + " WHERE id = " +
                          std::to_string(id));
    // Its heartbeat is fresh, yet the process is provably gone: a reader marks the run crashed.
    QCOMPARE(store.mark_stale_runs_crashed(), 1);
    const auto run = store.run(id);
    QCOMPARE(run->status, RunStatus::Crashed);
    QVERIFY2(run->message.find("ended without recording a final status") != std::string::npos, run->message.c_str());
    const auto token = store.acquire_lease(id);
    QCOMPARE(store.lease(id)->token, token);
    QCOMPARE(store.lease(id)->holder.pid, static_cast<long long>(::getpid()));
  }

  void endedWriterOfThisProcessFreesItsRun() {
    // A run of this process (the GUI) ended, but its final status could not be written (a full disk): the store
    // still names this process, yet no writer here holds the lease. Resuming must not wait for a restart.
    RunStore store(db_path(), /*mark_crashed=*/false);
    std::string token;
    const auto id = leased_run(store, &token);
    QCOMPARE(store.mark_stale_runs_crashed(), 0);  // held by a writer here: alive
    RunStore::forget_lease(token);
    QCOMPARE(store.mark_stale_runs_crashed(), 1);
    QCOMPARE(store.run(id)->status, RunStatus::Crashed);
    const auto next = store.acquire_lease(id);
    QCOMPARE(store.lease(id)->token, next);
    QVERIFY_THROWS_EXCEPTION(StoreError, store.acquire_lease(id));  // and now held again
  }

  void pausedHolderKeepsItsRun() {
    PausedChild child;
    RunStore store(db_path(), /*mark_crashed=*/false);
    const auto id = leased_run(store);
    // The holder is the paused child, silent for an hour: neither marked crashed nor taken over.
    RawDb(db_path()).exec("UPDATE runs SET lease_pid = " + std::to_string(child.pid()) +
                          ", lease_start = '', heartbeat_at = heartbeat_at - 3600 WHERE id = " + std::to_string(id));
    QCOMPARE(RunStore(db_path()).run(id)->status, RunStatus::Running);  // a reader that marks
    QCOMPARE(store.mark_stale_runs_crashed(0.0), 0);
    QVERIFY_THROWS_EXCEPTION(StoreError, store.acquire_lease(id));
    QVERIFY_THROWS_EXCEPTION(StoreError, store.acquire_lease(id, /*takeover_after_s=*/1.0));  // same host: alive
    child.end();
    QCOMPARE(store.mark_stale_runs_crashed(), 1);
    QCOMPARE(store.run(id)->status, RunStatus::Crashed);
    store.acquire_lease(id);
  }

  void otherHostIsTakenOverOnlyAfterTheUsersTimeout() {
    RunStore store(db_path(), /*mark_crashed=*/false);
    const auto id = leased_run(store);
    RawDb(db_path()).exec("UPDATE runs SET lease_host = 'another-host', heartbeat_at = heartbeat_at - 100 "
                          "WHERE id = " + std::to_string(id));
    QCOMPARE(store.mark_stale_runs_crashed(0.0), 0);  // nothing here proves it gone
    const auto refused = error_of<std::exception>([&] { store.acquire_lease(id); });
    QVERIFY2(refused.find("--takeover-after") != std::string::npos, refused.c_str());
    QVERIFY_THROWS_EXCEPTION(StoreError, store.acquire_lease(id, /*takeover_after_s=*/1000.0));
    const auto token = store.acquire_lease(id, /*takeover_after_s=*/60.0);
    QCOMPARE(store.lease(id)->token, token);
    QCOMPARE(store.lease(id)->holder.host, this_process().host);
  }

  void runWithoutLeaseFallsBackToItsHeartbeat() {
    RunStore store(db_path(), /*mark_crashed=*/false);
    const auto id = store.create_run(sample_run());  // as an older RouteLab wrote it: no lease
    QVERIFY(!store.lease(id).has_value());
    QVERIFY_THROWS_EXCEPTION(StoreError, store.acquire_lease(id));  // heartbeat fresh: still running
    RawDb(db_path()).exec("UPDATE runs SET heartbeat_at = heartbeat_at - 3600 WHERE id = " + std::to_string(id));
    store.acquire_lease(id);
  }

  void checkpointPathsTravelWithTheStore() {
    const fs::path old_home = dir_->filePath("a").toStdString(), new_home = dir_->filePath("b").toStdString();
    fs::create_directories(old_home);
    const std::string db = (old_home / "runs.sqlite").string();
    std::int64_t id = 0;
    {
      RunStore store(db);
      id = store.create_run(sample_run());
      const fs::path file = fs::path(checkpoint_dir(db, id)) / "step-00000010.pt";
      fs::create_directories(file.parent_path());
      std::ofstream(file) << "x";
      store.insert_checkpoint(id, {10, file.string(), 1, 0.0, 0x1234u});
      QCOMPARE(RawDb(db).text("SELECT path FROM checkpoints"), std::string("checkpoints/runs/run-1/step-00000010.pt"));
      QCOMPARE(store.latest_checkpoint(id)->path, file.string());
      QCOMPARE(store.latest_checkpoint(id)->crc32.value_or(0), 0x1234u);
    }
    // The folder moves (and is reached from another working directory): the checkpoint is found in its new place.
    fs::rename(old_home, new_home);
    const std::string moved = (new_home / "runs.sqlite").string();
    const auto expected = (new_home / "checkpoints/runs/run-1/step-00000010.pt").string();
    {
      RunStore store(moved);
      QCOMPARE(store.latest_checkpoint(id)->path, expected);
      QVERIFY(fs::exists(store.latest_checkpoint(id)->path));
    }
    // Rows of an older RouteLab: relative to the writer's working directory, or absolute in the old place.
    for (const std::string& legacy : std::vector<std::string>{
             "./checkpoints/runs/run-1/step-00000010.pt", (old_home / "checkpoints/runs/run-1/step-00000010.pt").string()}) {
      RawDb(moved).exec("UPDATE checkpoints SET path = '" + legacy + "'");
      QCOMPARE(RunStore(moved).latest_checkpoint(id)->path, expected);
    }
  }

  void runNamesAreValidUtf8OfBoundedLength_data() {
    QTest::addColumn<QByteArray>("name");
    QTest::addColumn<bool>("accepted");
    QTest::newRow("ascii") << QByteArray("dtrnet-360m") << true;
    QTest::newRow("multi-byte") << QByteArray("routage \xc3\xa9t\xc3\xa9 \xe8\xb7\xaf\xe7\x94\xb1 \xf0\x9f\x9a\x80") << true;
    QTest::newRow("200 bytes") << QByteArray(200, 'a') << true;
    QTest::newRow("201 bytes") << QByteArray(201, 'a') << false;
    QTest::newRow("stray continuation byte") << QByteArray("run\x80") << false;
    QTest::newRow("invalid lead byte") << QByteArray("run\xff") << false;
    QTest::newRow("truncated sequence") << QByteArray("run\xe8\xb7") << false;
    QTest::newRow("overlong slash") << QByteArray("run\xc0\xaf") << false;
    QTest::newRow("surrogate") << QByteArray("run\xed\xa0\x80") << false;
  }
  void runNamesAreValidUtf8OfBoundedLength() {
    QFETCH(QByteArray, name);
    QFETCH(bool, accepted);
    RunStore store(db_path());
    NewRun row = sample_run();
    row.name = name.toStdString();
    const auto create = error_of<std::exception>([&] { store.create_run(row); });
    QCOMPARE(create == kNoException, accepted);
    const auto id = store.create_run(sample_run());
    RunPatch patch;
    patch.name = name.toStdString();
    const auto rename = error_of<std::exception>([&] { store.patch_run(id, patch); });
    QCOMPARE(rename == kNoException, accepted);
    if (!accepted) QVERIFY2(rename.find(db_path()) != std::string::npos, rename.c_str());
    QCOMPARE(store.run(id)->name, accepted ? name.toStdString() : sample_run().name);
  }

  void readOnlyStoreOpensReadOnly() {
    const fs::path home = dir_->filePath("home").toStdString(), view = dir_->filePath("view").toStdString();
    fs::create_directories(home);
    fs::create_directories(view);
    std::int64_t id = 0;
    {
      RunStore store((home / "runs.sqlite").string());
      id = store.create_run(sample_run());  // running, no lease, heartbeat an hour old: a reader would mark it
      RawDb((home / "runs.sqlite").string()).exec("UPDATE runs SET heartbeat_at = heartbeat_at - 3600");
      store.insert_metrics(id, {{"train/loss", 1, 0.0, 2.5}});
    }
    // A read-only mount where the user can, else a folder and file without write permission.
    const ReadOnlyView read_only(home, view, "runs.sqlite");
    if (!read_only.made())
      QSKIP("running as root where a read-only bind mount is not allowed: nothing here can be read-only");
    const std::string db = (view / "runs.sqlite").string();
    {
      RunStore store(db);  // a reader that would mark stale runs
      QVERIFY(store.read_only());
      QCOMPARE(store.run(id)->status, RunStatus::Running);
      QCOMPARE(store.metric(id, "train/loss").size(), std::size_t{1});
      QCOMPARE(store.mark_stale_runs_crashed(), 0);
      const auto refused = error_of<std::exception>([&] { store.create_run(sample_run()); });
      QVERIFY2(refused.find(db) != std::string::npos, refused.c_str());
    }
  }
};

}  // namespace test_run_lease

ROUTELAB_TEST_SUITE(test_run_lease, TestRunLease)
#include "test_run_lease.moc"
