// ZeroShotView: `routelab-cli tasks` in the workspace. Check stored language-model runs, list task files (JSON Lines in
// the published datasets' fields, or text: the format read from the first line or chosen), and score each checked
// run's latest checkpoint on every task on a worker thread (ZeroShotWorker), with progress and a stop between two
// batches. The results fill a table (run x task: acc and acc_norm with their standard errors, perplexity, FLOPs ratio
// and routed share as executed) that copies as Markdown, and are kept with each run unless unchecked (metrics
// task/<name>/<measure>, which tables, `dtrnet-table1-tasks` and the Compare view read). The task list and the options
// are remembered between sessions.
#pragma once
#include <QList>
#include <QMetaType>
#include <QObject>
#include <QSet>
#include <QString>
#include <QStringList>
#include <QWidget>

#include <atomic>
#include <memory>

#include "core/analysis/zero_shot_run.h"
#include "ui/run_progress.h"

class QCheckBox;
class QLabel;
class QListWidget;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QThread;

namespace routelab {

class StoreService;

/// What a Run asks for: every task on every run, in order.
struct ZeroShotJob {
  QList<qint64> runIds;
  QStringList tasks;  ///< "NAME=FILE:FORMAT", as `tasks --task` takes them
  qint64 limit = 0, batchSize = 0, maxLength = 0;  ///< 0: every example, the run's batch size, the run's context
  bool store = true;
  bool everyCheckpoint = false;  ///< each run's every kept checkpoint, oldest first (else its latest)
  qint64 fewshot = 0;            ///< solved examples before each prompt (0: zero-shot)
  QStringList fewshotFrom;       ///< "NAME=FILE": a task's few-shot file, as `tasks --fewshot-from` takes them
  bool stored = false;           ///< nothing scored: each run's kept results read back (`tasks --stored`)
};

/// One run's outcome: its report, or the error that stopped it (a bad task file, a run that does not open).
struct ZeroShotOutcome {
  qint64 runId = 0;
  QString error;
  ZeroShotReport report;  ///< when error is empty
  /// The tasks as read (their examples' text), shared by every outcome of a job: what the disagreements show.
  std::shared_ptr<const std::vector<ZeroShotTask>> tasks;
};

/// Lives on the view's thread of work: opens each run (its stored tokenizer and weights) and scores it.
class ZeroShotWorker : public QObject {
  Q_OBJECT

 public:
  explicit ZeroShotWorker(QString dbPath) : dbPath_(std::move(dbPath)) {}
  /// Set from any thread: the job in progress stops at its next batch, the runs after it are not started.
  std::atomic<bool>& stopFlag() { return stop_; }

 public Q_SLOTS:
  void run(const routelab::ZeroShotJob& job);

 Q_SIGNALS:
  /// Run `run` of `runs` (from 0), task `task` (with its checkpoint's step when every one is scored): `scored` of
  /// `total` requests (at most ten times a second).
  void progressed(int run, int runs, const QString& task, qint64 scored, qint64 total);
  void runDone(const routelab::ZeroShotOutcome& outcome);
  void finished(bool stopped);

 private:
  QString dbPath_;
  std::atomic<bool> stop_{false};
};

class ZeroShotView : public QWidget {
  Q_OBJECT

 public:
  explicit ZeroShotView(StoreService* store, QWidget* parent = nullptr);
  ~ZeroShotView() override;

  /// The store's language-model runs with a checkpoint, checkable.
  QListWidget* runList() const { return runs_; }
  /// One row a task: its name (editable), its format (a combo: "auto" or one of task_formats()), its file and the
  /// file its few-shot examples come from (editable; empty: the task's own file).
  QTableWidget* taskTable() const { return tasks_; }
  /// Solved examples before each prompt (0: zero-shot), drawn as lm-evaluation-harness draws them.
  QSpinBox* shotsSpin() const { return shots_; }
  QSpinBox* limitSpin() const { return limit_; }
  QSpinBox* batchSpin() const { return batch_; }
  QSpinBox* lengthSpin() const { return length_; }
  QCheckBox* storeCheck() const { return storeCheck_; }
  /// Score every kept checkpoint of each run (the stored measures then draw each task over training).
  QCheckBox* everyCheckpointCheck() const { return everyCheckpoint_; }
  QPushButton* runButton() const { return runButton_; }
  /// Shows the checked runs' kept results (each task's latest), paired, without scoring.
  QPushButton* storedButton() const { return storedButton_; }
  QPushButton* stopButton() const { return stopButton_; }
  QProgressBar* progressBar() const { return progress_; }
  QTableWidget* resultTable() const { return results_; }
  /// Each later run against the first (the lowest id), or every pair, task by task (shown when two or more runs were
  /// scored).
  QTableWidget* pairTable() const { return pairs_; }
  /// Pairs each run with every later one (else the later ones with the first); toggling redraws the pairs.
  QCheckBox* everyPairCheck() const { return everyPair_; }
  /// The examples the selected pair disagrees on: index, the run it is right for, prompt, answer, each run's choice
  /// (shown while a pair is selected).
  QTableWidget* disagreementTable() const { return examples_; }
  QLabel* statusLabel() const { return status_; }
  const QList<ZeroShotOutcome>& outcomes() const { return outcomes_; }

  /// Lists a task file (its name the file's stem unless given; format "" = auto); false when the file is listed.
  bool addTask(const QString& path, const QString& name = QString(), const QString& format = QString(),
               const QString& fewshotPath = QString());
  /// The listed tasks as `--task` specs.
  QStringList taskSpecs() const;
  /// The tasks' few-shot files as `--fewshot-from` specs (NAME=FILE; rows without one left out).
  QStringList fewshotSpecs() const;
  /// Checks exactly these runs, where listed.
  void checkRuns(const QList<qint64>& ids);
  /// The checked runs by id, lowest first.
  QList<qint64> checkedRuns() const;
  /// The results table as Markdown (what Copy puts on the clipboard).
  QString markdown() const;
  bool isRunning() const { return running_; }

 public Q_SLOTS:
  /// Scores the checked runs on the listed tasks (refused, with a status, without either).
  void start();
  /// Reads the checked runs' kept results instead (the task list is not needed).
  void showStored();
  void stop();

 Q_SIGNALS:
  /// A job ended (finished, stopped or failed): tests wait on it.
  void finished();

 private:
  void onRunsLoaded(const QList<RunSummary>& runs);
  /// Clears the tables and hands `job` to the worker.
  void launch(const ZeroShotJob& job, const QString& status);
  void onProgress(int run, int runs, const QString& task, qint64 scored, qint64 total);
  void onRunDone(const ZeroShotOutcome& outcome);
  void onFinished(bool stopped);
  void addFiles();
  void removeSelectedTasks();
  /// Asks for the selected tasks' few-shot file.
  void chooseFewshotFile();
  void appendResultRows(const ZeroShotOutcome& outcome);
  /// Fills the pairs table from the scored outcomes (ConfigError where two runs scored different examples).
  void showPairs();
  /// Fills the disagreements table from the selected pair (hidden without one).
  void showDisagreements();
  void saveChoices() const;
  void restoreChoices();
  void updateControls();

  StoreService* store_ = nullptr;
  QThread* thread_ = nullptr;
  ZeroShotWorker* worker_ = nullptr;
  QListWidget* runs_ = nullptr;
  QTableWidget* tasks_ = nullptr;
  QPushButton* addButton_ = nullptr;
  QPushButton* removeButton_ = nullptr;
  QPushButton* fewshotButton_ = nullptr;
  QSpinBox* shots_ = nullptr;
  QSpinBox* limit_ = nullptr;
  QSpinBox* batch_ = nullptr;
  QSpinBox* length_ = nullptr;
  QCheckBox* storeCheck_ = nullptr;
  QCheckBox* everyCheckpoint_ = nullptr;
  QPushButton* runButton_ = nullptr;
  QPushButton* storedButton_ = nullptr;
  QPushButton* stopButton_ = nullptr;
  QPushButton* copyButton_ = nullptr;
  QCheckBox* everyPair_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QTableWidget* results_ = nullptr;
  QTableWidget* pairs_ = nullptr;
  QLabel* examplesLabel_ = nullptr;
  QTableWidget* examples_ = nullptr;
  QLabel* status_ = nullptr;
  QList<ZeroShotOutcome> outcomes_;
  QSet<qint64> wanted_;  ///< runs to check once listed (checkRuns before the store answered)
  bool running_ = false;
  bool readingStored_ = false;  ///< the job in progress reads kept results
  int failed_ = 0;
};

}  // namespace routelab

Q_DECLARE_METATYPE(routelab::ZeroShotJob)
Q_DECLARE_METATYPE(routelab::ZeroShotOutcome)
