// Plain value types that carry a run's progress from the training thread to the GUI, and the runs and
// curves read from the store. Copied between threads; nothing here points into core/ or Torch.
#pragma once
#include <QList>
#include <QMetaType>
#include <QHash>
#include <QString>
#include <QVariant>
#include <QVector>

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/run/evaluation_record.h"

namespace routelab {

inline constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

/// One optimizer step as the trainer reported it.
struct StepSample {
  qint64 step = 0;
  qint64 totalSteps = 0;
  double loss = 0;
  double lr = 0;
  double gradNorm = 0;
  double tokensPerSecond = 0;
  double elapsedSeconds = 0;
  double etaSeconds = 0;
  double wallTime = 0;              ///< unix seconds when the observer saw the step
  qint64 tokensSeen = 0;
  QVector<double> routedFraction;   ///< per layer at logged steps (training mode), empty otherwise
  double flopsRatio = kNoValue;     ///< layer FLOPs / dense at logged steps (training mode), NaN otherwise
};

/// One validation pass.
struct EvalSample {
  qint64 step = 0;
  double valLoss = 0;
  double valPerplexity = 0;
  double valBitsPerChar = 0;
  double flopsRatio = 1;            ///< layer FLOPs / dense layer FLOPs (inference mode)
  double wallTime = 0;              ///< unix seconds
  QVector<double> routedFraction;   ///< per layer, inference mode
  std::vector<LayerRouting> layers; ///< the per-layer records the evaluation stores
};

struct RunStartInfo {
  qint64 runId = 0;
  QString description;
  qint64 totalSteps = 0;
};

/// What the worker collected since the previous drain.
struct ProgressBatch {
  std::optional<RunStartInfo> started;
  QVector<StepSample> steps;
  QVector<EvalSample> evals;
  bool isEmpty() const { return !started && steps.isEmpty() && evals.isEmpty(); }
};

/// How a run ended, as the GUI shows it. `status` is the run store's word (finished, stopped, failed).
struct RunResult {
  qint64 runId = 0;  ///< 0 when the run failed before it was stored
  QString status;
  QString message;
  qint64 lastStep = 0;
  double lastValLoss = kNoValue;
  bool failed() const { return status == QLatin1String("failed"); }
};

/// A row of the runs table.
struct RunSummary {
  qint64 id = 0;
  QString name, arch, preset, status, message;
  qint64 lastStep = 0, totalSteps = 0;
  qint64 seed = 0;                    ///< run.seed
  double lastTrainLoss = kNoValue, lastValLoss = kNoValue, bestValLoss = kNoValue;
  double createdAt = 0, endedAt = 0;  ///< unix seconds
  std::optional<qint64> resumedFromStep;
  QString tags, notes, device;        ///< tags comma-separated
  bool archived = false;
  double heartbeatAt = 0;             ///< unix seconds; a running run's duration ends here
  qint64 checkpointStep = -1;         ///< step of the latest checkpoint, -1 when none
  /// The run's resolved config by "section.key" ("train.lr" -> 0.003): numbers as double, flags as bool, else text.
  QHash<QString, QVariant> config;
};

/// The stored loss curves of one run.
struct RunCurves {
  qint64 runId = 0;
  QString title;
  qint64 totalSteps = 0;
  QVector<double> trainSteps, trainLoss, valSteps, valLoss;
};

/// Appends a batch's training and validation points to `curves` (the one conversion of samples to plot data).
inline void appendCurves(const ProgressBatch& batch, RunCurves& curves) {
  for (const StepSample& s : batch.steps) {
    curves.trainSteps.push_back(static_cast<double>(s.step));
    curves.trainLoss.push_back(s.loss);
  }
  for (const EvalSample& e : batch.evals) {
    curves.valSteps.push_back(static_cast<double>(e.step));
    curves.valLoss.push_back(e.valLoss);
  }
}

}  // namespace routelab

Q_DECLARE_METATYPE(routelab::RunResult)
Q_DECLARE_METATYPE(routelab::RunCurves)
Q_DECLARE_METATYPE(routelab::RunSummary)
