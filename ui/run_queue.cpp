// RunQueue: scheduling over N RunControllers, persistence through StoreService; RunQueuePanel: its dock.
#include "ui/run_queue.h"

#include <QDateTime>
#include <QDir>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QTableWidget>
#include <QThread>
#include <QVBoxLayout>

#include <algorithm>
#include <exception>

#include "core/config/sweep.h"
#include "core/run/queued_request.h"
#include "core/util/logging.h"
#include "core/util/paths.h"
#include "ui/run_controller.h"
#include "ui/runs_table_model.h"

namespace routelab {
namespace {

const QString kPending = QStringLiteral("pending");
const QString kRunning = QStringLiteral("running");
const QString kDone = QStringLiteral("done");
const QString kFailed = QStringLiteral("failed");
const QString kCancelled = QStringLiteral("cancelled");
const char* const kSettingsParallel = "queue/parallel";

bool isFinishedState(const QString& state) { return state == kDone || state == kFailed || state == kCancelled; }

}  // namespace

RunQueue::RunQueue(StoreService* store, QObject* parent) : QObject(parent), store_(store) {
  addController();
  connect(store_, &StoreService::queueLoaded, this, &RunQueue::onLoaded);
  connect(store_, &StoreService::queueItemStored, this, [this](qint64 key, qint64 id) {
    const int i = indexOf(key);
    if (i < 0) return;
    entries_[i].id = id;
    Q_EMIT queueChanged();
  });
  store_->requestQueueLoad(
      tr("interrupted: RouteLab ended while this item was running (its run is marked crashed; resume it from the "
         "runs browser)"));
}

RunQueue::~RunQueue() {
  // Runs still in progress (the window normally stopped them first): stop and wait, then keep them resumable.
  const auto active = active_;
  active_.clear();
  for (auto it = active.begin(); it != active.end(); ++it) {
    RunController* controller = it.key();
    const qint64 runId = controller->currentRunId();
    const int processes = controller->currentRequest().processes;
    controllers_.removeAll(controller);
    delete controller;  // stops the run and waits for its thread; the run ends `stopped`
    if (runId > 0) {
      RunRequest resume;
      resume.resumeRunId = runId;
      resume.processes = processes;
      setState(it.value(), kPending, runId, tr("stopped when RouteLab closed; continues at the next start"),
               requestToJson(resume));
    } else {
      setState(it.value(), kFailed, 0, tr("stopped when RouteLab closed before the run was stored"));
    }
  }
}

int RunQueue::maxParallel() { return std::max(1, QThread::idealThreadCount()); }

void RunQueue::setParallel(int n) {
  n = std::clamp(n, 1, maxParallel());
  if (n == parallel_) return;
  parallel_ = n;
  while (controllers_.size() < parallel_) addController();
  logger("ui")->info("run queue: up to {} run(s) side by side{}", parallel_,
                     threadsPerRun() > 0 ? ", " + std::to_string(threadsPerRun()) + " threads each" : std::string());
  schedule();
  Q_EMIT queueChanged();
}

int RunQueue::threadsPerRun() const { return parallel_ > 1 ? std::max(1, maxParallel() / parallel_) : 0; }

RunController* RunQueue::addController() {
  auto* controller = new RunController(this);
  controllers_.push_back(controller);
  connect(controller, &RunController::runStarted, this,
          [this, controller](const RunStartInfo& info) { onStarted(controller, info); });
  connect(controller, &RunController::progressReceived, this, [this, controller](const ProgressBatch& batch) {
    Q_EMIT progressReceived(controller->currentRunId(), batch);
  });
  connect(controller, &RunController::runFinished, this,
          [this, controller](const RunResult& result) { onFinished(controller, result); });
  connect(controller, &RunController::runningChanged, this, [this] { Q_EMIT runningChanged(isRunning()); });
  return controller;
}

RunController* RunQueue::controllerOf(qint64 runId) const {
  if (runId <= 0) return nullptr;
  for (RunController* c : controllers_)
    if (c->isRunning() && c->currentRunId() == runId) return c;
  return nullptr;
}

const RunCurves* RunQueue::liveCurves(qint64 runId) const {
  if (runId <= 0) return nullptr;
  for (RunController* c : controllers_)
    if (c->currentRunId() == runId) return &c->liveCurves();
  return nullptr;
}

bool RunQueue::isRunning() const { return runningCount() > 0; }

int RunQueue::runningCount() const {
  return static_cast<int>(std::count_if(controllers_.begin(), controllers_.end(),
                                        [](const RunController* c) { return c->isRunning(); }));
}

bool RunQueue::canStop() const {
  return std::any_of(controllers_.begin(), controllers_.end(),
                     [](const RunController* c) { return c->isRunning() && !c->isStopping(); });
}

int RunQueue::indexOf(qint64 key) const {
  for (int i = 0; i < entries_.size(); ++i)
    if (entries_[i].key == key) return i;
  return -1;
}

const QueueEntry* RunQueue::entry(qint64 key) const {
  const int i = indexOf(key);
  return i < 0 ? nullptr : &entries_[i];
}

qint64 RunQueue::add(const QString& requestJson, const QString& state) {
  QueueEntry e;
  e.key = nextKey_--;
  e.requestJson = requestJson;
  e.state = state;
  e.createdAt = QDateTime::currentMSecsSinceEpoch() / 1000.0;
  entries_.push_back(e);
  store_->requestQueueAdd(e.key, requestJson, state);
  Q_EMIT queueChanged();
  return e.key;
}

qint64 RunQueue::submit(const RunRequest& request, const QString& tags) {
  const qint64 key = add(requestToJson(request, tags));
  if (!shuttingDown_) held_ = false;
  schedule();
  return key;
}

qint64 RunQueue::submitResume(qint64 runId) {
  RunRequest request;
  request.resumeRunId = runId;
  return submit(request);
}

int RunQueue::submitSweep(const QString& path, QString* error) {
  SweepPlan plan;
  try {
    plan = load_sweep(path.toStdString());
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return -1;
  }
  const QString tag = QString::fromStdString(plan.tag());
  for (const SweepPoint& point : plan.points) {
    RunRequest request;
    request.preset = QString::fromStdString(point.origin);
    request.configJson = QString::fromStdString(point.config.doc.dump());
    request.name = QString::fromStdString(point.name);
    submit(request, tag);
  }
  logger("ui")->info("run queue: sweep '{}' added {} run(s)", plan.name, plan.points.size());
  return static_cast<int>(plan.points.size());
}

void RunQueue::setState(qint64 key, const QString& state, qint64 runId, const QString& message,
                        const QString& requestJson) {
  const int i = indexOf(key);
  if (i >= 0) {
    QueueEntry& e = entries_[i];
    e.state = state;
    if (runId > 0) e.runId = runId;
    e.message = message;
    if (!requestJson.isEmpty()) e.requestJson = requestJson;
  }
  store_->requestQueueUpdate(key, state, runId, message, requestJson);
  Q_EMIT queueChanged();
}

void RunQueue::schedule() {
  if (held_ || scheduling_) return;
  scheduling_ = true;
  for (int i = 0; i < entries_.size(); ++i) {
    if (entries_[i].state != kPending) continue;
    RunController* free = nullptr;
    for (int slot = 0; slot < parallel_ && slot < controllers_.size(); ++slot)
      if (!controllers_[slot]->isRunning()) {
        free = controllers_[slot];
        break;
      }
    if (!free) break;
    startEntry(entries_[i], free);
  }
  scheduling_ = false;
}

bool RunQueue::startEntry(QueueEntry& entry, RunController* controller) {
  RunRequest request;
  try {
    request = requestFromJson(entry.requestJson, nullptr, QStringLiteral("queue item %1").arg(entry.key));
  } catch (const std::exception& e) {  // a hand-edited or foreign item: it fails, the queue goes on
    setState(entry.key, kFailed, 0, QString::fromUtf8(e.what()));
    return false;
  }
  request.dbPath = store_->dbPath();
  // Side by side, the runs share the cores (Torch's intra-op threads are set per training thread); a resumed
  // run gets the same share instead of the thread count stored with it.
  if (threadsPerRun() > 0 && request.resumeRunId == 0)
    request.sets << QStringLiteral("run.threads=%1").arg(threadsPerRun());
  if (threadsPerRun() > 0 && request.resumeRunId > 0) request.resumeThreads = threadsPerRun();
  const qint64 key = entry.key;
  if (!controller->start(request)) return false;
  active_.insert(controller, key);
  setState(key, kRunning, request.resumeRunId, QString());
  return true;
}

void RunQueue::onLoaded(const QList<QueueEntry>& stored) {
  QList<QueueEntry> merged = stored;
  merged.append(entries_);  // items added in this session were written after the read: they come last
  entries_ = merged;
  loaded_ = true;
  Q_EMIT queueChanged();
  Q_EMIT loaded();
  schedule();
}

void RunQueue::onStarted(RunController* controller, const RunStartInfo& info) {
  if (const qint64 key = active_.value(controller, 0)) {
    QString tags;
    if (const QueueEntry* e = entry(key)) {
      try {
        requestFromJson(e->requestJson, &tags);
      } catch (const std::exception&) {
        // it started, so it was read: nothing to add
      }
    }
    setState(key, kRunning, info.runId, QString());
    if (!tags.isEmpty()) {
      RunEdit edit;
      edit.tags = tags;
      store_->requestEdit({info.runId}, edit);
    }
  }
  Q_EMIT runStarted(info);
}

void RunQueue::onFinished(RunController* controller, const RunResult& result) {
  if (const qint64 key = active_.take(controller)) {
    const bool cancelled = cancelling_.remove(key);
    if (result.status == QLatin1String("finished")) {
      setState(key, kDone, result.runId, tr("finished at step %1").arg(result.lastStep));
    } else if (result.status == QLatin1String("stopped") && shuttingDown_ && result.runId > 0) {
      RunRequest resume;
      resume.resumeRunId = result.runId;
      resume.processes = controller->currentRequest().processes;
      setState(key, kPending, result.runId,
               tr("stopped at step %1 when RouteLab closed; continues at the next start").arg(result.lastStep),
               requestToJson(resume));
    } else if (result.status == QLatin1String("stopped")) {
      setState(key, kCancelled, result.runId,
               cancelled ? tr("cancelled at step %1").arg(result.lastStep) : tr("stopped at step %1").arg(result.lastStep));
    } else {
      setState(key, kFailed, result.runId, result.message);
    }
  }
  Q_EMIT runFinished(result);
  schedule();
}

void RunQueue::persistOrder() {
  QList<qint64> keys;
  for (const QueueEntry& e : entries_) keys << e.key;
  store_->requestQueueReorder(keys);
  Q_EMIT queueChanged();
}

void RunQueue::move(qint64 key, int delta) {
  const int from = indexOf(key);
  if (from < 0 || delta == 0) return;
  const int to = std::clamp(from + delta, 0, static_cast<int>(entries_.size()) - 1);
  if (to == from) return;
  entries_.move(from, to);
  persistOrder();
}

void RunQueue::remove(const QList<qint64>& keys) {
  QList<qint64> removed;
  for (qint64 key : keys) {
    const int i = indexOf(key);
    if (i < 0 || entries_[i].state == kRunning) continue;
    entries_.removeAt(i);
    removed << key;
  }
  if (removed.isEmpty()) return;
  store_->requestQueueRemove(removed);
  Q_EMIT queueChanged();
}

void RunQueue::cancel(qint64 key) {
  const int i = indexOf(key);
  if (i < 0) return;
  if (entries_[i].state == kPending) {
    setState(key, kCancelled, 0, tr("cancelled before it started"));
    return;
  }
  if (entries_[i].state != kRunning) return;
  for (auto it = active_.begin(); it != active_.end(); ++it)
    if (it.value() == key) {
      cancelling_.insert(key);
      it.key()->stop();
    }
  Q_EMIT queueChanged();
}

void RunQueue::clearFinished() {
  QList<qint64> keys;
  for (const QueueEntry& e : entries_)
    if (isFinishedState(e.state)) keys << e.key;
  remove(keys);
}

bool RunQueue::stopRun(qint64 runId) {
  RunController* target = runId > 0 ? controllerOf(runId) : nullptr;
  if (!target && runningCount() == 1)
    for (RunController* c : controllers_)
      if (c->isRunning()) target = c;
  if (!target || !target->isRunning() || target->isStopping()) return false;
  target->stop();
  Q_EMIT queueChanged();
  return true;
}

void RunQueue::stopAll() {
  held_ = true;
  for (RunController* c : controllers_)
    if (c->isRunning()) c->stop();
  Q_EMIT queueChanged();
}

void RunQueue::release() {
  if (shuttingDown_) return;
  held_ = false;
  schedule();
  Q_EMIT queueChanged();
}

void RunQueue::shutdown() {
  shuttingDown_ = true;
  stopAll();
}

QString RunQueue::requestToJson(const RunRequest& request, const QString& tags) {
  QueuedRequest q;
  q.resume_run = request.resumeRunId;
  q.processes = request.processes;
  q.preset = request.preset.toStdString();
  q.config_json = request.configJson.toStdString();
  for (const QString& set : request.sets) q.sets.push_back(set.toStdString());
  q.steps = request.stepsOverride;
  q.name = request.name.toStdString();
  q.tags = tags.toStdString();
  return QString::fromStdString(q.to_json());
}

RunRequest RunQueue::requestFromJson(const QString& json, QString* tags, const QString& where) {
  const QueuedRequest q = read_queued_request(json.toStdString(), where.toStdString());
  RunRequest r;
  r.resumeRunId = q.resume_run;
  r.processes = q.processes;
  r.preset = QString::fromStdString(q.preset);
  r.configJson = QString::fromStdString(q.config_json);
  for (const auto& set : q.sets) r.sets << QString::fromStdString(set);
  r.stepsOverride = q.steps;
  r.name = QString::fromStdString(q.name);
  if (tags) *tags = QString::fromStdString(q.tags);
  return r;
}

QString RunQueue::describe(const QString& requestJson) {
  QString tags;
  RunRequest r;
  try {
    r = requestFromJson(requestJson, &tags);
  } catch (const std::exception& e) {
    return tr("unreadable: %1").arg(QString::fromUtf8(e.what()));
  }
  const QString ranks = r.processes > 1 ? tr(" · %1 processes").arg(r.processes) : QString();
  if (r.resumeRunId > 0) return tr("resume run %1").arg(r.resumeRunId) + ranks;
  // The run's own name (architecture, distinguishing options, seed), then where it comes from.
  const QString name = runNameOf(r);
  // A config document (the designer's, a sweep point's) names the preset it started from.
  const QString origin = r.configJson.isEmpty() ? r.preset : tr("from %1").arg(r.preset);
  QString text = name.isEmpty() || name == r.preset ? origin : QStringLiteral("%1 (%2)").arg(name, origin);
  if (r.stepsOverride > 0) text += tr(" · %1 steps").arg(r.stepsOverride);
  if (!r.sets.isEmpty()) text += QStringLiteral(" · ") + r.sets.join(QLatin1Char(' '));
  return text + ranks;
}

RunQueuePanel::RunQueuePanel(RunQueue* queue, QWidget* parent) : QWidget(parent), queue_(queue) {
  table_ = new QTableWidget(0, 5, this);
  table_->setObjectName(QStringLiteral("queueTable"));
  table_->setHorizontalHeaderLabels({tr("#"), tr("Request"), tr("State"), tr("Run"), tr("Message")});
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setTabKeyNavigation(false);
  table_->verticalHeader()->setVisible(false);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setSectionResizeMode(1, QHeaderView::Stretch);
  table_->setWordWrap(false);

  auto button = [this](const QString& text, const QString& tip) {
    auto* b = new QPushButton(text, this);
    b->setToolTip(tip);
    return b;
  };
  up_ = button(tr("Up"), tr("Run the selected item earlier"));
  down_ = button(tr("Down"), tr("Run the selected item later"));
  remove_ = button(tr("Remove"), tr("Remove the selected items that are not running"));
  cancel_ = button(tr("Cancel"), tr("Cancel the selected items; a running one is stopped (checkpointed)"));
  clear_ = button(tr("Clear finished"), tr("Remove done, failed and cancelled items"));
  sweep_ = button(tr("Add sweep…"), tr("Queue every point of a sweep file (experiments/sweeps/*.json)"));
  release_ = button(tr("Start queue"), tr("The queue is held (after Stop): start its pending items"));
  parallel_ = new QSpinBox(this);
  parallel_->setObjectName(QStringLiteral("parallelRuns"));
  parallel_->setRange(1, RunQueue::maxParallel());
  parallel_->setToolTip(tr("Runs side by side (at most the %1 cores; they share the cores)").arg(RunQueue::maxParallel()));
  parallel_->setValue(std::clamp(QSettings().value(kSettingsParallel, 1).toInt(), 1, RunQueue::maxParallel()));
  queue_->setParallel(parallel_->value());
  summary_ = new QLabel(this);
  summary_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);  // clipped, not widening the strip

  // One row of controls under the table: the panel is a strip under the workspace.
  auto* buttons = new QHBoxLayout;
  for (QPushButton* b : {up_, down_, remove_, cancel_, clear_}) buttons->addWidget(b);
  buttons->addSpacing(12);
  buttons->addWidget(new QLabel(tr("Parallel runs"), this));
  buttons->addWidget(parallel_);
  buttons->addWidget(sweep_);
  buttons->addWidget(release_);
  buttons->addStretch(1);
  buttons->addWidget(summary_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(2);
  layout->addWidget(table_, 1);
  layout->addLayout(buttons);

  connect(up_, &QPushButton::clicked, this, [this] {
    for (qint64 key : selectedKeys()) queue_->move(key, -1);
  });
  connect(down_, &QPushButton::clicked, this, [this] {
    const QList<qint64> keys = selectedKeys();
    for (auto it = keys.rbegin(); it != keys.rend(); ++it) queue_->move(*it, +1);
  });
  connect(remove_, &QPushButton::clicked, this, [this] { queue_->remove(selectedKeys()); });
  connect(cancel_, &QPushButton::clicked, this, [this] {
    for (qint64 key : selectedKeys()) queue_->cancel(key);
  });
  connect(clear_, &QPushButton::clicked, queue_, &RunQueue::clearFinished);
  connect(sweep_, &QPushButton::clicked, this, &RunQueuePanel::addSweep);
  connect(release_, &QPushButton::clicked, queue_, &RunQueue::release);
  connect(parallel_, &QSpinBox::valueChanged, this, [this](int n) {
    queue_->setParallel(n);
    QSettings().setValue(kSettingsParallel, n);
  });
  connect(queue_, &RunQueue::queueChanged, this, &RunQueuePanel::rebuild);
  connect(queue_, &RunQueue::runningChanged, this, &RunQueuePanel::updateButtons);
  connect(table_, &QTableWidget::itemSelectionChanged, this, &RunQueuePanel::updateButtons);
  rebuild();
}

QList<qint64> RunQueuePanel::selectedKeys() const {
  QList<qint64> keys;
  for (int row = 0; row < table_->rowCount(); ++row)
    if (table_->item(row, 0) && table_->item(row, 0)->isSelected())
      keys << table_->item(row, 0)->data(Qt::UserRole).toLongLong();
  return keys;
}

void RunQueuePanel::rebuild() {
  const QList<qint64> selected = selectedKeys();
  const QList<QueueEntry>& entries = queue_->entries();
  const QSignalBlocker blocker(table_);
  table_->setRowCount(static_cast<int>(entries.size()));
  int pending = 0, running = 0;
  for (int row = 0; row < entries.size(); ++row) {
    const QueueEntry& e = entries[row];
    pending += e.state == kPending;
    running += e.state == kRunning;
    const QString cells[] = {QString::number(row + 1), RunQueue::describe(e.requestJson), e.state,
                             e.runId > 0 ? QString::number(e.runId) : QString(), e.message};
    for (int column = 0; column < 5; ++column) {
      auto* item = new QTableWidgetItem(cells[column]);
      item->setData(Qt::UserRole, e.key);
      if (column == 2) {
        const QString status = e.state == kDone ? QStringLiteral("finished")
                               : e.state == kCancelled ? QStringLiteral("stopped")
                                                       : e.state;
        item->setForeground(RunsTableModel::statusColor(status));
      }
      if (column == 4) item->setToolTip(e.message);
      table_->setItem(row, column, item);
    }
    if (selected.contains(e.key)) table_->selectRow(row);
  }
  QString text = tr("%1 pending, %2 running, up to %3 at once").arg(pending).arg(running).arg(queue_->parallel());
  if (queue_->isHeld() && pending > 0) text += tr(" · held");
  if (!queue_->isLoaded()) text += tr(" · loading the stored queue…");
  summary_->setText(text);
  summary_->setToolTip(text);
  updateButtons();
}

void RunQueuePanel::updateButtons() {
  bool anyMovable = false, anyCancellable = false, anyRemovable = false, anyFinished = false;
  const QList<qint64> keys = selectedKeys();
  for (const QueueEntry& e : queue_->entries()) {
    anyFinished = anyFinished || isFinishedState(e.state);
    if (!keys.contains(e.key)) continue;
    anyMovable = anyMovable || e.state != kRunning;
    anyCancellable = anyCancellable || e.state == kPending || e.state == kRunning;
    anyRemovable = anyRemovable || e.state != kRunning;
  }
  up_->setEnabled(anyMovable);
  down_->setEnabled(anyMovable);
  remove_->setEnabled(anyRemovable);
  cancel_->setEnabled(anyCancellable);
  clear_->setEnabled(anyFinished);
  release_->setVisible(queue_->isHeld());
}

void RunQueuePanel::addSweep() {
  const QString dir = QDir(QString::fromStdString(experiments_dir())).filePath(QStringLiteral("sweeps"));
  const QString path =
      QFileDialog::getOpenFileName(this, tr("Add a sweep to the queue"), dir, tr("Sweep files (*.json)"));
  if (path.isEmpty()) return;
  QString error;
  if (queue_->submitSweep(path, &error) < 0)
    QMessageBox::warning(this, tr("Sweep"), tr("The sweep was not queued:\n%1").arg(error));
}

}  // namespace routelab
