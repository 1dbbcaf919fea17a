// TokenInspector (issue 7): type or paste any text, choose a stored run and checkpoint (and optionally a second run to
// compare, or the same run with other inference options), and see each run's token x layer routing map and the model's
// next-token predictions per position (classifiers: the experts per token and the class probabilities), with a
// difference map when the two runs have the same layers. Runs come from StoreService; checkpoints and traces are read
// on a worker thread (InspectorWorker), which keeps the loaded models cached per (run, step, options).
#pragma once
#include <QList>
#include <QMetaType>
#include <QObject>
#include <QString>
#include <QStringList>
#include <QVector>
#include <QWidget>

#include <memory>
#include <utility>

#include "ui/dashboard_data.h"
#include "ui/run_progress.h"

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QThread;

namespace routelab {

class StoreService;
class TokenRoutingWidget;
class WordCompleter;

/// One traced text through one run, as the GUI shows it.
struct InspectorResult {
  qint64 runId = 0;
  qint64 step = 0;       ///< the checkpoint's step
  QString name, arch;
  QStringList sets;      ///< the model overrides it ran with ("model.inference=sparse")
  bool ok = false;
  QString error;         ///< when !ok
  int layerCount = 0;    ///< the model's layers
  ProbeSnapshot trace;   ///< tokens, per-layer routing, token data, predictions
};

/// What a Run asks for: the text through one or two runs, each at a checkpoint with model overrides.
struct InspectorRequest {
  struct Run {
    qint64 id = 0;
    qint64 step = 0;   ///< 0 = the latest checkpoint
    QStringList sets;  ///< "model.key=value", as `eval --set` takes them
  };
  qint64 id = 0;
  QString text;
  int topK = 5;
  QVector<Run> runs;
};

/// Lives on the inspector's thread: its own store connection for the checkpoint lists, and the loaded models.
class InspectorWorker : public QObject {
  Q_OBJECT

 public:
  /// Models kept loaded (least recently used goes first).
  static constexpr int kCachedModels = 4;

  explicit InspectorWorker(QString dbPath);
  ~InspectorWorker() override;

 public Q_SLOTS:
  void listCheckpoints(int side, qint64 runId);
  void trace(const routelab::InspectorRequest& request);

 Q_SIGNALS:
  void checkpointsListed(int side, qint64 runId, const QVector<qint64>& steps, const QString& error);
  void traced(qint64 requestId, const QVector<routelab::InspectorResult>& results);

 private:
  struct Cache;
  QString dbPath_;
  std::unique_ptr<Cache> cache_;
};

class TokenInspector : public QWidget {
  Q_OBJECT

 public:
  explicit TokenInspector(StoreService* store, QWidget* parent = nullptr);
  ~TokenInspector() override;

  QPlainTextEdit* textEdit() const { return text_; }
  /// side 0: the run; side 1: the run to compare with.
  QComboBox* runCombo(int side) const { return runs_[side]; }
  QComboBox* stepCombo(int side) const { return steps_[side]; }
  /// The model options a side's run is traced with, typed as key=value (its tooltip lists the architecture's
  /// inference options: TSA's mode, thresholds, RoPE scaling).
  QLineEdit* optionsEdit(int side) const { return options_[side]; }
  /// Its completion: the run's inference options as "key=" or "key=value".
  WordCompleter* optionsCompleter(int side) const { return optionWords_[side]; }
  QCheckBox* compareCheck() const { return compare_; }
  QCheckBox* differenceCheck() const { return difference_; }
  QComboBox* colourBy() const { return colourBy_; }
  QSpinBox* topKSpin() const { return topK_; }
  QPushButton* runButton() const { return runButton_; }
  TokenRoutingWidget* map(int side) const { return maps_[side]; }
  TokenRoutingWidget* differenceMap() const { return diffMap_; }
  QTableWidget* predictions() const { return table_; }
  QLabel* statusLabel() const { return status_; }
  const QVector<InspectorResult>& results() const { return results_; }
  /// Selects run `runId` on `side` (when listed); its checkpoints are then read.
  bool selectRun(int side, qint64 runId);

 public Q_SLOTS:
  /// Traces the text through the chosen run(s) on the worker thread.
  void runTrace();

 Q_SIGNALS:
  /// A run's checkpoint list arrived (tests wait on it).
  void checkpointsLoaded(int side);
  /// A trace was shown (or its errors).
  void traceShown();

 private:
  void onRunsLoaded(const QList<RunSummary>& runs);
  void onCheckpoints(int side, qint64 runId, const QVector<qint64>& steps, const QString& error);
  void onTraced(qint64 requestId, const QVector<InspectorResult>& results);
  /// Lists the checkpoints of the run chosen on `side` (and its options field's tooltip follows the run).
  void requestCheckpoints(int side);
  /// The newest checkpoint step listed on `side`, -1 when none.
  qint64 newestListedStep(int side) const;
  void render();
  void renderTable();
  void updateControls();

  StoreService* store_ = nullptr;
  QThread* thread_ = nullptr;
  InspectorWorker* worker_ = nullptr;
  qint64 lastRequest_ = 0;
  bool busy_ = false;
  QVector<InspectorResult> results_;

  QPlainTextEdit* text_ = nullptr;
  QComboBox* runs_[2] = {nullptr, nullptr};
  QComboBox* steps_[2] = {nullptr, nullptr};
  QLineEdit* options_[2] = {nullptr, nullptr};
  WordCompleter* optionWords_[2] = {nullptr, nullptr};
  QCheckBox* compare_ = nullptr;
  QCheckBox* difference_ = nullptr;
  QComboBox* colourBy_ = nullptr;
  QSpinBox* topK_ = nullptr;
  QPushButton* runButton_ = nullptr;
  QLabel* status_ = nullptr;
  QLabel* headers_[2] = {nullptr, nullptr};
  TokenRoutingWidget* maps_[2] = {nullptr, nullptr};
  QLabel* diffHeader_ = nullptr;
  TokenRoutingWidget* diffMap_ = nullptr;
  QTableWidget* table_ = nullptr;
};

}  // namespace routelab

Q_DECLARE_METATYPE(routelab::InspectorRequest)
Q_DECLARE_METATYPE(routelab::InspectorResult)
