// RunWorker: the only place the GUI calls routelab::train(); errors end here as a `failed` result.
#include "ui/run_worker.h"

#include <QCoreApplication>
#include <QFileInfo>
#include <QTemporaryFile>
#include <QThread>
#include <QtGlobal>

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/config/run_name.h"
#include "core/dist/local_launch.h"
#include "core/train/trainer.h"
#include "core/util/errors.h"
#include "core/util/logging.h"

namespace routelab {
namespace {

double unixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

QVector<double> toQVector(const std::vector<double>& values) { return QVector<double>(values.begin(), values.end()); }

/// routelab-cli beside this executable ($ROUTELAB_CLI where set): the other ranks of a data-parallel run started
/// from the GUI.
std::string cliBesideApp() {
  const QString path = qEnvironmentVariableIsSet("ROUTELAB_CLI")
                           ? qEnvironmentVariable("ROUTELAB_CLI")
                           : QCoreApplication::applicationDirPath() + QStringLiteral("/routelab-cli");
  if (!QFileInfo(path).isExecutable())
    throw ConfigError("data-parallel run: " + path.toStdString() +
                      " not found; the GUI starts the other ranks with the routelab-cli installed beside it");
  return path.toStdString();
}

/// Ranks 1 .. n-1 of a data-parallel run whose rank 0 the worker trains: routelab-cli with `args`.
std::unique_ptr<LocalRanks> startOtherRanks(int n, std::vector<std::string> args) {
  args.insert(args.begin(), cliBesideApp());
  auto ranks = std::make_unique<LocalRanks>(n, std::move(args), "routelab GUI");
  for (int rank = 1; rank < n; ++rank) ranks->start(rank);
  return ranks;
}

/// After rank 0's run: the other ranks end on their own (a minute at most, then they are killed); a failure of
/// theirs goes to the log.
void awaitOtherRanks(LocalRanks* ranks) {
  if (!ranks) return;
  ranks->wait(60.0, [](const std::string& line) { logger("ui")->warn("data-parallel run: {}", line); },
              /*grace_from_start=*/true);
}

/// The config `request` trains: its preset or designer document, then the steps override and further sets.
ExperimentConfig requestConfig(const RunRequest& request) {
  std::vector<std::string> sets;
  if (request.stepsOverride > 0) sets.push_back("train.steps=" + std::to_string(request.stepsOverride));
  for (const QString& set : request.sets) sets.push_back(set.toStdString());
  if (request.configJson.isEmpty()) return preset_config(request.preset.toStdString(), sets);
  nlohmann::json overrides;
  try {
    overrides = nlohmann::json::parse(request.configJson.toStdString());
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("designer config: " + std::string(e.what()));
  }
  return resolve_config(overrides, sets, request.preset.toStdString());
}

}  // namespace

QString runNameOf(const RunRequest& request) {
  if (!request.name.isEmpty()) return request.name;
  try {
    return QString::fromStdString(default_run_name(requestConfig(request)));
  } catch (const std::exception&) {
    return QString();  // the launch reports what is wrong
  }
}

/// Runs on the training thread: copies values under the worker's mutex and returns.
class RunWorker::Observer final : public TrainObserver {
 public:
  explicit Observer(RunWorker& worker) : worker_(worker) {}

  void on_started(std::int64_t run_id, const std::string& description, std::int64_t total_steps) override {
    std::lock_guard lock(worker_.mutex_);
    worker_.pending_.started = RunStartInfo{run_id, QString::fromStdString(description), total_steps};
    worker_.result_.runId = run_id;
  }

  void on_step(const StepMetrics& m) override {
    std::lock_guard lock(worker_.mutex_);
    worker_.pending_.steps.push_back(StepSample{m.step, m.total_steps, m.loss, m.lr, m.grad_norm, m.tokens_per_s,
                                                m.elapsed_s, m.eta_s, unixNow(), m.tokens_seen,
                                                toQVector(m.routed_fraction), m.flops_ratio.value_or(kNoValue)});
  }

  void on_eval(const EvalMetrics& m) override {
    std::lock_guard lock(worker_.mutex_);
    worker_.pending_.evals.push_back(EvalSample{m.step, m.val_loss, m.val_ppl, m.val_bpc, m.flops_ratio, unixNow(),
                                                toQVector(m.routed_fraction), m.layers});
  }

 private:
  RunWorker& worker_;
};

RunWorker::RunWorker(RunRequest request) : request_(std::move(request)), home_(QThread::currentThread()) {}

RunWorker::~RunWorker() = default;

void RunWorker::requestStop() { cancel_.store(true); }

bool RunWorker::stopRequested() const { return cancel_.load(); }

ProgressBatch RunWorker::takeProgress() {
  std::lock_guard lock(mutex_);
  ProgressBatch batch = std::move(pending_);
  pending_ = ProgressBatch{};
  return batch;
}

RunResult RunWorker::result() const {
  std::lock_guard lock(mutex_);
  return result_;
}

void RunWorker::run() {
  auto log = logger("ui");
  RunResult result;
  try {
    Observer observer(*this);
    TrainOutcome outcome;
    const int n = std::max(1, request_.processes);
    std::unique_ptr<LocalRanks> others;  // data parallel: ranks 1 .. n-1
    std::optional<DistEnv> rank0;
    const auto db = request_.dbPath.toStdString();
    if (request_.resumeRunId > 0) {
      if (n > 1) {
        others = startOtherRanks(n, {"resume", std::to_string(request_.resumeRunId), "--db", db, "--quiet"});
        rank0 = local_rank_env(0, n, others->port(), "routelab GUI");
      }
      // Data parallel: every rank keeps the stored run.threads (the ranks' configs must agree; "every core" is split
      // between the ranks), not this slot's share.
      outcome = resume(db, request_.resumeRunId, &observer, &cancel_, n > 1 ? -1 : request_.resumeThreads,
                       RunStore::kNeverTakeOver, rank0 ? &*rank0 : nullptr);
    } else {
      TrainRequest train_request;
      train_request.config = requestConfig(request_);
      train_request.db_path = request_.dbPath.toStdString();
      train_request.name = request_.name.toStdString();
      train_request.qt_version = qVersion();
      QTemporaryFile config_file;  // the other ranks read the resolved config rank 0 trains
      if (n > 1) {
        if (!config_file.open() || config_file.write(QByteArray::fromStdString(train_request.config.doc.dump())) < 0 ||
            !config_file.flush())
          throw ConfigError("data-parallel run: cannot write the config for the other ranks to " +
                            config_file.fileName().toStdString());
        others = startOtherRanks(n, {"train", "--config", config_file.fileName().toStdString(), "--db",
                                     train_request.db_path, "--quiet"});
        rank0 = local_rank_env(0, n, others->port(), "routelab GUI");
      }
      outcome = train(train_request, &observer, &cancel_, rank0 ? &*rank0 : nullptr);
    }
    awaitOtherRanks(others.get());
    result.runId = outcome.run_id;
    result.status = QString::fromStdString(to_string(outcome.status));
    result.message = QString::fromStdString(outcome.message);
    result.lastStep = outcome.last_step;
    result.lastValLoss = outcome.last_val_loss.value_or(kNoValue);
  } catch (const Error& e) {
    result.status = QStringLiteral("failed");
    result.message = QString::fromUtf8(e.what());
  } catch (const std::exception& e) {
    bool out_of_memory = false;
    const auto text = QString::fromStdString(foreign_error_text(e, &out_of_memory));
    result.status = QStringLiteral("failed");
    result.message = out_of_memory ? QStringLiteral("out of memory: %1").arg(text)
                                   : QStringLiteral("unexpected error: %1").arg(text);
  } catch (...) {
    result.status = QStringLiteral("failed");
    result.message = QStringLiteral("unexpected error of an unknown type");
  }
  if (result.failed()) log->error("run of preset '{}' failed: {}", request_.preset.toStdString(),
                                  result.message.toStdString());
  {
    std::lock_guard lock(mutex_);
    if (result.runId == 0) result.runId = result_.runId;  // failed after on_started
    result_ = result;
  }
  moveToThread(home_);
  Q_EMIT done();
}

}  // namespace routelab
