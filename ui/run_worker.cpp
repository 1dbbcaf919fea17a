// RunWorker: the only place the GUI calls routelab::train(); errors end here as a `failed` result.
#include "ui/run_worker.h"

#include <QThread>
#include <QtGlobal>

#include <chrono>
#include <exception>

#include <nlohmann/json.hpp>

#include "core/train/trainer.h"
#include "core/util/errors.h"
#include "core/util/logging.h"

namespace routelab {
namespace {

double unixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

QVector<double> toQVector(const std::vector<double>& values) { return QVector<double>(values.begin(), values.end()); }

}  // namespace

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
    if (request_.resumeRunId > 0) {
      outcome = resume(request_.dbPath.toStdString(), request_.resumeRunId, &observer, &cancel_, request_.resumeThreads);
    } else {
      std::vector<std::string> sets;
      if (request_.stepsOverride > 0) sets.push_back("train.steps=" + std::to_string(request_.stepsOverride));
      for (const QString& set : request_.sets) sets.push_back(set.toStdString());

      TrainRequest train_request;
      if (request_.configJson.isEmpty()) {
        train_request.config = preset_config(request_.preset.toStdString(), sets);
      } else {
        nlohmann::json overrides;
        try {
          overrides = nlohmann::json::parse(request_.configJson.toStdString());
        } catch (const nlohmann::json::exception& e) {
          throw ConfigError("designer config: " + std::string(e.what()));
        }
        train_request.config = resolve_config(overrides, sets, request_.preset.toStdString());
      }
      train_request.db_path = request_.dbPath.toStdString();
      train_request.name = request_.name.toStdString();
      train_request.qt_version = qVersion();
      outcome = train(train_request, &observer, &cancel_);
    }
    result.runId = outcome.run_id;
    result.status = QString::fromStdString(to_string(outcome.status));
    result.message = QString::fromStdString(outcome.message);
    result.lastStep = outcome.last_step;
    result.lastValLoss = outcome.last_val_loss.value_or(kNoValue);
  } catch (const Error& e) {
    result.status = QStringLiteral("failed");
    result.message = QString::fromUtf8(e.what());
  } catch (const std::exception& e) {
    result.status = QStringLiteral("failed");
    result.message = QStringLiteral("unexpected error: %1").arg(QString::fromUtf8(e.what()));
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
