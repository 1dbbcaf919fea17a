#include "ui/zero_shot_view.h"

#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QListWidget>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QThread>
#include <QVBoxLayout>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <utility>

#include "core/analysis/zero_shot_compare.h"
#include "core/models/registry.h"
#include "core/util/errors.h"
#include "core/util/interrupt.h"
#include "ui/store_service.h"

namespace routelab {
namespace {

enum TaskColumn { kTaskName, kTaskFormat, kTaskFile, kTaskFewshot };
const QStringList kResultHeaders = {QStringLiteral("Run"),        QStringLiteral("Task"),
                                    QStringLiteral("Examples"),   QStringLiteral("acc"),
                                    QStringLiteral("acc_norm"),   QStringLiteral("Perplexity"),
                                    QStringLiteral("FLOPs ratio"), QStringLiteral("Routed"),
                                    QStringLiteral("Time")};

QString valueWithError(double value, double err) {
  if (!std::isfinite(value)) return QStringLiteral("–");
  return std::isfinite(err) ? QStringLiteral("%1 ± %2").arg(value, 0, 'f', 4).arg(err, 0, 'f', 4)
                            : QString::number(value, 'f', 4);
}

QString fixedOrDash(double value, int decimals) {
  return std::isfinite(value) ? QString::number(value, 'f', decimals) : QStringLiteral("–");
}

/// A table's header and rows as Markdown, numbers (from column `numeric` on) right-aligned.
QString tableMarkdown(const QTableWidget* table, int numeric) {
  QStringList header, rule;
  for (int c = 0; c < table->columnCount(); ++c) {
    header << table->horizontalHeaderItem(c)->text();
    rule << (c >= numeric ? QStringLiteral("---:") : QStringLiteral("---"));
  }
  QStringList lines = {QLatin1String("| ") + header.join(QLatin1String(" | ")) + QLatin1String(" |"),
                       QLatin1String("| ") + rule.join(QLatin1String(" | ")) + QLatin1String(" |")};
  for (int row = 0; row < table->rowCount(); ++row) {
    QStringList cells;
    for (int c = 0; c < table->columnCount(); ++c) {
      const auto* item = table->item(row, c);
      cells << (item ? item->text().replace(QLatin1Char('|'), QLatin1String("\\|")) : QString());
    }
    lines << QLatin1String("| ") + cells.join(QLatin1String(" | ")) + QLatin1String(" |");
  }
  return lines.join(QLatin1Char('\n')) + QLatin1Char('\n');
}

QSpinBox* makeSpin(QWidget* parent, const QString& name, int max, const QString& special, const QString& tip) {
  auto* spin = new QSpinBox(parent);
  spin->setObjectName(name);
  spin->setRange(0, max);
  spin->setSpecialValueText(special);
  spin->setToolTip(tip);
  return spin;
}

QCheckBox* makeCheck(QWidget* parent, const QString& text, const QString& name, const QString& tip) {
  auto* check = new QCheckBox(text, parent);
  check->setObjectName(name);
  check->setToolTip(tip);
  return check;
}

}  // namespace

// ---- worker ----------------------------------------------------------------------------------------------------

namespace {

QString errorText(const std::exception& e) {
  return QString::fromStdString(dynamic_cast<const Error*>(&e) ? e.what() : foreign_error_text(e));
}

/// The examples of each stored task read again from the file it was scored on, for the disagreements' text: a file
/// no longer there, or no longer holding those examples, leaves its task without text.
std::vector<ZeroShotTask> storedTaskText(const ZeroShotReport& report) {
  std::vector<ZeroShotTask> tasks;
  for (const TaskResult& t : report.tasks) {
    ZeroShotTask text;
    try {
      text = read_task(TaskSpec{t.name, t.path, t.format}, t.examples);
    } catch (const Error&) {
    }
    if (static_cast<std::int64_t>(text.examples.size()) != t.examples) text.examples.clear();
    text.name = t.name;
    tasks.push_back(std::move(text));
  }
  return tasks;
}

}  // namespace

void ZeroShotWorker::run(const ZeroShotJob& job) {
  const InterruptScope stopped([this] { return stop_.load(); });
  const int runs = static_cast<int>(job.runIds.size());
  if (job.stored) {  // nothing scored: each run's kept results, with its task files' text where still at hand
    for (int i = 0; i < runs && !stop_.load(); ++i) {
      ZeroShotOutcome outcome;
      outcome.runId = job.runIds[i];
      try {
        outcome.report = stored_zero_shot(dbPath_.toStdString(), outcome.runId);
        outcome.tasks = std::make_shared<const std::vector<ZeroShotTask>>(storedTaskText(outcome.report));
      } catch (const std::exception& e) {
        outcome.error = errorText(e);
      }
      Q_EMIT progressed(i, runs, tr("kept results"), i + 1, runs);
      Q_EMIT runDone(outcome);
    }
    Q_EMIT finished(stop_.load());
    return;
  }
  ZeroShotOptions options;
  options.limit = job.limit;
  options.batch_size = job.batchSize;
  options.max_length = job.maxLength;
  std::shared_ptr<const std::vector<ZeroShotTask>> read;  // once for every run and checkpoint
  QString unreadable;                                      // a bad task file: every run's row says so
  try {
    for (const QString& spec : job.tasks) options.tasks.push_back(parse_task_spec(spec.toStdString()));
    options.fewshot = job.fewshot;
    for (const QString& spec : job.fewshotFrom) options.fewshot_from.push_back(parse_task_spec(spec.toStdString()));
    read = std::make_shared<const std::vector<ZeroShotTask>>(read_tasks(options));
  } catch (const std::exception& e) {
    unreadable = errorText(e);
  }
  static const std::vector<ZeroShotTask> none;
  const std::vector<ZeroShotTask>& tasks = read ? *read : none;
  for (int i = 0; i < runs && !stop_.load(); ++i) {
    ZeroShotOutcome outcome;
    outcome.runId = job.runIds[i];
    outcome.error = unreadable;
    outcome.tasks = read;
    std::vector<std::int64_t> steps;
    try {
      if (unreadable.isEmpty()) steps = steps_to_score(dbPath_.toStdString(), outcome.runId, job.everyCheckpoint, 0);
    } catch (const std::exception& e) {
      outcome.error = errorText(e);
    }
    if (!outcome.error.isEmpty()) Q_EMIT runDone(outcome);
    for (std::size_t k = 0; k < steps.size() && outcome.error.isEmpty() && !stop_.load(); ++k) {
      options.step = steps[k];
      auto shown = std::chrono::steady_clock::time_point();
      options.progress = [&](std::size_t task, std::int64_t scored, std::int64_t total) {
        const auto now = std::chrono::steady_clock::now();
        if (scored < total && now - shown < std::chrono::milliseconds(100)) return;
        shown = now;
        QString name = QString::fromStdString(tasks[task].name);
        if (job.everyCheckpoint) name += tr(" at step %1").arg(steps[k]);
        Q_EMIT progressed(i, runs, name, scored, total);
      };
      try {
        outcome.report = evaluate_zero_shot(dbPath_.toStdString(), outcome.runId, tasks, options);
        if (job.store) store_zero_shot(dbPath_.toStdString(), outcome.report);
      } catch (const Interrupted&) {
        break;  // stopped: this checkpoint's results are neither shown nor kept
      } catch (const std::exception& e) {
        outcome.error = errorText(e);  // the run's other checkpoints would fail alike: the loop ends
      }
      Q_EMIT runDone(outcome);
    }
  }
  Q_EMIT finished(stop_.load());
}

// ---- view ------------------------------------------------------------------------------------------------------

ZeroShotView::ZeroShotView(StoreService* store, QWidget* parent) : QWidget(parent), store_(store) {
  setObjectName(QStringLiteral("zeroShotView"));
  qRegisterMetaType<ZeroShotJob>();
  qRegisterMetaType<ZeroShotOutcome>();

  runs_ = new QListWidget(this);
  runs_->setObjectName(QStringLiteral("zeroShotRuns"));
  runs_->setToolTip(tr("Language-model runs with a checkpoint: each checked run's latest checkpoint is scored"));
  connect(runs_, &QListWidget::itemChanged, this, &ZeroShotView::updateControls);

  tasks_ = new QTableWidget(0, 4, this);
  tasks_->setObjectName(QStringLiteral("zeroShotTasks"));
  tasks_->setHorizontalHeaderLabels({tr("Name"), tr("Format"), tr("File"), tr("Few-shot file")});
  tasks_->horizontalHeader()->setSectionResizeMode(kTaskFile, QHeaderView::Stretch);
  tasks_->horizontalHeader()->setSectionResizeMode(kTaskFewshot, QHeaderView::Stretch);
  tasks_->verticalHeader()->setVisible(false);
  tasks_->setSelectionBehavior(QAbstractItemView::SelectRows);
  tasks_->setToolTip(tr("Task files: JSON Lines in the published datasets' fields (PIQA, ARC, HellaSwag, Winogrande, "
                        "BoolQ, MMLU, LAMBADA), {\"context\", \"choices\", \"label\"}, or text for perplexity "
                        "(WikiText pages). The name is what results are stored under: task/NAME/acc"));
  connect(tasks_, &QTableWidget::itemChanged, this, [this] { saveChoices(); });
  addButton_ = new QPushButton(tr("Add files…"), this);
  addButton_->setObjectName(QStringLiteral("zeroShotAdd"));
  connect(addButton_, &QPushButton::clicked, this, &ZeroShotView::addFiles);
  removeButton_ = new QPushButton(tr("Remove"), this);
  removeButton_->setObjectName(QStringLiteral("zeroShotRemove"));
  connect(removeButton_, &QPushButton::clicked, this, &ZeroShotView::removeSelectedTasks);
  fewshotButton_ = new QPushButton(tr("Few-shot file…"), this);
  fewshotButton_->setObjectName(QStringLiteral("zeroShotFewshotFile"));
  fewshotButton_->setToolTip(tr("The file the selected tasks' few-shot examples come from: the dataset's training or "
                                "dev split (without one a task draws from its own file, never an example's own "
                                "answer)"));
  connect(fewshotButton_, &QPushButton::clicked, this, &ZeroShotView::chooseFewshotFile);

  limit_ = makeSpin(this, QStringLiteral("zeroShotLimit"), 10'000'000, tr("all"),
                    tr("Examples read from each task file, the first ones (all: the whole file)"));
  batch_ = makeSpin(this, QStringLiteral("zeroShotBatch"), 4096, tr("the run's"),
                    tr("Requests per forward (the run's: its train.batch_size)"));
  length_ = makeSpin(this, QStringLiteral("zeroShotLength"), 1'000'000, tr("the run's context"),
                     tr("Tokens the model reads at most; a longer context is cut from the left"));
  shots_ = makeSpin(this, QStringLiteral("zeroShotShots"), 1000, tr("zero-shot"),
                    tr("Solved examples before each prompt, drawn as lm-evaluation-harness draws them (its "
                       "--num_fewshot, seed 1234); results named NAME_Kshot"));
  storeCheck_ = makeCheck(this, tr("keep the results with each run"), QStringLiteral("zeroShotStore"),
                          tr("As metrics task/NAME/acc, … at the checkpoint's step (replacing an earlier score at "
                             "that step): the tables and the Compare view read them"));
  storeCheck_->setChecked(true);
  everyCheckpoint_ =
      makeCheck(this, tr("every kept checkpoint"), QStringLiteral("zeroShotEveryCheckpoint"),
                tr("Score each run's every kept checkpoint, oldest first, not only its latest: kept with the runs, "
                   "each task's measures draw a curve over training (pairs use each run's latest)"));
  runButton_ = new QPushButton(tr("Score"), this);
  runButton_->setObjectName(QStringLiteral("zeroShotRun"));
  runButton_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return));
  runButton_->setToolTip(tr("Score the checked runs on the listed tasks (Ctrl+Return)"));
  connect(runButton_, &QPushButton::clicked, this, &ZeroShotView::start);
  storedButton_ = new QPushButton(tr("Show kept"), this);
  storedButton_->setObjectName(QStringLiteral("zeroShotShowStored"));
  storedButton_->setToolTip(tr("Show the checked runs' kept results (each task's latest scoring), paired, without "
                               "scoring again"));
  connect(storedButton_, &QPushButton::clicked, this, &ZeroShotView::showStored);
  stopButton_ = new QPushButton(tr("Stop"), this);
  stopButton_->setObjectName(QStringLiteral("zeroShotStop"));
  stopButton_->setToolTip(tr("Stop at the next batch: the run in progress keeps nothing, those done keep theirs"));
  connect(stopButton_, &QPushButton::clicked, this, &ZeroShotView::stop);
  progress_ = new QProgressBar(this);
  progress_->setObjectName(QStringLiteral("zeroShotProgress"));
  progress_->setRange(0, 1);
  progress_->setValue(0);
  status_ = new QLabel(tr("Check runs, add task files, Score."), this);
  status_->setObjectName(QStringLiteral("zeroShotStatus"));
  status_->setWordWrap(true);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);

  results_ = new QTableWidget(0, static_cast<int>(kResultHeaders.size()), this);
  results_->setObjectName(QStringLiteral("zeroShotResults"));
  results_->setHorizontalHeaderLabels(kResultHeaders);
  results_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  results_->verticalHeader()->setVisible(false);
  results_->horizontalHeader()->setStretchLastSection(false);
  pairs_ = new QTableWidget(0, 8, this);
  pairs_->setObjectName(QStringLiteral("zeroShotPairs"));
  pairs_->setHorizontalHeaderLabels({tr("Task"), tr("Measure"), tr("Run a"), tr("Run b"), tr("b − a (95% interval)"),
                                     tr("Right for a only"), tr("For b only"), tr("p (McNemar)")});
  pairs_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  pairs_->verticalHeader()->setVisible(false);
  pairs_->setToolTip(tr("Each later run against the first, example by example: the interval of the difference from "
                        "the per-example differences, p from the examples only one run gets right (McNemar's exact "
                        "test)"));
  pairs_->hide();  // until two runs are scored
  pairs_->setSelectionBehavior(QAbstractItemView::SelectRows);
  pairs_->setSelectionMode(QAbstractItemView::SingleSelection);
  connect(pairs_, &QTableWidget::itemSelectionChanged, this, &ZeroShotView::showDisagreements);
  examplesLabel_ = new QLabel(this);
  examplesLabel_->setObjectName(QStringLiteral("zeroShotDisagreementsLabel"));
  examplesLabel_->setWordWrap(true);
  examples_ = new QTableWidget(0, 6, this);
  examples_->setObjectName(QStringLiteral("zeroShotDisagreements"));
  examples_->setHorizontalHeaderLabels(
      {tr("Example"), tr("Right for"), tr("Prompt"), tr("Answer"), tr("Run a chose"), tr("Run b chose")});
  examples_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  examples_->setSelectionBehavior(QAbstractItemView::SelectRows);
  examples_->verticalHeader()->setVisible(false);
  examples_->setWordWrap(false);
  examples_->setToolTip(tr("The examples the selected pair disagrees on, in the file's order (hover a prompt for its "
                           "whole text)"));
  everyPair_ = makeCheck(this, tr("every pair"), QStringLiteral("zeroShotEveryPair"),
                         tr("Pair each run with every later one, not only the later ones with the first (p-values "
                            "per pair, not corrected for their number)"));
  connect(everyPair_, &QCheckBox::toggled, this, [this] {
    if (running_) return;
    try {
      showPairs();
    } catch (const Error& e) {
      status_->setText(QString::fromStdString(e.what()));
    }
  });
  copyButton_ = new QPushButton(tr("Copy as Markdown"), this);
  copyButton_->setObjectName(QStringLiteral("zeroShotCopy"));
  connect(copyButton_, &QPushButton::clicked, this, [this] { QApplication::clipboard()->setText(markdown()); });

  auto* taskButtons = new QHBoxLayout;
  taskButtons->addWidget(addButton_);
  taskButtons->addWidget(removeButton_);
  taskButtons->addWidget(fewshotButton_);
  taskButtons->addStretch(1);
  auto* taskPane = new QWidget(this);
  auto* taskLayout = new QVBoxLayout(taskPane);
  taskLayout->setContentsMargins(0, 0, 0, 0);
  taskLayout->addWidget(tasks_, 1);
  taskLayout->addLayout(taskButtons);
  auto* top = new QSplitter(Qt::Horizontal, this);
  top->addWidget(runs_);
  top->addWidget(taskPane);
  top->setStretchFactor(1, 2);

  auto* options = new QHBoxLayout;
  const std::pair<QString, QSpinBox*> fields[] = {
      {tr("examples"), limit_}, {tr("shots"), shots_}, {tr("batch"), batch_}, {tr("max length"), length_}};
  for (const auto& [label, spin] : fields) {
    options->addWidget(new QLabel(label, this));
    options->addWidget(spin);
  }
  options->addWidget(storeCheck_);
  options->addWidget(everyCheckpoint_);
  options->addStretch(1);
  options->addWidget(storedButton_);
  options->addWidget(runButton_);
  options->addWidget(stopButton_);
  auto* resultButtons = new QHBoxLayout;
  resultButtons->addWidget(everyPair_);
  resultButtons->addStretch(1);
  resultButtons->addWidget(copyButton_);

  auto* split = new QSplitter(Qt::Vertical, this);
  split->addWidget(top);
  auto* lower = new QWidget(this);
  auto* lowerLayout = new QVBoxLayout(lower);
  lowerLayout->setContentsMargins(0, 0, 0, 0);
  lowerLayout->addLayout(options);
  lowerLayout->addWidget(progress_);
  lowerLayout->addWidget(status_);
  auto* examplesPane = new QWidget(this);  // the label and its table shown and hidden together
  auto* examplesLayout = new QVBoxLayout(examplesPane);
  examplesLayout->setContentsMargins(0, 0, 0, 0);
  examplesLayout->addWidget(examplesLabel_);
  examplesLayout->addWidget(examples_, 1);
  examplesPane->hide();  // until a pair is selected
  auto* tables = new QSplitter(Qt::Vertical, this);  // results, pairs and disagreements, each resizable
  tables->setChildrenCollapsible(false);
  tables->addWidget(results_);
  tables->addWidget(pairs_);
  tables->addWidget(examplesPane);
  tables->setStretchFactor(0, 2);
  tables->setStretchFactor(1, 1);
  tables->setStretchFactor(2, 2);
  lowerLayout->addWidget(tables, 1);
  lowerLayout->addLayout(resultButtons);
  split->addWidget(lower);
  split->setStretchFactor(1, 2);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(split);

  thread_ = new QThread(this);
  thread_->setObjectName(QStringLiteral("routelab-tasks"));
  worker_ = new ZeroShotWorker(store_->dbPath());
  worker_->moveToThread(thread_);
  connect(thread_, &QThread::finished, worker_, &QObject::deleteLater);
  connect(worker_, &ZeroShotWorker::progressed, this, &ZeroShotView::onProgress, Qt::QueuedConnection);
  connect(worker_, &ZeroShotWorker::runDone, this, &ZeroShotView::onRunDone, Qt::QueuedConnection);
  connect(worker_, &ZeroShotWorker::finished, this, &ZeroShotView::onFinished, Qt::QueuedConnection);
  thread_->start();
  connect(store_, &StoreService::runsLoaded, this, &ZeroShotView::onRunsLoaded);
  restoreChoices();
  for (QSpinBox* spin : {limit_, shots_, batch_, length_})
    connect(spin, &QSpinBox::valueChanged, this, [this] { saveChoices(); });
  for (QCheckBox* check : {storeCheck_, everyCheckpoint_, everyPair_})
    connect(check, &QCheckBox::toggled, this, [this] { saveChoices(); });
  updateControls();
}

ZeroShotView::~ZeroShotView() {
  worker_->stopFlag() = true;  // a job in progress stops at its next batch
  thread_->quit();
  thread_->wait();
}

void ZeroShotView::onRunsLoaded(const QList<RunSummary>& runs) {
  static const auto languageModels = [] {
    QSet<QString> ids;
    for (const auto& id : architecture_ids(Task::LanguageModel)) ids.insert(QString::fromStdString(id));
    return ids;
  }();
  QSet<qint64> checked(wanted_);
  for (const qint64 id : checkedRuns()) checked.insert(id);
  const QSignalBlocker blocker(runs_);
  runs_->clear();
  for (const RunSummary& r : runs) {
    if (!languageModels.contains(r.arch) || r.checkpointStep < 0) continue;
    auto* item = new QListWidgetItem(
        QStringLiteral("%1 · %2 · %3 · step %4").arg(r.id).arg(r.name, r.arch).arg(r.checkpointStep), runs_);
    item->setData(Qt::UserRole, r.id);
    item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
    item->setCheckState(checked.contains(r.id) ? Qt::Checked : Qt::Unchecked);
    wanted_.remove(r.id);
  }
  updateControls();
}

void ZeroShotView::checkRuns(const QList<qint64>& ids) {
  wanted_ = QSet<qint64>(ids.begin(), ids.end());
  const QSignalBlocker blocker(runs_);
  for (int i = 0; i < runs_->count(); ++i) {
    const qint64 id = runs_->item(i)->data(Qt::UserRole).toLongLong();
    runs_->item(i)->setCheckState(wanted_.contains(id) ? Qt::Checked : Qt::Unchecked);
    wanted_.remove(id);
  }
  updateControls();
}

QList<qint64> ZeroShotView::checkedRuns() const {
  QList<qint64> ids;
  for (int i = 0; i < runs_->count(); ++i)
    if (runs_->item(i)->checkState() == Qt::Checked) ids << runs_->item(i)->data(Qt::UserRole).toLongLong();
  std::sort(ids.begin(), ids.end());  // scored, and paired against the first, in the order they were made
  return ids;
}

bool ZeroShotView::addTask(const QString& path, const QString& name, const QString& format,
                           const QString& fewshotPath) {
  const QString file = QFileInfo(path).absoluteFilePath();
  for (int row = 0; row < tasks_->rowCount(); ++row)
    if (tasks_->item(row, kTaskFile)->text() == file) return false;
  const QSignalBlocker blocker(tasks_);
  const int row = tasks_->rowCount();
  tasks_->insertRow(row);
  tasks_->setItem(row, kTaskName, new QTableWidgetItem(name.isEmpty() ? QFileInfo(path).completeBaseName() : name));
  auto* formats = new QComboBox(tasks_);
  formats->addItem(tr("auto"), QString());
  for (const auto& f : task_formats()) formats->addItem(QString::fromStdString(f), QString::fromStdString(f));
  formats->setCurrentIndex(std::max(0, formats->findData(format)));
  formats->setToolTip(tr("auto: read from the first line's keys (a file not ending in .jsonl or .json is text)"));
  connect(formats, &QComboBox::currentIndexChanged, this, [this] { saveChoices(); });
  tasks_->setCellWidget(row, kTaskFormat, formats);
  auto* fileItem = new QTableWidgetItem(file);
  fileItem->setFlags(fileItem->flags() & ~Qt::ItemIsEditable);
  fileItem->setToolTip(file);
  tasks_->setItem(row, kTaskFile, fileItem);
  auto* fewshotItem = new QTableWidgetItem(fewshotPath);
  fewshotItem->setToolTip(tr("Few-shot examples from this file (empty: the task's own file); used when shots > 0"));
  tasks_->setItem(row, kTaskFewshot, fewshotItem);
  saveChoices();
  updateControls();
  return true;
}

QStringList ZeroShotView::taskSpecs() const {
  QStringList specs;
  for (int row = 0; row < tasks_->rowCount(); ++row) {
    const QString name = tasks_->item(row, kTaskName)->text().trimmed();
    const auto* formats = qobject_cast<QComboBox*>(tasks_->cellWidget(row, kTaskFormat));
    const QString format = formats ? formats->currentData().toString() : QString();
    QString spec = tasks_->item(row, kTaskFile)->text();
    if (!name.isEmpty()) spec = name + QLatin1Char('=') + spec;
    if (!format.isEmpty()) spec += QLatin1Char(':') + format;
    specs << spec;
  }
  return specs;
}

QStringList ZeroShotView::fewshotSpecs() const {
  QStringList specs;
  for (int row = 0; row < tasks_->rowCount(); ++row) {
    const QString file = tasks_->item(row, kTaskFewshot)->text().trimmed();
    if (file.isEmpty()) continue;
    QString name = tasks_->item(row, kTaskName)->text().trimmed();  // the name taskSpecs() gives the task
    if (name.isEmpty()) name = QFileInfo(tasks_->item(row, kTaskFile)->text()).completeBaseName();
    specs << name + QLatin1Char('=') + file;
  }
  return specs;
}

void ZeroShotView::chooseFewshotFile() {
  const QModelIndexList rows = tasks_->selectionModel()->selectedRows();
  if (rows.isEmpty()) {
    status_->setText(tr("Select the tasks whose few-shot file to choose."));
    return;
  }
  const QString file = QFileDialog::getOpenFileName(this, tr("Few-shot examples"), QString(),
                                                    tr("Task files (*.jsonl *.json);;All files (*)"));
  if (file.isEmpty()) return;
  for (const QModelIndex& index : rows) tasks_->item(index.row(), kTaskFewshot)->setText(file);
}

void ZeroShotView::addFiles() {
  const QStringList files = QFileDialog::getOpenFileNames(
      this, tr("Task files"), QString(), tr("Task files (*.jsonl *.json *.txt);;All files (*)"));
  for (const QString& file : files) addTask(file);
}

void ZeroShotView::removeSelectedTasks() {
  QList<int> rows;
  for (const QModelIndex& index : tasks_->selectionModel()->selectedRows()) rows << index.row();
  std::sort(rows.begin(), rows.end(), std::greater<>());
  for (const int row : rows) tasks_->removeRow(row);
  saveChoices();
  updateControls();
}

void ZeroShotView::start() {
  if (running_) return;
  ZeroShotJob job;
  job.runIds = checkedRuns();
  job.tasks = taskSpecs();
  if (job.runIds.isEmpty() || job.tasks.isEmpty()) {
    status_->setText(job.runIds.isEmpty() ? tr("Check at least one run.") : tr("Add at least one task file."));
    return;
  }
  job.limit = limit_->value();
  job.batchSize = batch_->value();
  job.maxLength = length_->value();
  job.store = storeCheck_->isChecked();
  job.everyCheckpoint = everyCheckpoint_->isChecked();
  job.fewshot = shots_->value();
  if (job.fewshot > 0) job.fewshotFrom = fewshotSpecs();
  launch(job, tr("Opening run %1…").arg(job.runIds.front()));
}

void ZeroShotView::showStored() {
  if (running_) return;
  ZeroShotJob job;
  job.runIds = checkedRuns();
  if (job.runIds.isEmpty()) {
    status_->setText(tr("Check at least one run."));
    return;
  }
  job.stored = true;
  launch(job, tr("Reading the kept results…"));
}

void ZeroShotView::launch(const ZeroShotJob& job, const QString& status) {
  running_ = true;
  readingStored_ = job.stored;
  failed_ = 0;
  outcomes_.clear();
  results_->setRowCount(0);
  pairs_->setRowCount(0);
  pairs_->hide();
  showDisagreements();
  progress_->setRange(0, 0);  // busy until the first batch is scored
  status_->setText(status);
  worker_->stopFlag() = false;
  QMetaObject::invokeMethod(worker_, [worker = worker_, job] { worker->run(job); }, Qt::QueuedConnection);
  updateControls();
}

void ZeroShotView::stop() {
  if (!running_) return;
  worker_->stopFlag() = true;
  status_->setText(tr("Stopping at the next batch…"));
}

void ZeroShotView::onProgress(int run, int runs, const QString& task, qint64 scored, qint64 total) {
  progress_->setRange(0, static_cast<int>(std::min<qint64>(total, 1'000'000'000)));
  progress_->setValue(static_cast<int>(std::min<qint64>(scored, 1'000'000'000)));
  if (!worker_->stopFlag().load())
    status_->setText(tr("Run %1 of %2, task %3: %4 of %5 requests scored")
                         .arg(run + 1).arg(runs).arg(task).arg(scored).arg(total));
}

void ZeroShotView::onRunDone(const ZeroShotOutcome& outcome) {
  outcomes_ << outcome;
  if (!outcome.error.isEmpty()) ++failed_;
  appendResultRows(outcome);
}

void ZeroShotView::appendResultRows(const ZeroShotOutcome& outcome) {
  const auto add = [this](const QStringList& cells, const QString& tip) {
    const int row = results_->rowCount();
    results_->insertRow(row);
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      item->setToolTip(tip);
      if (c >= 2) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      results_->setItem(row, c, item);
    }
  };
  if (!outcome.error.isEmpty()) {
    add({QString::number(outcome.runId), tr("error"), outcome.error}, outcome.error);
    results_->setSpan(results_->rowCount() - 1, 2, 1, results_->columnCount() - 2);
    return;
  }
  const ZeroShotReport& r = outcome.report;
  const QString run =
      QStringLiteral("%1 · %2 · step %3").arg(r.run_id).arg(QString::fromStdString(r.name)).arg(r.step);
  for (const TaskResult& t : r.tasks) {
    const double ppl = t.kind == TaskKind::Perplexity ? t.word_perplexity : t.perplexity;
    const auto note = t.scoring_note();
    add({run, QString::fromStdString(t.name), QString::number(t.examples), valueWithError(t.acc, t.acc_stderr),
         valueWithError(t.acc_norm, t.acc_norm_stderr), fixedOrDash(ppl, 3), fixedOrDash(t.flops_ratio, 3),
         fixedOrDash(100.0 * t.routed_fraction, 1) + QLatin1Char('%'),
         QStringLiteral("%1 s").arg(t.seconds, 0, 'f', 1)},
        tr("%1 (%2, step %3): %4, %5 requests, %6 cut to %7 tokens; perplexity is per word for text tasks")
                .arg(QString::fromStdString(r.name), QString::fromStdString(r.arch))
                .arg(r.step)
                .arg(QString::fromStdString(t.path))
                .arg(t.requests)
                .arg(t.truncated)
                .arg(r.max_length) +
            (note.empty() ? QString() : QStringLiteral("; ") + QString::fromStdString(note)));
  }
  results_->resizeColumnsToContents();
}

void ZeroShotView::onFinished(bool stopped) {
  running_ = false;
  progress_->setRange(0, 1);
  progress_->setValue(stopped ? 0 : 1);
  const int done = static_cast<int>(outcomes_.size()) - failed_;
  QString text = readingStored_ ? tr("The kept results of %1 run(s), each task's latest scoring.").arg(done)
                 : stopped      ? tr("Stopped: %1 run checkpoint(s) scored before it.").arg(done)
                                : tr("%1 run checkpoint(s) scored.").arg(done);
  if (failed_ > 0) text += tr(" %1 failed (see the table).").arg(failed_);
  if (!readingStored_ && storeCheck_->isChecked() && done > 0) text += tr(" Results kept with the runs.");
  try {
    showPairs();
  } catch (const Error& e) {
    text += QLatin1Char(' ') + QString::fromStdString(e.what());
  }
  status_->setText(text);
  updateControls();
  Q_EMIT finished();
}

void ZeroShotView::showPairs() {
  pairs_->setRowCount(0);
  QList<int> scored;  // outcomes_'s index of each run's latest checkpoint, in the order the runs were scored
  std::vector<ZeroShotReport> reports;
  for (int i = 0; i < outcomes_.size(); ++i) {
    const ZeroShotOutcome& o = outcomes_[i];
    if (!o.error.isEmpty()) continue;
    if (!scored.isEmpty() && outcomes_[scored.back()].report.run_id == o.report.run_id)
      scored.back() = i;  // checkpoints come oldest first
    else
      scored << i;
  }
  for (const int i : scored) reports.push_back(outcomes_[i].report);
  const auto outcomeOf = [&](std::int64_t runId) {
    for (const int i : scored)
      if (outcomes_[i].report.run_id == runId) return i;
    return -1;
  };
  for (const PairedComparison& c : compare_runs(reports, everyPair_->isChecked())) {
    const int row = pairs_->rowCount();
    pairs_->insertRow(row);
    const QStringList cells = {
        QString::fromStdString(c.task),
        QString::fromStdString(c.measure),
        QStringLiteral("%1: %2").arg(c.run_a).arg(c.a, 0, 'f', 4),
        QStringLiteral("%1: %2").arg(c.run_b).arg(c.b, 0, 'f', 4),
        QStringLiteral("%1 (%2, %3)")
            .arg(c.difference, 0, 'f', 4)
            .arg(fixedOrDash(c.ci_low, 4), fixedOrDash(c.ci_high, 4)),
        QString::number(c.only_a),
        QString::number(c.only_b),
        QString::number(c.p_value, 'g', 3)};
    for (int col = 0; col < cells.size(); ++col) {
      auto* item = new QTableWidgetItem(cells[col]);
      if (col >= 4) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      pairs_->setItem(row, col, item);
    }
    pairs_->item(row, 0)->setData(Qt::UserRole, QList<QVariant>{outcomeOf(c.run_a), outcomeOf(c.run_b)});
  }
  pairs_->setVisible(pairs_->rowCount() > 0);
  pairs_->resizeColumnsToContents();
}

void ZeroShotView::showDisagreements() {
  examples_->setRowCount(0);
  const QList<QTableWidgetItem*> selected = pairs_->selectedItems();
  const QTableWidgetItem* first = selected.isEmpty() ? nullptr : pairs_->item(selected.first()->row(), 0);
  const QList<QVariant> pair = first ? first->data(Qt::UserRole).toList() : QList<QVariant>();
  examples_->parentWidget()->setVisible(pair.size() == 2);
  if (pair.size() != 2) return;
  const ZeroShotOutcome& a = outcomes_.at(pair[0].toInt());
  const ZeroShotOutcome& b = outcomes_.at(pair[1].toInt());
  const std::string task = first->text().toStdString();
  const std::string measure = pairs_->item(first->row(), 1)->text().toStdString();
  static const std::vector<ZeroShotTask> none;
  const std::vector<ZeroShotTask>& texts = a.tasks ? *a.tasks : none;
  const auto found = std::find_if(texts.begin(), texts.end(), [&](const auto& t) { return t.name == task; });
  const bool text_at_hand = found != texts.end() && !found->examples.empty();
  const std::vector<Disagreement> rows = disagreements(a.report, b.report, task, measure);
  examplesLabel_->setText(tr("%1 examples of %2 where runs %3 and %4 disagree on %5 (right for one of them only):")
                              .arg(rows.size())
                              .arg(QString::fromStdString(task))
                              .arg(a.report.run_id)
                              .arg(b.report.run_id)
                              .arg(QString::fromStdString(measure)));
  constexpr int kPromptChars = 160;
  const auto choice = [&](const ExampleText& text, std::int64_t pred) {
    if (pred >= 0 && pred < static_cast<std::int64_t>(text.choices.size()))
      return QString::fromStdString(text.choices[static_cast<std::size_t>(pred)]).trimmed();
    return pred >= 0 ? tr("choice %1").arg(pred) : QString();  // the task file is not at hand
  };
  examples_->setRowCount(static_cast<int>(rows.size()));
  for (int row = 0; row < examples_->rowCount(); ++row) {
    const Disagreement& d = rows[static_cast<std::size_t>(row)];
    const ExampleText text = text_at_hand ? example_text(found->examples.at(static_cast<std::size_t>(d.example)))
                                          : ExampleText{};
    const QString prompt = text_at_hand ? QString::fromStdString(text.prompt).simplified()
                                        : tr("(the task file is no longer at hand)");
    const bool cloze = d.pred_a < 0;
    const QString right = tr("right"), wrong = tr("wrong");
    const QStringList cells = {
        QString::number(d.example),
        QString::number(d.right_a ? a.report.run_id : b.report.run_id),
        prompt.size() > kPromptChars ? QStringLiteral("…") + prompt.right(kPromptChars - 1) : prompt,
        cloze && !text_at_hand ? QString() : choice(text, d.label),
        cloze ? (d.right_a ? right : wrong) : choice(text, d.pred_a),
        cloze ? (d.right_a ? wrong : right) : choice(text, d.pred_b)};
    for (int col = 0; col < cells.size(); ++col) {
      auto* item = new QTableWidgetItem(cells[col]);
      if (col == 2) item->setToolTip(QString::fromStdString(text.prompt));
      if (col < 2) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      examples_->setItem(row, col, item);
    }
  }
  examples_->resizeColumnsToContents();
  examples_->setColumnWidth(2, std::min(examples_->columnWidth(2), 480));
}

QString ZeroShotView::markdown() const {
  QString text = tableMarkdown(results_, 2);
  if (pairs_->rowCount() > 0) text += QLatin1Char('\n') + tableMarkdown(pairs_, 4);
  return text;
}

void ZeroShotView::saveChoices() const {
  QSettings settings;
  settings.setValue(QStringLiteral("zeroShot/tasks"), taskSpecs());
  QStringList fewshot;  // a row each, in the tasks' order
  for (int row = 0; row < tasks_->rowCount(); ++row) fewshot << tasks_->item(row, kTaskFewshot)->text();
  settings.setValue(QStringLiteral("zeroShot/fewshotFiles"), fewshot);
  settings.setValue(QStringLiteral("zeroShot/shots"), shots_->value());
  settings.setValue(QStringLiteral("zeroShot/limit"), limit_->value());
  settings.setValue(QStringLiteral("zeroShot/batch"), batch_->value());
  settings.setValue(QStringLiteral("zeroShot/length"), length_->value());
  settings.setValue(QStringLiteral("zeroShot/store"), storeCheck_->isChecked());
  settings.setValue(QStringLiteral("zeroShot/everyCheckpoint"), everyCheckpoint_->isChecked());
  settings.setValue(QStringLiteral("zeroShot/everyPair"), everyPair_->isChecked());
}

void ZeroShotView::restoreChoices() {
  const QSettings settings;
  limit_->setValue(settings.value(QStringLiteral("zeroShot/limit"), 0).toInt());
  batch_->setValue(settings.value(QStringLiteral("zeroShot/batch"), 0).toInt());
  length_->setValue(settings.value(QStringLiteral("zeroShot/length"), 0).toInt());
  storeCheck_->setChecked(settings.value(QStringLiteral("zeroShot/store"), true).toBool());
  everyCheckpoint_->setChecked(settings.value(QStringLiteral("zeroShot/everyCheckpoint"), false).toBool());
  everyPair_->setChecked(settings.value(QStringLiteral("zeroShot/everyPair"), false).toBool());
  shots_->setValue(settings.value(QStringLiteral("zeroShot/shots"), 0).toInt());
  const QStringList tasks = settings.value(QStringLiteral("zeroShot/tasks")).toStringList();
  const QStringList fewshot = settings.value(QStringLiteral("zeroShot/fewshotFiles")).toStringList();
  for (int i = 0; i < tasks.size(); ++i) {
    try {
      const auto spec = parse_task_spec(tasks[i].toStdString());
      addTask(QString::fromStdString(spec.path), QString::fromStdString(spec.name),
              QString::fromStdString(spec.format), fewshot.value(i));
    } catch (const Error&) {  // a spec saved by another version: left out
    }
  }
}

void ZeroShotView::updateControls() {
  runButton_->setEnabled(!running_ && !checkedRuns().isEmpty() && tasks_->rowCount() > 0);
  storedButton_->setEnabled(!running_ && !checkedRuns().isEmpty());
  stopButton_->setEnabled(running_);
  for (QWidget* w : std::initializer_list<QWidget*>{runs_, tasks_, addButton_, removeButton_, fewshotButton_, limit_,
                                                   shots_, batch_, length_, storeCheck_, everyCheckpoint_})
    w->setEnabled(!running_);
}

}  // namespace routelab
