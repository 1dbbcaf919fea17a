// Data-parallel training on c10d with Gloo: the launch variables (torchrun's, Slurm's) and their errors; the
// gradient sum when one rank's tokens never reach a parameter (two ranks as threads of this process); two ranks
// (routelab-cli train --nproc 2, or two processes given torchrun's variables by the test) store the curve, routing
// and evaluations of one process training the same global batch; rank 0 alone writes; a killed rank ends the other
// with a clear error, the store stays intact and the run resumes, on another number of ranks too; ranks of
// different configs or an uneven split are refused by name; classifiers store the run of one process too.
#include <QFileInfo>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <signal.h>
#include <sqlite3.h>

#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include <torch/torch.h>

#include "core/dist/collective.h"
#include "core/dist/grad_sync.h"
#include "core/dist/launch_env.h"
#include "core/dist/local_launch.h"
#include "core/models/registry.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"
#include "tests/suite.h"

namespace test_dist {

using namespace routelab;

namespace {

using Clock = std::chrono::steady_clock;
using routelab::test::contains;
using routelab::test::error_of;

/// SQLite's own verdict on a store file ("ok" when intact).
QString integrity(const QString& db) {
  sqlite3* handle = nullptr;
  sqlite3_open_v2(db.toUtf8().constData(), &handle, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* s = nullptr;
  QString out = "(cannot read)";
  if (sqlite3_prepare_v2(handle, "PRAGMA integrity_check", -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
    out = QString::fromUtf8(reinterpret_cast<const char*>(sqlite3_column_text(s, 0)));
  sqlite3_finalize(s);
  sqlite3_close(handle);
  return out;
}

EnvLookup lookup_in(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

/// A metric of a run as (step, value), in step order.
std::vector<std::pair<std::int64_t, double>> curve(const QString& db, std::int64_t run, const std::string& key) {
  std::vector<std::pair<std::int64_t, double>> out;
  for (const auto& p : RunStore(db.toStdString(), false).metric(run, key)) out.emplace_back(p.step, p.value);
  return out;
}

void expect_same_curve(const QString& db_a, std::int64_t run_a, const QString& db_b, std::int64_t run_b,
                       const std::string& key, double tolerance) {
  const auto a = curve(db_a, run_a, key), b = curve(db_b, run_b, key);
  QVERIFY2(!a.empty(), key.c_str());
  QCOMPARE(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    QCOMPARE(a[i].first, b[i].first);
    QVERIFY2(std::abs(a[i].second - b[i].second) <= tolerance,
             qPrintable(QString("%1 step %2: %3 vs %4").arg(key.c_str()).arg(a[i].first).arg(a[i].second, 0, 'g', 12)
                            .arg(b[i].second, 0, 'g', 12)));
  }
}

}  // namespace

class TestDist : public QObject {
  Q_OBJECT
  QTemporaryDir home_;

  QProcessEnvironment environment(const std::map<QString, QString>& extra = {}) const {
    auto env = QProcessEnvironment::systemEnvironment();
    env.insert("ROUTELAB_HOME", home_.path());
    for (const auto& [k, v] : extra) env.insert(k, v);
    return env;
  }

  std::unique_ptr<QProcess> start(const QStringList& args, const std::map<QString, QString>& extra = {}) {
    auto p = std::make_unique<QProcess>();
    p->setProcessEnvironment(environment(extra));
    p->setProcessChannelMode(QProcess::MergedChannels);
    p->start(qEnvironmentVariable("ROUTELAB_CLI"), args);
    p->waitForStarted();
    return p;
  }

  static std::pair<int, QString> finish(QProcess& p, int timeout_ms = 300000) {
    if (!p.waitForFinished(timeout_ms)) return {-1, "timed out: " + QString::fromUtf8(p.readAll())};
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2, QString::fromUtf8(p.readAll())};
  }

  std::pair<int, QString> run(const QStringList& args) { return finish(*start(args)); }

  /// A small run: dropout off, 2 sequences of 4 a step as 2 micro-batches (so one process runs the very
  /// micro-batches the two ranks split), one thread per process.
  static QStringList train_args(const QString& db, const QString& arch, int steps = 8) {
    return {"train", "--preset", "tiny", "--steps", QString::number(steps), "--db", db, "--quiet", "--threads", "1",
            "--set", "model.arch=" + arch, "--set", "model.dropout=0", "--set", "train.batch_size=4", "--set",
            "train.grad_accum=2", "--set", "train.log_every=1", "--set", "train.eval_every=4", "--set",
            "train.checkpoint_every=4", "--set", "run.dist_bucket_mb=0.02", "--set", "run.dist_timeout_s=60"};
  }

  /// Two ranks started as torchrun starts them (or srun, with `slurm`): the launch variables set by the test itself.
  std::vector<std::unique_ptr<QProcess>> start_ranks(const QStringList& args, int port, bool slurm = false) {
    std::vector<std::unique_ptr<QProcess>> ranks;
    for (int r = 0; r < 2; ++r) {
      const auto rank = QString::number(r);
      if (slurm)  // srun's variables; the rendezvous host is the first of the step's nodes
        ranks.push_back(start(args, {{"SLURM_PROCID", rank}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_LOCALID", rank},
                                     {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_TASKS_PER_NODE", "2"},
                                     {"SLURM_STEP_NODELIST", "127.0.0.1"}, {"MASTER_PORT", QString::number(port)}}));
      else
        ranks.push_back(start(args, {{"RANK", rank}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", rank},
                                     {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", QString::number(port)}}));
    }
    return ranks;
  }

  /// The single-process run of `arch` with `extra` arguments every two-rank run of them is held to (trained once per
  /// `key`).
  std::pair<QString, std::int64_t> reference(const QString& key, const QString& arch, const QStringList& extra = {}) {
    const auto db = home_.filePath("one-" + key + ".sqlite");
    if (!QFile::exists(db)) {
      const auto [code, out] = run(train_args(db, arch) + extra);
      if (code != 0) qWarning("%s", qPrintable(out));
    }
    return {db, 1};
  }

 private Q_SLOTS:
  void initTestCase() { QVERIFY2(QFile::exists(qEnvironmentVariable("ROUTELAB_CLI")), "ROUTELAB_CLI not set"); }

  void torchrunAndSlurmVariables() {
    QVERIFY(!dist_env_from(lookup_in({})));
    auto env = dist_env_from(lookup_in({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"},
                                        {"MASTER_ADDR", "10.0.0.7"}, {"MASTER_PORT", "29400"},
                                        {"TORCHELASTIC_RUN_ID", "x"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}}));
    QVERIFY(env);
    QCOMPARE(env->rank, 1);
    QCOMPARE(env->world_size, 2);
    QCOMPARE(env->master_addr, std::string("10.0.0.7"));
    QCOMPARE(env->master_port, 29400);
    QVERIFY(env->agent_store);
    QCOMPARE(env->launcher, std::string("torchrun"));
    env = dist_env_from(lookup_in({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_STEP_ID", "0"},
                                   {"SLURM_LOCALID", "1"}, {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
                                   {"SLURM_STEP_NODELIST", "gpu[003-004]"}}));
    QVERIFY(env);
    QCOMPARE(env->rank, 5);
    QCOMPARE(env->world_size, 8);
    QCOMPARE(env->local_rank, 1);
    QCOMPARE(env->local_world_size, 4);
    QCOMPARE(env->master_addr, std::string("gpu003"));
    QCOMPARE(env->master_port, 29500);
    QCOMPARE(env->launcher, std::string("slurm"));
    QVERIFY(!dist_env_from(lookup_in({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}})));  // a batch script, not srun
    QCOMPARE(first_slurm_host("node7,node8"), std::string("node7"));
    QCOMPARE(first_slurm_host("a[10,12],b1"), std::string("a10"));
    // Each error names the variable at fault.
    const std::map<std::string, std::string> good = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"},
                                                     {"MASTER_PORT", "1234"}};
    const std::vector<std::pair<std::pair<std::string, std::string>, std::string>> bad = {
        {{"RANK", "two"}, "RANK=two: not a whole number"},   {{"RANK", "2"}, "RANK=2: outside 0..1"},
        {{"MASTER_PORT", "0"}, "MASTER_PORT=0: outside"},     {{"WORLD_SIZE", "0"}, "WORLD_SIZE=0: outside"},
        {{"MASTER_ADDR", ""}, "MASTER_ADDR is not set"}};
    for (const auto& [change, expected] : bad) {
      auto vars = good;
      vars[change.first] = change.second;
      const auto message = error_of<ConfigError>([&] { dist_env_from(lookup_in(vars)); });
      QVERIFY2(contains(message, expected), qPrintable(QString::fromStdString(message)));
    }
    auto no_rank = good;
    no_rank.erase("RANK");
    QVERIFY(contains(error_of<ConfigError>([&] { dist_env_from(lookup_in(no_rank)); }), "RANK is not set"));
  }

  /// Two ranks (threads here, each its own group member over Gloo) whose models differ in the parameters their
  /// tokens reach: rank 1 never uses `skipped` in the first steps, then rank 0 skips it too; no rank uses `late`
  /// before step 2, nor ever `never`. Small buckets, sent while the backward pass runs. Every step ends on both ranks
  /// with the same summed gradients, in order, without hanging, and a parameter no rank has reached yet without a
  /// gradient, as in one process.
  void unusedParametersOnOneRankNeitherHangNorDesync() {
    const int port = free_local_port();
    std::vector<std::vector<torch::Tensor>> grads(2);  // per rank: every step's gradients, flattened
    std::vector<std::string> errors(2);
    std::mutex rng;  // the global generator: each rank draws its weights and inputs alone
    const auto rank_main = [&](int rank) {
      try {
        auto group = Collective::join(local_rank_env(rank, 2, port, "test"), torch::kCPU, "gloo", 30.0);
        std::unique_lock<std::mutex> drawing(rng);
        torch::manual_seed(5);
        torch::nn::Linear used(8, 8), skipped(8, 8), head(8, 1), late(8, 8), never(8, 8);
        std::vector<torch::Tensor> inputs;
        for (int step = 0; step < 4; ++step) {
          torch::manual_seed(100 + 10 * step + rank);
          inputs.push_back(torch::randn({4, 8}));
        }
        drawing.unlock();
        std::vector<torch::Tensor> params;
        for (auto* m : std::vector<torch::nn::Module*>{used.get(), skipped.get(), head.get(), late.get(), never.get()})
          for (const auto& p : m->parameters()) params.push_back(p);
        GradientSync sync(group, params, /*bucket_mb=*/0.0002, /*overlap=*/true);
        if (sync.buckets() < 3) throw std::runtime_error("expected at least 3 buckets");
        for (int step = 0; step < 4; ++step) {
          for (auto& p : params)
            if (p.grad().defined()) p.mutable_grad().zero_();
          auto h = used(inputs[static_cast<std::size_t>(step)]);
          const bool skips = rank == 1 ? step < 2 : step >= 3;  // step 3: rank 0 skips, rank 1 does not
          if (!skips) h = h + skipped(h);
          if (step >= 2) h = h + late(h);  // no rank reaches it before step 2; none ever reaches `never`
          sync.arm();
          head(torch::tanh(h)).sum().backward();
          sync.finish();
          // As in one process: no gradient where no rank's tokens have reached the parameter yet.
          if (late->weight.grad().defined() != (step >= 2) || never->weight.grad().defined())
            throw std::runtime_error("step " + std::to_string(step) + ": a gradient where no rank reached the "
                                     "parameter, or none where one did");
          std::vector<torch::Tensor> flat;
          for (const auto& p : params)
            flat.push_back(p.grad().defined() ? p.grad().reshape({-1}).clone() : torch::zeros({p.numel()}));
          grads[static_cast<std::size_t>(rank)].push_back(torch::cat(flat));
        }
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(rank)] = e.what();
      }
    };
    std::thread other(rank_main, 1);
    rank_main(0);
    other.join();
    QVERIFY2(errors[0].empty() && errors[1].empty(), (errors[0] + " | " + errors[1]).c_str());
    QCOMPARE(grads[0].size(), std::size_t(4));
    QCOMPARE(grads[1].size(), std::size_t(4));
    // The reference: each rank's gradients computed alone (no group), summed.
    for (int step = 0; step < 4; ++step) {
      torch::Tensor expected;
      for (int rank = 0; rank < 2; ++rank) {
        torch::manual_seed(5);
        torch::nn::Linear used(8, 8), skipped(8, 8), head(8, 1), late(8, 8), never(8, 8);
        torch::manual_seed(100 + 10 * step + rank);
        auto h = used(torch::randn({4, 8}));
        if (!(rank == 1 ? step < 2 : step >= 3)) h = h + skipped(h);
        if (step >= 2) h = h + late(h);
        head(torch::tanh(h)).sum().backward();
        std::vector<torch::Tensor> flat;
        for (auto* m : std::vector<torch::nn::Module*>{used.get(), skipped.get(), head.get(), late.get(), never.get()})
          for (const auto& p : m->parameters())
            flat.push_back(p.grad().defined() ? p.grad().reshape({-1}) : torch::zeros({p.numel()}));
        const auto local = torch::cat(flat);
        expected = expected.defined() ? expected + local : local;
      }
      const auto s = static_cast<std::size_t>(step);
      QVERIFY2(torch::equal(grads[0][s], grads[1][s]), qPrintable(QString("step %1: the ranks differ").arg(step)));
      QVERIFY2(torch::allclose(grads[0][s], expected, 1e-6, 1e-7), qPrintable(QString("step %1: not the sum").arg(step)));
    }
  }

  /// --nproc 2 of the dense model and of MoD: the curve, the evaluations and the routing of one process, one run row
  /// with world size 2, one set of checkpoints.
  void twoRanksStoreTheCurveOfOne_data() {
    QTest::addColumn<QString>("arch");
    QTest::addColumn<QStringList>("extra");
    QTest::newRow("dense") << "dense" << QStringList{};
    QTest::newRow("mod") << "mod" << QStringList{};
    // A loss mask (the copy task counts the copied half only): each rank copies its own rows to its device, the mask
    // counted over every rank's rows.
    QTest::newRow("dense-copy-task") << "dense" << QStringList{"--set", "data.source=copy"};
  }
  void twoRanksStoreTheCurveOfOne() {
    QFETCH(QString, arch);
    QFETCH(QStringList, extra);
    const QString key = QTest::currentDataTag();
    const auto [one_db, one_run] = reference(key, arch, extra);
    const auto db = home_.filePath("two-" + key + ".sqlite");
    const auto [code, out] = run(train_args(db, arch) + extra + QStringList{"--nproc", "2"});
    QVERIFY2(code == 0, qPrintable(out));
    RunStore store(db.toStdString(), false);
    const auto runs = store.list_runs(true);
    QCOMPARE(runs.size(), std::size_t(1));
    QCOMPARE(runs[0].world_size, 2);
    QCOMPARE(runs[0].status, RunStatus::Finished);
    const auto one_checkpoints = RunStore(one_db.toStdString(), false).checkpoints(one_run).size();
    QVERIFY(one_checkpoints > 0);
    QCOMPARE(store.checkpoints(runs[0].id).size(), one_checkpoints);  // rank 0's, not one set per rank
    expect_same_curve(one_db, one_run, db, runs[0].id, "train/loss", 1e-5);
    expect_same_curve(one_db, one_run, db, runs[0].id, "train/grad_norm", 1e-4);
    expect_same_curve(one_db, one_run, db, runs[0].id, "val/loss", 1e-5);
    expect_same_curve(one_db, one_run, db, runs[0].id, "train/flops_ratio", 1e-9);
    const auto routing_one = RunStore(one_db.toStdString(), false).routing(one_run);
    const auto routing_two = store.routing(runs[0].id);
    QCOMPARE(routing_two.size(), routing_one.size());
    for (std::size_t i = 0; i < routing_one.size(); ++i) {
      QCOMPARE(routing_two[i].step, routing_one[i].step);
      QCOMPARE(routing_two[i].tokens_attn, routing_one[i].tokens_attn);
      QCOMPARE(routing_two[i].tokens_mlp, routing_one[i].tokens_mlp);
      QVERIFY(std::abs(routing_two[i].routed_fraction - routing_one[i].routed_fraction) < 1e-9);
      QVERIFY(std::abs(routing_two[i].gate_mean - routing_one[i].gate_mean) < 1e-5);
    }
    QVERIFY(!curve(db, runs[0].id, "train/dist_wait_ms").empty());
  }

  /// --nproc 2 of every registered classifier: every metric one process stores (training and validation figures,
  /// the epoch's, the routing statistics and routing_change included), its routing rows and evaluations. 257 examples
  /// in steps of 2 x 16: each rank runs one of the micro-batches one process runs, and each epoch's last step holds
  /// one example, which leaves rank 1 a stand-in; 40 validation examples in batches of 16 are shared unevenly.
  void classifiersTwoRanksStoreTheRunOfOne_data() {
    QTest::addColumn<QString>("arch");
    for (const auto& id : architecture_ids(Task::Classification))
      QTest::newRow(id.c_str()) << QString::fromStdString(id);
  }
  void classifiersTwoRanksStoreTheRunOfOne() {
    QFETCH(QString, arch);
    QStringList args{"train", "--preset", "tiny", "--threads", "1", "--set", "model.arch=" + arch};
    for (const char* set : {"model.n_embd=32", "model.n_head=4", "model.n_layer=1", "model.dropout=0",
                            "data.source=entailment", "data.tokenizer=word", "data.context=48",
                            "data.task_train_examples=257", "data.task_eval_examples=40", "train.batch_size=16",
                            "train.grad_accum=2", "train.epochs=2", "train.log_every=1", "train.eval_every=4",
                            "train.checkpoint_every=4", "run.dist_bucket_mb=0.02", "run.dist_timeout_s=60"})
      args << "--set" << set;
    if (arch == "vanilla-classifier") args << "--set" << "model.pool_dropout=0";
    const auto one = home_.filePath("one-" + arch + ".sqlite"), two = home_.filePath("two-" + arch + ".sqlite");
    auto [code, out] = run(args + QStringList{"--db", one});
    QVERIFY2(code == 0, qPrintable(out));
    std::tie(code, out) = run(args + QStringList{"--db", two, "--nproc", "2"});
    QVERIFY2(code == 0, qPrintable(out));
    RunStore a(one.toStdString(), false), b(two.toStdString(), false);
    QCOMPARE(b.run(1)->world_size, 2);
    QCOMPARE(b.run(1)->status, RunStatus::Finished);
    QVERIFY2(out.contains("steps per epoch over 2 ranks (gloo), up to 16 examples each"), qPrintable(out));
    const auto keys = a.metric_keys(1);
    QVERIFY(std::find(keys.begin(), keys.end(), "train/epoch_accuracy") != keys.end());
    for (const auto& key : keys)
      if (key != "train/tokens_per_s") expect_same_curve(one, 1, two, 1, key, 1e-5);
    QCOMPARE(b.checkpoints(1).size(), a.checkpoints(1).size());
    const auto routing_one = a.routing(1), routing_two = b.routing(1);
    QCOMPARE(routing_two.size(), routing_one.size());
    for (std::size_t i = 0; i < routing_one.size(); ++i) {
      QCOMPARE(routing_two[i].step, routing_one[i].step);
      QCOMPARE(routing_two[i].tokens_mlp, routing_one[i].tokens_mlp);
      QVERIFY(std::abs(routing_two[i].routed_fraction - routing_one[i].routed_fraction) < 1e-6);
      QVERIFY(std::abs(routing_two[i].gate_mean - routing_one[i].gate_mean) < 1e-5);
    }
    const auto evals_one = a.evals(1), evals_two = b.evals(1);
    QCOMPARE(evals_two.size(), evals_one.size());
    for (std::size_t i = 0; i < evals_one.size(); ++i) {
      QCOMPARE(evals_two[i].step, evals_one[i].step);
      QVERIFY(std::abs(evals_two[i].loss - evals_one[i].loss) < 1e-5);
    }
  }

  /// Radial Networks distilled from a stored dense model (train.distill_from, the router alone training) over two
  /// ranks: each rank opens the teacher from the store, and the curve, the KL term and the evaluations are the one
  /// process's. Without Gumbel noise: each rank would draw its own for its rows, one process draws in sequence.
  void distilledRunOverTwoRanksStoresTheCurveOfOne() {
    const QStringList student{"--set", "model.gumbel_noise=false", "--set", "train.distill_from=1"};
    const auto one = home_.filePath("one-distilled.sqlite"), two = home_.filePath("two-distilled.sqlite");
    for (const auto& db : {one, two}) {  // run 1 of either store: the same teacher
      const auto [code, out] = run(train_args(db, "dense"));
      QVERIFY2(code == 0, qPrintable(out));
    }
    auto [code, out] = run(train_args(one, "radial") + student);
    QVERIFY2(code == 0, qPrintable(out));
    std::tie(code, out) = run(train_args(two, "radial") + student + QStringList{"--nproc", "2"});
    QVERIFY2(code == 0, qPrintable(out));
    const auto record = RunStore(two.toStdString(), false).run(2);
    QCOMPARE(record->world_size, 2);
    QCOMPARE(record->status, RunStatus::Finished);
    QCOMPARE(*record->parent_run_id, std::int64_t{1});
    for (const char* key : {"train/loss", "train/distill_kl", "train/grad_norm", "val/loss"})
      expect_same_curve(one, 2, two, 2, key, 1e-5);
  }

  /// Two processes given torchrun's (or srun's) variables by the test take the path --nproc takes: the same stored
  /// curve.
  void launcherVariablesTakeTheSamePath_data() {
    QTest::addColumn<bool>("slurm");
    QTest::newRow("torchrun") << false;
    QTest::newRow("srun") << true;
  }
  void launcherVariablesTakeTheSamePath() {
    QFETCH(bool, slurm);
    const auto [one_db, one_run] = reference("dense", "dense");
    const auto db = home_.filePath(slurm ? "srun.sqlite" : "torchrun.sqlite");
    auto ranks = start_ranks(train_args(db, "dense"), free_local_port(), slurm);
    for (auto& r : ranks) {
      const auto [code, out] = finish(*r);
      QVERIFY2(code == 0, qPrintable(out));
      // The log names the launcher each rank recognised (srun's rendezvous: the first host of the node list).
      QVERIFY2(out.contains(slurm ? ", slurm" : ", environment"), qPrintable(out));
    }
    expect_same_curve(one_db, one_run, db, 1, "train/loss", 1e-5);
    QCOMPARE(RunStore(db.toStdString(), false).list_runs(true).size(), std::size_t(1));
  }

  /// Killing a rank mid-run ends the other within its timeout with an error naming the failed collective. Rank 1
  /// killed: rank 0 stores the run as failed. Rank 0 killed: the run's writer is gone, so the store marks it crashed.
  /// Either way the store is intact and the run resumes to the end, on one process (saying so) or on two again.
  void aKilledRankEndsTheRunAndItResumes_data() {
    QTest::addColumn<int>("killed");
    QTest::addColumn<int>("resume_ranks");
    QTest::newRow("rank 1 killed, resumed on 1") << 1 << 1;
    QTest::newRow("rank 0 killed, resumed on 2") << 0 << 2;
  }
  void aKilledRankEndsTheRunAndItResumes() {
    QFETCH(int, killed);
    QFETCH(int, resume_ranks);
    const auto db = home_.filePath(QString("killed-%1.sqlite").arg(killed));
    auto ranks = start_ranks(train_args(db, "dense", 400), free_local_port());
    QVERIFY2(trained(db, 6), "the two ranks did not train");
    ::kill(static_cast<pid_t>(ranks[static_cast<std::size_t>(killed)]->processId()), SIGKILL);
    const auto killed_at = Clock::now();
    auto& survivor = *ranks[static_cast<std::size_t>(1 - killed)];
    const auto [code, out] = finish(survivor, 120000);
    const double took = std::chrono::duration<double>(Clock::now() - killed_at).count();
    QVERIFY2(code != 0, qPrintable(out));
    QVERIFY2(took < 60.0, qPrintable(QString("the surviving rank took %1 s to stop").arg(took)));
    QVERIFY2(out.contains(QString("rank %1 of 2 (gloo)").arg(1 - killed)) && out.contains("another rank stopped"),
             qPrintable(out));
    finish(*ranks[static_cast<std::size_t>(killed)]);
    {
      RunStore store(db.toStdString());  // marks a run whose writer is gone as crashed
      const auto record = store.run(1);
      QCOMPARE(record->status, killed == 1 ? RunStatus::Failed : RunStatus::Crashed);
      if (killed == 1) QVERIFY2(contains(record->message, "another rank stopped"), record->message.c_str());
      QVERIFY(!store.checkpoints(1).empty());
    }
    QCOMPARE(integrity(db), QString("ok"));
    QStringList resume_args{"resume", "1", "--db", db, "--quiet"};
    if (resume_ranks > 1) resume_args << "--nproc" << QString::number(resume_ranks);
    const auto [resumed, resume_out] = run(resume_args);
    QVERIFY2(resumed == 0, qPrintable(resume_out));
    RunStore store(db.toStdString(), false);
    const auto record = store.run(1);
    QCOMPARE(record->status, RunStatus::Finished);
    QCOMPARE(record->world_size, resume_ranks);
    QCOMPARE(record->backend, std::string(resume_ranks > 1 ? "gloo" : ""));
    QCOMPARE(contains(record->message, "continued on 1 rank after 2"), resume_ranks == 1);
    QCOMPARE(curve(db, 1, "train/loss").size(), std::size_t(400));
  }

  /// Waits until run 1 of `db` has stored `steps` training steps.
  static bool trained(const QString& db, std::size_t steps) {
    const auto t0 = Clock::now();
    while (Clock::now() - t0 < std::chrono::seconds(120)) {
      if (QFile::exists(db) && RunStore(db.toStdString(), false).metric(1, "train/loss").size() >= steps) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }

  /// A stop (SIGINT) sent to rank 1 alone stops both ranks after the same step with a checkpoint there; a SIGTERM to
  /// the --nproc launcher reaches its ranks, which stop the same way, and the launcher exits as a stopped run does.
  void aStopOnOneRankStopsEveryRank() {
    const auto db = home_.filePath("stop-one.sqlite");
    auto ranks = start_ranks(train_args(db, "dense", 400), free_local_port());
    QVERIFY2(trained(db, 6), "the two ranks did not train");
    ::kill(static_cast<pid_t>(ranks[1]->processId()), SIGINT);
    QStringList outputs;
    for (auto& r : ranks) {
      const auto [code, out] = finish(*r, 120000);
      QVERIFY2(code == 130, qPrintable(out));
      outputs << out;
    }
    {
      RunStore store(db.toStdString(), false);
      const auto record = store.run(1);
      QCOMPARE(record->status, RunStatus::Stopped);
      QVERIFY(record->last_step < 400);
      QCOMPARE(store.checkpoints(1).back().step, record->last_step);
      const auto at = QString("stopped at step %1").arg(record->last_step);
      QVERIFY2(outputs[0].contains(at) && outputs[1].contains(at), qPrintable(outputs.join("\n")));
    }
    const auto launched_db = home_.filePath("stop-launcher.sqlite");
    auto launcher = start(train_args(launched_db, "dense", 400) + QStringList{"--nproc", "2"});
    QVERIFY2(trained(launched_db, 6), "the launched ranks did not train");
    ::kill(static_cast<pid_t>(launcher->processId()), SIGTERM);
    const auto [code, out] = finish(*launcher, 120000);
    QVERIFY2(code == 130, qPrintable(out));
    RunStore store(launched_db.toStdString(), false);
    QCOMPARE(store.run(1)->status, RunStatus::Stopped);
    QCOMPARE(store.checkpoints(1).back().step, store.run(1)->last_step);
  }

  /// Ranks of different configs are refused at start-up on every rank; so is a step the ranks do not divide, which
  /// --nproc refuses once before it starts any rank (as it does a captured step, and resuming a finished run).
  void mismatchedRanksAndUnevenBatchesAreRefused() {
    const auto db = home_.filePath("mismatch.sqlite");
    const int port = free_local_port();
    auto args = train_args(db, "dense");
    std::vector<std::unique_ptr<QProcess>> ranks;
    for (int r = 0; r < 2; ++r)
      ranks.push_back(start(args + QStringList{"--set", r == 0 ? "train.lr=0.003" : "train.lr=0.002"},
                            {{"RANK", QString::number(r)}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                             {"MASTER_PORT", QString::number(port)}}));
    for (auto& r : ranks) {
      const auto [code, out] = finish(*r);
      QVERIFY2(code != 0 && out.contains("rank 1 of 2 run another config or build than rank 0"), qPrintable(out));
    }
    const auto [code, out] = run({"train", "--preset", "tiny", "--steps", "2", "--db", home_.filePath("uneven.sqlite"),
                                  "--quiet", "--threads", "1", "--set", "train.batch_size=3", "--nproc", "2"});
    QVERIFY2(code != 0 && out.count("train.batch_size x train.grad_accum") == 1 && out.contains("over 2 ranks") &&
                 !out.contains("starting 2 local ranks"),
             qPrintable(out));
    const auto once = home_.filePath("refused-once.sqlite");
    const auto [graphed, graphed_out] =
        run(train_args(once, "dense") + QStringList{"--set", "train.cuda_graph=true", "--nproc", "2"});
    QVERIFY2(graphed != 0 && graphed_out.count("train.cuda_graph: a captured step") == 1, qPrintable(graphed_out));
    QVERIFY(!QFileInfo::exists(once));  // refused before any rank made the store
    QCOMPARE(run(train_args(once, "dense", 2)).first, 0);
    const auto [resumed, resume_out] = run({"resume", "1", "--db", once, "--nproc", "2"});
    QVERIFY2(resumed != 0 && resume_out.count("already finished all 2 steps") == 1 &&
                 !resume_out.contains("starting 2 local ranks"),
             qPrintable(resume_out));
  }
};

}  // namespace test_dist

ROUTELAB_TEST_SUITE(test_dist, TestDist)
#include "test_dist.moc"
