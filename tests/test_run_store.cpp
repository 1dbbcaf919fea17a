// Tests of the run store: round trips of every table, NaN/Inf, list aggregates, crash marking, refusal of
// foreign or newer files (left untouched), cascades and truncation. StoreWriter: test_store_writer.cpp; migrations
// of earlier schemas: test_store_migrations.cpp.
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

#include "core/store/long_run.h"
#include "core/store/metric_cache.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "core/util/logging.h"
#include "tests/store_test_support.h"
#include "tests/suite.h"

namespace test_run_store {

using namespace routelab;
using namespace routelab::test;

class TestRunStore : public QObject {
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

  void createsNewStore_data() {
    QTest::addColumn<QString>("relative_path");
    QTest::addColumn<bool>("empty_file_first");
    QTest::newRow("missing file") << "runs.sqlite" << false;
    QTest::newRow("missing folders") << "a/b/c/runs.sqlite" << false;
    QTest::newRow("empty file") << "runs.sqlite" << true;
  }

  void createsNewStore() {
    QFETCH(QString, relative_path);
    QFETCH(bool, empty_file_first);
    const std::string path = dir_->filePath(relative_path).toStdString();
    if (empty_file_first) std::ofstream(path, std::ios::binary).flush();
    {
      RunStore store(path);
      QCOMPARE(store.path(), path);
      QVERIFY(store.list_runs().empty());
      store.create_run(sample_run());
    }
    RawDb raw(path);
    QCOMPARE(raw.integer("PRAGMA application_id"), 0x524C4142LL);
    QCOMPARE(raw.integer("PRAGMA user_version"), static_cast<long long>(RunStore::kSchemaVersion));
    QCOMPARE(raw.text("PRAGMA journal_mode"), std::string("wal"));
    for (const char* table : {"runs", "metrics", "routing", "evals", "checkpoints", "probes"})
      QVERIFY2(raw.integer(std::string("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '") +
                           table + "'") == 1,
               table);
    QCOMPARE(raw.integer("SELECT count(*) FROM sqlite_master WHERE name = 'metrics_run_key_step'"), 1LL);
    // Reopening a current store is not a migration and keeps the data.
    RunStore again(path);
    QCOMPARE(again.list_runs().size(), std::size_t(1));
  }

  void runRoundTrip() {
    RunStore store(db_path());
    const double before = QDateTime::currentMSecsSinceEpoch() / 1000.0;
    NewRun parent_new = sample_run("parent");
    const auto parent = store.create_run(parent_new);
    NewRun n = sample_run("child");
    n.preset = "";
    n.qt_version = "";
    n.parent_run_id = parent;
    n.resumed_from_step = 1200;
    n.seed = -7;
    const auto id = store.create_run(n);
    QVERIFY(id > parent);

    const auto r = store.run(id);
    QVERIFY(r.has_value());
    QCOMPARE(r->id, id);
    QCOMPARE(r->name, n.name);
    QCOMPARE(r->arch, n.arch);
    QCOMPARE(r->preset, n.preset);
    QCOMPARE(r->config_json, n.config_json);
    QCOMPARE(r->config_hash, n.config_hash);
    QCOMPARE(r->seed, n.seed);
    QCOMPARE(r->device, n.device);
    QCOMPARE(r->routelab_version, n.routelab_version);
    QCOMPARE(r->torch_version, n.torch_version);
    QCOMPARE(r->qt_version, n.qt_version);
    QCOMPARE(r->status, RunStatus::Running);
    QCOMPARE(r->message, std::string());
    QVERIFY(r->created_at >= before - 1 && r->created_at <= before + 60);
    QCOMPARE(r->heartbeat_at, r->created_at);
    QCOMPARE(r->ended_at, 0.0);
    QCOMPARE(r->parent_run_id, std::optional<std::int64_t>(parent));
    QCOMPARE(r->resumed_from_step, std::optional<std::int64_t>(1200));
    QCOMPARE(r->total_steps, n.total_steps);
    QCOMPARE(r->last_step, std::int64_t(0));
    QCOMPARE(r->world_size, 2);
    QCOMPARE(r->tags, std::string());
    QCOMPARE(r->notes, std::string());
    QVERIFY(!r->archived);
    QVERIFY(!r->last_train_loss && !r->last_val_loss && !r->best_val_loss);

    const auto p = store.run(parent);
    QVERIFY(p && !p->parent_run_id && !p->resumed_from_step);
    QVERIFY(!store.run(id + 100).has_value());

    const auto all = store.list_runs();
    QCOMPARE(all.size(), std::size_t(2));
    QCOMPARE(all[0].id, id);  // newest first
    QCOMPARE(all[1].id, parent);
    QCOMPARE(all[0].config_json, n.config_json);
  }

  void statusWords_data() {
    QTest::addColumn<int>("status");
    QTest::addColumn<QString>("word");
    QTest::newRow("running") << int(RunStatus::Running) << "running";
    QTest::newRow("finished") << int(RunStatus::Finished) << "finished";
    QTest::newRow("failed") << int(RunStatus::Failed) << "failed";
    QTest::newRow("stopped") << int(RunStatus::Stopped) << "stopped";
    QTest::newRow("crashed") << int(RunStatus::Crashed) << "crashed";
  }

  void statusWords() {
    QFETCH(int, status);
    QFETCH(QString, word);
    const auto s = static_cast<RunStatus>(status);
    QCOMPARE(QString::fromStdString(to_string(s)), word);
    QCOMPARE(parse_run_status(word.toStdString()), s);

    RunStore store(db_path());
    const auto id = store.create_run(sample_run());
    store.set_status(id, s, "because");
    const auto r = store.run(id);
    QCOMPARE(r->status, s);
    RawDb raw(db_path());
    QCOMPARE(QString::fromStdString(raw.text("SELECT status FROM runs WHERE id = " + std::to_string(id))), word);
  }

  void unknownStatusWordThrows() {
    bool threw = false;
    try {
      parse_run_status("exploded");
    } catch (const StoreError& e) {
      threw = std::string(e.what()).find("exploded") != std::string::npos;
    }
    QVERIFY(threw);
  }

  void setStatusEndsAndResumes() {
    RunStore store(db_path());
    const auto id = store.create_run(sample_run());
    store.set_status(id, RunStatus::Failed, "CUDA out of memory");
    auto r = store.run(id);
    QCOMPARE(r->status, RunStatus::Failed);
    QCOMPARE(r->message, std::string("CUDA out of memory"));
    QVERIFY(r->ended_at >= r->created_at);

    const double old_beat = r->heartbeat_at;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    store.set_status(id, RunStatus::Running);  // resume
    r = store.run(id);
    QCOMPARE(r->status, RunStatus::Running);
    QCOMPARE(r->message, std::string());
    QCOMPARE(r->ended_at, 0.0);
    QVERIFY(r->heartbeat_at > old_beat);

    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    store.heartbeat(id);
    QVERIFY(store.run(id)->heartbeat_at > r->heartbeat_at);

    bool threw = false;
    try {
      store.set_status(id + 1, RunStatus::Finished);
    } catch (const StoreError& e) {
      threw = std::string(e.what()).find(db_path()) != std::string::npos;
    }
    QVERIFY(threw);
  }

  void childRowsRoundTrip() {
    RunStore store(db_path());
    const auto id = store.create_run(sample_run());
    const auto other = store.create_run(sample_run("other"));

    store.insert_metrics(id, {{"train/loss", 1, 1700000000.25, 4.5},
                              {"train/lr", 1, 1700000000.25, 3e-4},
                              {"train/loss", 2, 1700000001.5, 4.25},
                              {"val/loss", 2, 1700000002.0, 4.75}});
    store.insert_metrics(other, {{"train/loss", 1, 1.0, 9.0}});
    const auto loss = store.metric(id, "train/loss");
    QCOMPARE(loss.size(), std::size_t(2));
    QCOMPARE(loss[0].step, std::int64_t(1));
    QCOMPARE(loss[0].wall_time, 1700000000.25);
    QCOMPARE(loss[0].value, 4.5);
    QCOMPARE(loss[1].step, std::int64_t(2));
    QCOMPARE(loss[1].value, 4.25);
    QCOMPARE(store.metric(id, "train/loss", 1).size(), std::size_t(1));
    QCOMPARE(store.metric(id, "train/lr")[0].value, 3e-4);
    QVERIFY(store.metric(id, "no/such").empty());
    QCOMPARE(store.metric_keys(id), (std::vector<std::string>{"train/loss", "train/lr", "val/loss"}));

    store.insert_routing(id, {{10, 0, 0.125, 0.4, 0.01, 512, 128}, {10, 1, 0.25, 0.5, 0.02, 512, 256},
                              {20, 0, 0.5, 0.6, 0.03, 1024, 512}});
    const auto routing = store.routing(id);
    QCOMPARE(routing.size(), std::size_t(3));
    QCOMPARE(routing[1].step, std::int64_t(10));
    QCOMPARE(routing[1].layer, 1);
    QCOMPARE(routing[1].routed_fraction, 0.25);
    QCOMPARE(routing[1].gate_mean, 0.5);
    QCOMPARE(routing[1].aux_loss, 0.02);
    QCOMPARE(routing[1].tokens_attn, std::int64_t(512));
    QCOMPARE(routing[1].tokens_mlp, std::int64_t(256));
    QCOMPARE(store.routing(id, 10).size(), std::size_t(1));
    QVERIFY(store.routing(other).empty());

    store.insert_eval(id, {100, "val", 3.5, std::exp(3.5), 1.25, R"({"acc":0.5})"});
    store.insert_eval(id, {100, "test", 3.75, std::exp(3.75), 1.5, "{}"});
    const auto evals = store.evals(id);
    QCOMPARE(evals.size(), std::size_t(2));
    QCOMPARE(evals[0].split, std::string("val"));
    QCOMPARE(evals[0].loss, 3.5);
    QCOMPARE(evals[0].ppl, std::exp(3.5));
    QCOMPARE(evals[0].bpc, 1.25);
    QCOMPARE(evals[0].extra_json, std::string(R"({"acc":0.5})"));
    QCOMPARE(evals[1].split, std::string("test"));

    QVERIFY(!store.latest_checkpoint(id));
    store.insert_checkpoint(id, {500, "/ckpt/run-1/step-500.pt", 123456789012, 1700000100.5, std::nullopt});
    store.insert_checkpoint(id, {1000, "/ckpt/run-1/step-1000.pt", 42, 1700000200.0, std::nullopt});
    const auto checkpoints = store.checkpoints(id);
    QCOMPARE(checkpoints.size(), std::size_t(2));
    QCOMPARE(checkpoints[0].path, std::string("/ckpt/run-1/step-500.pt"));
    QCOMPARE(checkpoints[0].bytes, std::int64_t(123456789012));
    QCOMPARE(checkpoints[0].created_at, 1700000100.5);
    const auto latest = store.latest_checkpoint(id);
    QVERIFY(latest);
    QCOMPARE(latest->step, std::int64_t(1000));
    QCOMPARE(latest->path, std::string("/ckpt/run-1/step-1000.pt"));

    const std::string probe_json = R"({"tokens":["T","h","e"],"layers":[[1,0,1],[0,0,1]]})";
    store.insert_probe(id, {100, probe_json});
    const auto probes = store.probes(id);
    QCOMPARE(probes.size(), std::size_t(1));
    QCOMPARE(probes[0].step, std::int64_t(100));
    QCOMPARE(probes[0].json, probe_json);
  }

  void sqliteTurnsBoundNanIntoNull() {
    // Why the store writes NaN as text: SQLite itself stores a bound NaN as NULL.
    RawDb raw(":memory:");
    raw.exec("CREATE TABLE t (v REAL)");
    sqlite3_stmt* stmt = nullptr;
    QCOMPARE(sqlite3_prepare_v2(raw.handle(), "INSERT INTO t VALUES (?)", -1, &stmt, nullptr), SQLITE_OK);
    sqlite3_bind_double(stmt, 1, kNan);
    QCOMPARE(sqlite3_step(stmt), SQLITE_DONE);
    sqlite3_finalize(stmt);
    QCOMPARE(raw.text("SELECT typeof(v) FROM t"), std::string("null"));
  }

  void nonFiniteValuesRoundTrip_data() {
    QTest::addColumn<double>("value");
    QTest::addColumn<QString>("stored_type");
    QTest::newRow("nan") << kNan << "text";
    QTest::newRow("+inf") << kInf << "real";
    QTest::newRow("-inf") << -kInf << "real";
    QTest::newRow("max") << std::numeric_limits<double>::max() << "real";
    QTest::newRow("denormal") << std::numeric_limits<double>::denorm_min() << "real";
    QTest::newRow("integral") << 2.0 << "real";
    QTest::newRow("pi") << 3.141592653589793 << "real";
  }

  void nonFiniteValuesRoundTrip() {
    QFETCH(double, value);
    QFETCH(QString, stored_type);
    std::int64_t id = 0;
    {
      RunStore store(db_path());
      id = store.create_run(sample_run());
      store.insert_metrics(id, {{"train/loss", 1, 1700000000.0, value}});
      store.insert_routing(id, {{1, 0, value, value, value, 1, 2}});
      store.insert_eval(id, {1, "val", value, value, value, "{}"});
    }
    RunStore store(db_path());  // read back through a fresh connection
    const auto m = store.metric(id, "train/loss");
    QCOMPARE(m.size(), std::size_t(1));
    QVERIFY2(same(m[0].value, value), std::to_string(m[0].value).c_str());
    QCOMPARE(std::signbit(m[0].value), std::signbit(value));
    const auto rt = store.routing(id);
    QCOMPARE(rt.size(), std::size_t(1));
    QVERIFY(same(rt[0].routed_fraction, value) && same(rt[0].gate_mean, value) && same(rt[0].aux_loss, value));
    const auto ev = store.evals(id);
    QCOMPARE(ev.size(), std::size_t(1));
    QVERIFY(same(ev[0].loss, value) && same(ev[0].ppl, value) && same(ev[0].bpc, value));
    const auto r = store.run(id);
    QVERIFY(r->last_train_loss && same(*r->last_train_loss, value));

    RawDb raw(db_path());
    QCOMPARE(QString::fromStdString(raw.text("SELECT typeof(value) FROM metrics")), stored_type);
    QCOMPARE(QString::fromStdString(raw.text("SELECT typeof(loss) FROM evals")), stored_type);
  }

  void listRunsAggregates() {
    RunStore store(db_path());
    const auto a = store.create_run(sample_run("a"));
    const auto empty = store.create_run(sample_run("empty"));
    const auto diverged = store.create_run(sample_run("diverged"));
    store.insert_metrics(a, {{"train/loss", 1, 0, 3.0},
                             {"train/loss", 2, 0, 2.0},
                             {"train/loss", 3, 0, 1.5},
                             {"val/loss", 1, 0, 2.5},
                             {"val/loss", 2, 0, kNan},
                             {"val/loss", 3, 0, 2.75},
                             {"train/lr", 9, 0, 1e-3}});  // another key does not move last_step
    store.insert_metrics(diverged, {{"train/loss", 7, 0, kNan}, {"val/loss", 7, 0, kNan}});

    const auto runs = store.list_runs();
    QCOMPARE(runs.size(), std::size_t(3));
    QCOMPARE(runs[0].id, diverged);
    QCOMPARE(runs[1].id, empty);
    QCOMPARE(runs[2].id, a);

    const RunRecord& ra = runs[2];
    QCOMPARE(ra.last_step, std::int64_t(3));
    QCOMPARE(ra.last_train_loss, std::optional<double>(1.5));
    QCOMPARE(ra.last_val_loss, std::optional<double>(2.75));
    QCOMPARE(ra.best_val_loss, std::optional<double>(2.5));

    const RunRecord& re = runs[1];
    QCOMPARE(re.last_step, std::int64_t(0));
    QVERIFY(!re.last_train_loss && !re.last_val_loss && !re.best_val_loss);

    const RunRecord& rd = runs[0];
    QCOMPARE(rd.last_step, std::int64_t(7));
    QVERIFY(rd.last_train_loss && std::isnan(*rd.last_train_loss));
    QVERIFY(rd.last_val_loss && std::isnan(*rd.last_val_loss));
    QVERIFY(!rd.best_val_loss);  // NaN is never the best

    // run() fills the same aggregates.
    const auto single = store.run(a);
    QCOMPARE(single->best_val_loss, std::optional<double>(2.5));
    QCOMPARE(single->last_step, std::int64_t(3));
  }

  void staleRunIsMarkedCrashed() {
    std::int64_t stale = 0, fresh = 0, finished = 0;
    {
      RunStore store(db_path());
      stale = store.create_run(sample_run("stale"));
      fresh = store.create_run(sample_run("fresh"));
      finished = store.create_run(sample_run("finished"));
      store.set_status(finished, RunStatus::Finished);
    }
    {
      // The process of `stale` and `finished` died an hour ago.
      RawDb raw(db_path());
      raw.exec("UPDATE runs SET heartbeat_at = heartbeat_at - 3600 WHERE id IN (" + std::to_string(stale) + ", " +
               std::to_string(finished) + ")");
    }
    RunStore store(db_path());  // mark_crashed = true
    const auto s = store.run(stale);
    QCOMPARE(s->status, RunStatus::Crashed);
    QVERIFY2(QString::fromStdString(s->message)
                 .contains(QRegularExpression("^no heartbeat since \\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d: the "
                                              "process ended without recording a final status$")),
             s->message.c_str());
    QVERIFY(s->ended_at > 0);
    QCOMPARE(store.run(fresh)->status, RunStatus::Running);
    QCOMPARE(store.run(finished)->status, RunStatus::Finished);

    // A store opened with mark_crashed = false leaves stale runs alone.
    {
      RawDb raw(db_path());
      raw.exec("UPDATE runs SET heartbeat_at = heartbeat_at - 3600 WHERE id = " + std::to_string(fresh));
    }
    RunStore quiet(db_path(), /*mark_crashed=*/false);
    QCOMPARE(quiet.run(fresh)->status, RunStatus::Running);
    QCOMPARE(quiet.mark_stale_runs_crashed(), 1);
    QCOMPARE(quiet.run(fresh)->status, RunStatus::Crashed);

    // A heartbeat older than 0 s is stale once time has moved on.
    const auto live = store.create_run(sample_run("live"));
    QCOMPARE(store.mark_stale_runs_crashed(3600.0), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    QCOMPARE(store.mark_stale_runs_crashed(0.0), 1);
    QCOMPARE(store.run(live)->status, RunStatus::Crashed);
    QCOMPARE(store.mark_stale_runs_crashed(0.0), 0);
  }

  void refusesForeignFile_data() {
    QTest::addColumn<QString>("kind");
    QTest::addColumn<QString>("expected");
    QTest::newRow("text file") << "text" << "not a RouteLab run store (it is not an SQLite database)";
    QTest::newRow("foreign database") << "foreign"
                                      << "not a RouteLab run store (it is an SQLite database of another application)";
    QTest::newRow("other application id") << "app_id" << "not a RouteLab run store";
    QTest::newRow("newer schema") << "newer"
                                  << "schema version 99 is newer than this RouteLab supports (6); upgrade RouteLab";
  }
  void refusesForeignFile() {
    QFETCH(QString, kind);
    QFETCH(QString, expected);
    const std::string path = db_path();
    if (kind == "text") {
      std::ofstream out(path, std::ios::binary);
      for (int i = 0; i < 200; ++i) out << "step " << i << ", loss 4.2 - notes kept in a text file\n";
    } else if (kind == "foreign") {
      RawDb raw(path);
      raw.exec("CREATE TABLE contacts (name TEXT, phone TEXT); INSERT INTO contacts VALUES ('Ada', '123')");
    } else if (kind == "app_id") {
      RawDb raw(path);
      raw.exec("PRAGMA application_id = 1234; PRAGMA user_version = 1");
    } else {
      {
        RunStore store(path);
        store.create_run(sample_run());
      }
      RawDb raw(path);
      raw.exec("PRAGMA user_version = 99");
    }
    const std::string before = read_bytes(path);
    QVERIFY(!before.empty());
    const QStringList files_before = QDir(dir_->path()).entryList(QDir::Files);

    QString message;
    try {
      RunStore store(path);
    } catch (const StoreError& e) {
      message = QString::fromUtf8(e.what());
    }
    QVERIFY2(!message.isEmpty(), "no StoreError");
    QVERIFY2(message.startsWith(QString::fromStdString(path) + ": "), qPrintable(message));
    QVERIFY2(message.contains(expected), qPrintable(message));

    QVERIFY(read_bytes(path) == before);  // byte for byte
    QCOMPARE(QDir(dir_->path()).entryList(QDir::Files), files_before);

    // StoreWriter refuses it the same way.
    bool writer_threw = false;
    try {
      StoreWriter writer(path, 1);
    } catch (const StoreError& e) {
      writer_threw = QString::fromUtf8(e.what()).contains(expected);
    }
    QVERIFY(writer_threw);
    QVERIFY(read_bytes(path) == before);
  }

  void refusesFolder() {
    bool threw = false;
    try {
      RunStore store(dir_->path().toStdString());
    } catch (const StoreError& e) {
      threw = std::string(e.what()).find(dir_->path().toStdString()) == 0;
    }
    QVERIFY(threw);
  }

  void deleteRunCascades() {
    RunStore store(db_path());
    const auto doomed = store.create_run(sample_run("doomed"));
    const auto kept = store.create_run(sample_run("kept"));
    NewRun child_new = sample_run("resumed");
    child_new.parent_run_id = doomed;
    const auto child = store.create_run(child_new);
    for (auto id : {doomed, kept}) {
      store.insert_metrics(id, {{"train/loss", 1, 0, 1.0}, {"val/loss", 1, 0, 2.0}});
      store.insert_routing(id, {{1, 0, 0.5, 0.5, 0.0, 8, 4}});
      store.insert_eval(id, {1, "val", 2.0, 7.4, 1.0, "{}"});
      store.insert_checkpoint(id, {1, "/c/step-1.pt", 10, 0.0, std::nullopt});
      store.insert_probe(id, {1, "{}"});
    }
    store.delete_run(doomed);

    QVERIFY(!store.run(doomed));
    QCOMPARE(store.list_runs().size(), std::size_t(2));
    RawDb raw(db_path());
    for (const char* table : {"metrics", "routing", "evals", "checkpoints", "probes"}) {
      QVERIFY2(raw.integer(std::string("SELECT count(*) FROM ") + table + " WHERE run_id = " +
                           std::to_string(doomed)) == 0,
               table);
      QVERIFY2(raw.integer(std::string("SELECT count(*) FROM ") + table + " WHERE run_id = " +
                           std::to_string(kept)) > 0,
               table);
    }
    QCOMPARE(store.metric(kept, "train/loss").size(), std::size_t(1));
    QCOMPARE(store.probes(kept).size(), std::size_t(1));
    // A run resumed from the deleted one survives and forgets its parent.
    const auto c = store.run(child);
    QVERIFY(c.has_value());
    QVERIFY(!c->parent_run_id);

    bool threw = false;
    try {
      store.delete_run(doomed);
    } catch (const StoreError&) {
      threw = true;
    }
    QVERIFY(threw);
  }

  void truncateAfter() {
    RunStore store(db_path());
    const auto id = store.create_run(sample_run());
    const auto other = store.create_run(sample_run("other"));
    for (auto run : {id, other}) {
      for (std::int64_t step = 1; step <= 10; ++step) {
        store.insert_metrics(run, {{"train/loss", step, 0, 1.0 / step}});
        store.insert_routing(run, {{step, 0, 0.5, 0.5, 0.0, 8, 4}});
        store.insert_eval(run, {step, "val", 1.0, 2.7, 1.0, "{}"});
        store.insert_checkpoint(run, {step, "/c/" + std::to_string(step), 1, 0.0, std::nullopt});
        store.insert_probe(run, {step, "{}"});
      }
    }
    store.truncate_after(id, 5);
    QCOMPARE(store.metric(id, "train/loss").size(), std::size_t(5));
    QCOMPARE(store.metric(id, "train/loss").back().step, std::int64_t(5));
    QCOMPARE(store.routing(id).size(), std::size_t(5));
    QCOMPARE(store.evals(id).size(), std::size_t(5));
    QCOMPARE(store.checkpoints(id).size(), std::size_t(5));
    QCOMPARE(store.latest_checkpoint(id)->step, std::int64_t(5));
    QCOMPARE(store.probes(id).size(), std::size_t(5));
    QCOMPARE(store.run(id)->last_step, std::int64_t(5));
    QCOMPARE(store.metric(other, "train/loss").size(), std::size_t(10));  // other runs untouched
    QCOMPARE(store.probes(other).size(), std::size_t(10));
  }

  void metricCacheReadsOnlyNewRows() {
    // A cached series equals a direct read after every change to the store: rows appended (only they and the last
    // step's rows are read again), a step logged twice, NaN values, a resume's truncation with the steps trained
    // again (other times: the series is read whole), and a truncation not yet trained again.
    RunStore store(db_path());
    const auto id = store.create_run(sample_run());
    MetricSeriesCache cache;
    const auto add = [&](std::int64_t from, std::int64_t to, double time) {
      for (std::int64_t step = from; step <= to; ++step) {
        const auto s = static_cast<double>(step);
        store.insert_metrics(id, {{"train/loss", step, time + s, 1.0 / s}});
      }
    };
    const auto same = [&] {
      const auto direct = store.metric(id, "train/loss");
      const auto& cached = cache.series(store, id, "train/loss");
      if (direct.size() != cached.size()) return false;
      for (std::size_t i = 0; i < direct.size(); ++i) {
        const double a = direct[i].value, b = cached[i].value;
        const bool value = a == b || (std::isnan(a) && std::isnan(b));
        if (direct[i].step != cached[i].step || direct[i].wall_time != cached[i].wall_time || !value) return false;
      }
      return true;
    };
    add(1, 100, 0);
    QVERIFY(same());
    QCOMPARE(cache.rows_read(), std::int64_t(100));
    add(101, 110, 0);
    QVERIFY(same());
    QCOMPARE(cache.rows_read(), std::int64_t(100 + 11));  // step 100 again, then the 10 new rows
    store.insert_metrics(id, {{"train/loss", 110, 500.0, std::numeric_limits<double>::quiet_NaN()}});
    QVERIFY(same());  // a second row at the last step, NaN
    QVERIFY(same());  // nothing new: the last step's two rows again
    QCOMPARE(cache.rows_read(), std::int64_t(111 + 2 + 2));
    store.truncate_after(id, 50);  // a resume from step 50 trains the steps after it again, at later times
    add(51, 120, 1000);
    QVERIFY(same());
    QCOMPARE(cache.series(store, id, "train/loss").size(), std::size_t(120));
    store.truncate_after(id, 80);
    QVERIFY(same());
    QCOMPARE(cache.series(store, id, "train/loss").back().step, std::int64_t(80));
    // At most max_runs runs are held: reading another forgets the least recently read one.
    MetricSeriesCache small(1);
    const auto other = store.create_run(sample_run("other"));
    small.series(store, id, "train/loss");
    QCOMPARE(small.runs(), std::size_t(1));
    small.series(store, other, "train/loss");
    QCOMPARE(small.runs(), std::size_t(1));
    const auto before = small.rows_read();
    small.series(store, id, "train/loss");  // forgotten: read whole again
    QCOMPARE(small.rows_read(), before + 80);
  }

  void longRunRepeatsTheLastRows() {
    // The benchmarks' long runs: the rows of the last logged step, evaluation and probe written again at later steps
    // at the run's pace, values near the stored ones; a second call goes on where the first stopped.
    RunStore store(db_path());
    const auto id = store.create_run(sample_run());
    store.insert_metrics(id, {{"train/loss", 10, 100, 3.0}, {"train/lr", 10, 100, 1e-3}, {"train/loss", 20, 110, 2.0},
                              {"train/lr", 20, 110, 1e-3}, {"val/loss", 20, 111, 2.5}});
    store.insert_routing(id, {{20, 0, 0.3, 0.4, 0.01, 10, 20}, {20, 2, 0.5, 0.6, 0.02, 30, 40}});
    store.insert_eval(id, {20, "val", 2.5, 12.2, 3.6, R"({"layers":[]})"});
    store.insert_probe(id, {20, R"({"tokens":["a"]})"});
    QVERIFY_THROWS_EXCEPTION(StoreError, LongRunExtender(store, id));  // one evaluation: no spacing, no config
    LongRunExtender extender(store, id, 0, 40);
    QCOMPARE(extender.log_every(), std::int64_t(10));  // the last two train/loss steps
    auto written = extender.extend_to(store, 100, 3);  // 3 logged steps a transaction
    QCOMPARE(written.last_step, std::int64_t(100));
    QCOMPARE(written.evals, std::int64_t(2));  // steps 60 and 100
    QCOMPARE(written.routing, std::int64_t(8 * 2));
    QCOMPARE(written.metrics, std::int64_t(8 * 2 + 2));
    const auto loss = store.metric(id, "train/loss");
    QCOMPARE(loss.size(), std::size_t(10));
    QCOMPARE(loss.back().step, std::int64_t(100));
    QCOMPARE(loss.back().wall_time, 190.0);  // one second a step, as steps 10 to 20 took
    for (const MetricPoint& p : loss)
      if (p.step > 20) QVERIFY2(std::abs(p.value - 2.0) <= 0.02 && p.value != 2.0, qPrintable(QString::number(p.step)));
    const auto val = store.metric(id, "val/loss");
    QCOMPARE(val.size(), std::size_t(3));
    QCOMPARE(val[1].step, std::int64_t(60));
    QCOMPARE(val[1].wall_time, 151.0);
    const auto routing = store.routing(id, 90);
    QCOMPARE(routing.size(), std::size_t(2));
    QCOMPARE(routing[1].layer, 2);
    QCOMPARE(routing[1].tokens_mlp, std::int64_t(40));
    QVERIFY(std::abs(routing[1].routed_fraction - 0.5) <= 0.01);
    const auto probes = store.probes(id);
    QCOMPARE(probes.size(), std::size_t(3));
    QCOMPARE(probes.back().step, std::int64_t(100));
    QCOMPARE(probes.back().json, std::string(R"({"tokens":["a"]})"));
    QCOMPARE(store.evals(id).back().extra_json, std::string(R"({"layers":[]})"));
    written = extender.extend_to(store, 145);
    QCOMPARE(written.last_step, std::int64_t(140));
    QCOMPARE(written.evals, std::int64_t(1));
    QCOMPARE(store.metric(id, "train/loss").size(), std::size_t(14));
    QCOMPARE(store.metric(id, "train/loss").back().wall_time, 230.0);
    QCOMPARE(store.evals(id).back().step, std::int64_t(140));
  }

  void patchRun() {
    RunStore store(db_path());
    const auto id = store.create_run(sample_run("before"));
    const auto other = store.create_run(sample_run("other"));

    RunPatch rename;
    rename.name = "after";
    store.patch_run(id, rename);
    auto r = store.run(id);
    QCOMPARE(r->name, std::string("after"));
    QCOMPARE(r->arch, std::string("mod"));  // unpatched fields stay

    RunPatch meta;
    meta.tags = "baseline,capacity-0.125";
    meta.notes = "router collapses after 2k steps";
    meta.resumed_from_step = 2000;
    store.patch_run(id, meta);
    r = store.run(id);
    QCOMPARE(r->name, std::string("after"));
    QCOMPARE(r->tags, std::string("baseline,capacity-0.125"));
    QCOMPARE(r->notes, std::string("router collapses after 2k steps"));
    QCOMPARE(r->resumed_from_step, std::optional<std::int64_t>(2000));
    QVERIFY(!r->archived);

    store.patch_run(id, RunPatch{});  // nothing to change

    RunPatch archive;
    archive.archived = true;
    store.patch_run(id, archive);
    QVERIFY(store.run(id)->archived);
    QCOMPARE(store.list_runs(true).size(), std::size_t(2));
    const auto visible = store.list_runs(false);
    QCOMPARE(visible.size(), std::size_t(1));
    QCOMPARE(visible[0].id, other);

    archive.archived = false;
    store.patch_run(id, archive);
    QCOMPARE(store.list_runs(false).size(), std::size_t(2));

    bool threw = false;
    try {
      store.patch_run(id + 100, rename);
    } catch (const StoreError&) {
      threw = true;
    }
    QVERIFY(threw);
  }

  void transactionRollsBack() {
    RunStore store(db_path());
    const auto id = store.create_run(sample_run());
    try {
      store.transaction([&] {
        store.insert_metrics(id, {{"train/loss", 1, 0, 1.0}});
        throw std::runtime_error("abandon");
      });
    } catch (const std::runtime_error&) {
    }
    QVERIFY(store.metric(id, "train/loss").empty());
    store.transaction([&] { store.insert_metrics(id, {{"train/loss", 1, 0, 1.0}}); });
    QCOMPARE(store.metric(id, "train/loss").size(), std::size_t(1));
  }

  // Schema v2: the run queue.
  void storesEachTokenizerOnce() {
    RunStore store(db_path());
    auto a = sample_run("a"), b = sample_run("b"), c = sample_run("c"), none = sample_run("none");
    a.tokenizer_json = b.tokenizer_json = R"({"kind":"char","vocab":[97,98]})";
    c.tokenizer_json = R"({"kind":"byte"})";
    const auto ida = store.create_run(a), idb = store.create_run(b), idc = store.create_run(c);
    const auto idn = store.create_run(none);
    QCOMPARE(store.run_tokenizer(ida), a.tokenizer_json);
    QCOMPARE(store.run_tokenizer(idb), a.tokenizer_json);
    QCOMPARE(store.run_tokenizer(idc), c.tokenizer_json);
    QCOMPARE(store.run_tokenizer(idn), std::string());
    QCOMPARE(RawDb(db_path()).text("SELECT count(*) FROM tokenizers"), std::string("2"));
    // Deleting a run keeps a tokenizer another run names.
    store.delete_run(ida);
    QCOMPARE(store.run_tokenizer(idb), a.tokenizer_json);
    auto bad = sample_run("bad");
    bad.tokenizer_json = "{not json";
    std::string error;
    try {
      store.create_run(bad);
    } catch (const StoreError& e) {
      error = e.what();
    }
    QVERIFY2(error.find("tokenizer of run 'bad' is not JSON") != std::string::npos, error.c_str());
    QCOMPARE(store.list_runs().size(), std::size_t{3});  // a, the deleted one gone; b, c, none stay
  }

  void queueKeepsOrderStateAndRequests() {
    RunStore store(db_path());
    const auto a = store.enqueue(R"({"preset":"a"})");
    const auto b = store.enqueue(R"({"preset":"b"})");
    const auto c = store.enqueue(R"({"resume":7})", QueueState::Running);
    auto items = store.queue_items();
    QCOMPARE(items.size(), std::size_t{3});
    QCOMPARE(items[0].id, a);
    QCOMPARE(items[1].id, b);
    QCOMPARE(items[2].state, QueueState::Running);
    QCOMPARE(items[2].request_json, std::string(R"({"resume":7})"));
    QVERIFY(items[0].created_at > 0);

    store.reorder_queue({c, a, b});
    items = store.queue_items();
    QCOMPARE(items[0].id, c);
    QCOMPARE(items[2].id, b);

    const auto run = store.create_run(sample_run());
    store.update_queue_item(a, QueueState::Running, run);
    store.update_queue_item(a, QueueState::Done, std::nullopt, "finished at step 30");
    auto item = store.queue_item(a);
    QVERIFY(item.has_value());
    QCOMPARE(item->state, QueueState::Done);
    QCOMPARE(item->run_id.value_or(0), run);  // kept when not given
    QCOMPARE(item->message, std::string("finished at step 30"));
    store.update_queue_item(b, QueueState::Pending, std::nullopt, "", std::string(R"({"resume":3})"));
    QCOMPARE(store.queue_item(b)->request_json, std::string(R"({"resume":3})"));

    QCOMPARE(store.fail_interrupted_queue_items("interrupted"), 1);
    QCOMPARE(store.queue_item(c)->state, QueueState::Failed);
    QCOMPARE(store.queue_item(c)->message, std::string("interrupted"));
    QCOMPARE(store.clear_finished_queue_items(), 2);
    items = store.queue_items();
    QCOMPARE(items.size(), std::size_t{1});
    QCOMPARE(items[0].id, b);
    store.remove_queue_item(b);
    QVERIFY(store.queue_items().empty());
    QVERIFY_EXCEPTION_THROWN(store.remove_queue_item(b), StoreError);
    QVERIFY_EXCEPTION_THROWN(store.reorder_queue({a}), StoreError);
    QVERIFY_EXCEPTION_THROWN(parse_queue_state("paused"), StoreError);
  }

  void deletingARunKeepsItsQueueItem() {
    RunStore store(db_path());
    const auto run = store.create_run(sample_run());
    const auto item = store.enqueue("{}", QueueState::Running);
    store.update_queue_item(item, QueueState::Done, run);
    store.delete_run(run);
    QVERIFY(!store.queue_item(item)->run_id.has_value());
  }

};

}  // namespace test_run_store

ROUTELAB_TEST_SUITE(test_run_store, TestRunStore)
#include "test_run_store.moc"
