// Migrations of the run store: a store of each earlier schema (a current one taken back with SQLite's DROP) opens
// with every row kept and gains what the later schemas add. The rest of the store: test_run_store.cpp.
#include <QTemporaryDir>
#include <QTest>

#include <sqlite3.h>

#include <filesystem>
#include <string>

#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "core/util/logging.h"
#include "tests/store_test_support.h"
#include "tests/suite.h"

namespace test_store_migrations {

using namespace routelab;
using namespace routelab::test;
namespace fs = std::filesystem;

/// Takes a current store back to schema v5's tables.
constexpr const char* kDropV6 = "DROP TABLE analyses; ";
/// Takes a current store back to schema v4's tables (SQLite >= 3.35 drops columns).
constexpr const char* kDropV5 = "DROP TABLE analyses; ALTER TABLE runs DROP COLUMN backend; ";
/// Takes a current store back to schema v3's tables.
constexpr const char* kDropV4 =
    "DROP TABLE analyses; ALTER TABLE runs DROP COLUMN backend; DROP TABLE tokenizers; "
    "ALTER TABLE runs DROP COLUMN tokenizer_hash; ";
/// Takes a current store back to schema v2's tables.
constexpr const char* kDropV3 =
    "DROP TABLE analyses; ALTER TABLE runs DROP COLUMN backend; DROP TABLE tokenizers; "
    "ALTER TABLE runs DROP COLUMN tokenizer_hash; "
    "ALTER TABLE runs DROP COLUMN lease_token; ALTER TABLE runs DROP COLUMN lease_pid; "
    "ALTER TABLE runs DROP COLUMN lease_host; ALTER TABLE runs DROP COLUMN lease_boot; "
    "ALTER TABLE runs DROP COLUMN lease_start; ALTER TABLE runs DROP COLUMN lease_at; "
    "ALTER TABLE checkpoints DROP COLUMN crc32; ";

class TestStoreMigrations : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  int stores_ = 0;
  /// A new store file for each test.
  std::string db_path() { return dir_.filePath(QString("runs-%1.sqlite").arg(++stores_)).toStdString(); }

 private slots:
  void initTestCase() {
    init_logging({.log_dir = "-", .console = true, .level = "warn"});
    QVERIFY(dir_.isValid());
  }

  void migratesV1StoreKeepingEveryRow() {
    const std::string path = db_path();
    std::int64_t id = 0;
    {
      RunStore store(path);
      id = store.create_run(sample_run("old"));
      store.insert_metrics(id, {{"train/loss", 1, 10.0, 2.5}, {"val/loss", 1, 11.0, 2.75}});
      store.insert_checkpoint(id, {1, "/tmp/ckpt-1.pt", 123, 12.0, std::nullopt});
      RunPatch patch;
      patch.tags = "a,b";
      patch.notes = "kept";
      store.patch_run(id, patch);
      store.set_status(id, RunStatus::Stopped, "by hand");
    }
    {
      // Turn the file into exactly what RouteLab 1 wrote: the v1 tables and user_version 1.
      RawDb raw(path);
      raw.exec(std::string("DROP TABLE queue; ") + kDropV3 + "PRAGMA user_version = 1");
      QCOMPARE(raw.text("SELECT count(*) FROM sqlite_master WHERE name = 'queue'"), std::string("0"));
    }
    RunStore store(path, /*mark_crashed=*/false);
    const auto run = store.run(id);
    QVERIFY(run.has_value());
    QCOMPARE(run->name, std::string("old"));
    QCOMPARE(run->tags, std::string("a,b"));
    QCOMPARE(run->notes, std::string("kept"));
    QCOMPARE(run->status, RunStatus::Stopped);
    QCOMPARE(run->message, std::string("by hand"));
    QCOMPARE(run->last_step, std::int64_t{1});
    QVERIFY(run->checkpoint_step.has_value());
    QCOMPARE(*run->checkpoint_step, std::int64_t{1});
    QCOMPARE(store.metric(id, "train/loss").size(), std::size_t{1});
    QCOMPARE(store.checkpoints(id).size(), std::size_t{1});
    QVERIFY(store.queue_items().empty());
    RawDb raw(path);
    QCOMPARE(raw.text("PRAGMA user_version"), std::to_string(RunStore::kSchemaVersion));
    store.enqueue(R"({"preset":"tiny"})");
    QCOMPARE(store.queue_items().size(), std::size_t{1});
  }

  void migratesV2StoreToLeasesAndHashes() {
    const std::string path = db_path();
    std::int64_t id = 0;
    {
      RunStore store(path);
      id = store.create_run(sample_run("v2"));
      store.insert_checkpoint(id, {1, "/tmp/ckpt-1.pt", 123, 12.0, 7u});
      store.set_status(id, RunStatus::Stopped, "by hand");
    }
    {
      RawDb raw(path);
      raw.exec(std::string(kDropV3) + "PRAGMA user_version = 2");
    }
    RunStore store(path, /*mark_crashed=*/false);
    QCOMPARE(store.run(id)->name, std::string("v2"));
    QCOMPARE(store.run(id)->status, RunStatus::Stopped);
    QVERIFY(!store.lease(id).has_value());
    QVERIFY(!store.latest_checkpoint(id)->crc32.has_value());  // no hash was recorded before v3
    const auto token = store.acquire_lease(id);
    QCOMPARE(store.lease(id)->token, token);
    QCOMPARE(RawDb(path).text("PRAGMA user_version"), std::to_string(RunStore::kSchemaVersion));
  }

  // Schema v4: the tokenizer each run trained with, once per content.
  void migratesV3StoreToStoredTokenizers() {
    const std::string path = db_path();
    std::int64_t id = 0;
    {
      RunStore store(path);
      id = store.create_run(sample_run("v3"));
      store.insert_checkpoint(id, {1, "/tmp/ckpt-1.pt", 123, 12.0, 7u});
    }
    RawDb(path).exec(std::string(kDropV4) + "PRAGMA user_version = 3");
    RunStore store(path, /*mark_crashed=*/false);
    QCOMPARE(store.run(id)->name, std::string("v3"));
    QCOMPARE(store.run_tokenizer(id), std::string());  // runs of v3 name none
    QCOMPARE(*store.latest_checkpoint(id)->crc32, 7u);
    auto next = sample_run("v4");
    next.tokenizer_json = R"({"kind":"byte"})";
    QCOMPARE(store.run_tokenizer(store.create_run(next)), next.tokenizer_json);
    QCOMPARE(RawDb(path).text("PRAGMA user_version"), std::to_string(RunStore::kSchemaVersion));
  }

  /// v5: a data-parallel run's backend beside its world size; runs of v4 read with none, and a resume on another
  /// number of ranks patches both.
  void migratesV4StoreToDataParallelRuns() {
    const std::string path = db_path();
    std::int64_t id = 0;
    {
      RunStore store(path);
      id = store.create_run(sample_run("v4"));
    }
    RawDb(path).exec(std::string(kDropV5) + "PRAGMA user_version = 4");
    RunStore store(path, /*mark_crashed=*/false);
    QCOMPARE(store.run(id)->backend, std::string());  // its world size stays as written (sample_run's 2)
    QCOMPARE(store.run(id)->world_size, 2);
    auto wide = sample_run("wide");
    wide.world_size = 4;
    wide.backend = "gloo";
    const auto wide_id = store.create_run(wide);
    QCOMPARE(store.run(wide_id)->backend, std::string("gloo"));
    QCOMPARE(store.run(wide_id)->world_size, 4);
    RunPatch patch;
    patch.world_size = 2;
    patch.backend = "nccl";
    store.patch_run(wide_id, patch);
    QCOMPARE(store.run(wide_id)->backend, std::string("nccl"));
    QCOMPARE(store.run(wide_id)->world_size, 2);
    QCOMPARE(RawDb(path).text("PRAGMA user_version"), std::to_string(RunStore::kSchemaVersion));
  }

  /// v6: analyses computed from a checkpoint, kept by kind and key; a v5 store gains the table with its runs intact.
  /// Replacing keeps one document a key; a resume drops the analyses of the steps it trains again; deleting the run
  /// drops the rest.
  void migratesV5StoreToStoredAnalyses() {
    const std::string path = db_path();
    std::int64_t id = 0;
    {
      RunStore store(path);
      id = store.create_run(sample_run("v5"));
    }
    RawDb(path).exec(std::string(kDropV6) + "PRAGMA user_version = 5");
    RunStore store(path, /*mark_crashed=*/false);
    QCOMPARE(store.run(id)->name, std::string("v5"));
    QVERIFY(!store.analysis(id, "routing-breakdown", "k1").has_value());
    QVERIFY(store.put_analysis(id, "routing-breakdown", "k1", 100, R"({"a":1})"));
    QVERIFY(store.put_analysis(id, "routing-breakdown", "k2", 200, R"({"a":2})"));
    QVERIFY(store.put_analysis(id, "routing-breakdown", "k1", 100, R"({"a":3})"));  // replaced
    QCOMPARE(store.analysis(id, "routing-breakdown", "k1").value_or(""), std::string(R"({"a":3})"));
    QVERIFY(!store.analysis(id, "other-kind", "k1").has_value());
    QCOMPARE(RawDb(path).text("SELECT COUNT(*) FROM analyses"), std::string("2"));
    store.truncate_after(id, 150);  // a resume from step 150 trains step 200 again
    QVERIFY(store.analysis(id, "routing-breakdown", "k1").has_value());
    QVERIFY(!store.analysis(id, "routing-breakdown", "k2").has_value());
    store.delete_run(id);
    QCOMPARE(RawDb(path).text("SELECT COUNT(*) FROM analyses"), std::string("0"));
    QCOMPARE(RawDb(path).text("PRAGMA user_version"), std::to_string(RunStore::kSchemaVersion));
  }

  /// A store of an older schema where it cannot be written (an archive, a colleague's folder on a read-only mount):
  /// read through a copy in memory upgraded there, writes refused naming the file, the file left byte for byte.
  void readOnlyStoreOfAnOlderSchemaIsUpgradedInMemory() {
    const fs::path home = dir_.filePath("old-home").toStdString(), view = dir_.filePath("old-view").toStdString();
    fs::create_directories(home);
    const std::string written = (home / "runs.sqlite").string();
    std::int64_t id = 0;
    {
      RunStore store(written);
      id = store.create_run(sample_run("archived"));
      store.insert_metrics(id, {{"train/loss", 1, 10.0, 2.5}, {"train/loss", 2, 11.0, 2.25}});
      store.insert_checkpoint(id, {2, "/tmp/ckpt-2.pt", 123, 12.0, std::nullopt});
      store.set_status(id, RunStatus::Finished, "");
    }
    RawDb(written).exec(std::string(kDropV3) + "PRAGMA user_version = 2");  // before leases, CRCs and tokenizers
    const ReadOnlyView read_only(home, view, "runs.sqlite");
    if (!read_only.made()) QSKIP("running as root where a read-only bind mount is not allowed");
    const std::string db = (view / "runs.sqlite").string();
    const std::string before = read_bytes(db);
    {
      RunStore store(db);
      QVERIFY(store.read_only());
      QCOMPARE(store.list_runs().size(), std::size_t{1});
      QCOMPARE(store.run(id)->name, std::string("archived"));
      QCOMPARE(store.run(id)->status, RunStatus::Finished);
      QCOMPARE(store.metric(id, "train/loss").size(), std::size_t{2});
      QCOMPARE(store.checkpoints(id).size(), std::size_t{1});
      QVERIFY(!store.checkpoints(id).front().crc32.has_value());
      QCOMPARE(store.run_tokenizer(id), std::string());  // a table of version 4, read from the copy
      QVERIFY(!store.analysis(id, "routing-breakdown", "k").has_value());   // and one of version 6
      QVERIFY(!store.put_analysis(id, "routing-breakdown", "k", 2, "{}"));  // kept nowhere, refused quietly
      const auto create = error_of<std::exception>([&] { store.create_run(sample_run()); });
      const auto insert = error_of<std::exception>([&] { store.insert_metrics(id, {{"train/loss", 3, 12.0, 2.0}}); });
      for (const auto& refused : {create, insert})
        QVERIFY2(refused.find(db) != std::string::npos && refused.find("readonly") != std::string::npos,
                 refused.c_str());
    }
    QVERIFY(read_bytes(db) == before);
    QVERIFY(!fs::exists(db + "-wal"));
  }
};

}  // namespace test_store_migrations

ROUTELAB_TEST_SUITE(test_store_migrations, TestStoreMigrations)
#include "test_store_migrations.moc"
