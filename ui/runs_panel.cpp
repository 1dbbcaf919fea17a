// RunsPanel: QTableView over RunsFilterProxy(RunsTableModel), search box, archived toggle, context menu.
#include "ui/runs_panel.h"

#include <QAction>
#include <QCheckBox>
#include <QClipboard>
#include <QEvent>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMessageBox>
#include <QRegularExpression>
#include <QSettings>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>

#include "ui/run_editor.h"
#include "ui/run_queue.h"
#include "ui/runs_table_model.h"
#include "ui/store_service.h"

namespace routelab {
namespace {

const char* const kSettingsConfigColumns = "runs/configColumns";

/// "train.lr, model.capacity" -> the keys.
QStringList configKeys(const QString& text) {
  return text.split(QRegularExpression(QStringLiteral("[\\s,]+")), Qt::SkipEmptyParts);
}

}  // namespace

RunsPanel::RunsPanel(QWidget* parent) : QWidget(parent) {
  model_ = new RunsTableModel(this);
  proxy_ = new RunsFilterProxy(this);
  proxy_->setSourceModel(model_);
  view_ = new QTableView(this);
  view_->setObjectName(QStringLiteral("runsTable"));
  view_->setModel(proxy_);
  view_->setSortingEnabled(true);
  view_->sortByColumn(RunsTableModel::IdColumn, Qt::DescendingOrder);
  view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  view_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  view_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  view_->setTabKeyNavigation(false);  // Tab leaves the table (arrows move between rows)
  view_->setAlternatingRowColors(true);
  view_->setWordWrap(false);
  view_->setContextMenuPolicy(Qt::CustomContextMenu);
  view_->verticalHeader()->setVisible(false);
  view_->verticalHeader()->setDefaultSectionSize(view_->fontMetrics().height() + 6);
  // Numbers and words that must stay readable fit their contents; the name takes what is left (fitNameColumn).
  QHeaderView* header = view_->horizontalHeader();
  header->setHighlightSections(false);
  header->setMinimumSectionSize(36);
  header->setSectionResizeMode(QHeaderView::ResizeToContents);
  header->setSectionResizeMode(RunsTableModel::NameColumn, QHeaderView::Interactive);
  view_->viewport()->installEventFilter(this);
  connect(header, &QHeaderView::sectionResized, this, [this](int column) {
    if (column != RunsTableModel::NameColumn) fitNameColumn();
  });
  const auto refit = [this] { QTimer::singleShot(0, this, &RunsPanel::fitNameColumn); };
  connect(proxy_, &QAbstractItemModel::modelReset, this, refit);
  connect(proxy_, &QAbstractItemModel::layoutChanged, this, refit);
  connect(proxy_, &QAbstractItemModel::dataChanged, this, refit);
  connect(proxy_, &QAbstractItemModel::rowsInserted, this, refit);

  search_ = new QLineEdit(this);
  search_->setObjectName(QStringLiteral("runsSearch"));
  search_->setPlaceholderText(tr("Search name, architecture, tags, notes… or lr<0.01 best<2.4"));
  search_->setToolTip(
      tr("Every word must occur in the run's id, name, architecture, seed, status, tags, notes or config columns.\n"
         "A comparison key<value, <=, >, >=, = or != must hold for the run: key is a field (id, seed, steps, val, "
         "best, train, name, arch, preset, status, device, tags) or a config key, in full (train.lr) or by its last "
         "part (lr, capacity). Numbers compare by value, other values as text (= and != only).\n"
         "Terms side by side must all hold; or between them makes either do; -term or not term negates one; "
         "parentheses group.\n"
         "Example: mod capacity>=0.5 lr<0.01 best<2.4, or arch=mod (lr<0.003 or capacity=0.5) -failed"));
  search_->setClearButtonEnabled(true);
  showArchived_ = new QCheckBox(tr("Show archived"), this);
  showArchived_->setObjectName(QStringLiteral("showArchived"));
  configColumns_ = new QLineEdit(this);
  configColumns_->setObjectName(QStringLiteral("runsConfigColumns"));
  configColumns_->setPlaceholderText(tr("Config columns, e.g. train.lr model.capacity"));
  configColumns_->setToolTip(tr("Any config keys (section.key) as columns of the table: sort by one to group the runs "
                                "by it (the search box compares any config key: lr<0.01)"));
  configColumns_->setClearButtonEnabled(true);
  configColumns_->setText(QSettings().value(kSettingsConfigColumns).toString());
  model_->setConfigColumns(configKeys(configColumns_->text()));

  summary_ = new QLabel(tr("No runs stored yet"), this);
  summary_->setObjectName(QStringLiteral("runsSummary"));
  summary_->setContentsMargins(4, 0, 4, 0);

  auto* filterRow = new QHBoxLayout;
  filterRow->setContentsMargins(0, 0, 0, 0);
  filterRow->addWidget(search_, 2);
  filterRow->addWidget(configColumns_, 1);
  filterRow->addWidget(showArchived_);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(2);
  layout->addLayout(filterRow);
  layout->addWidget(view_, 1);
  layout->addWidget(summary_);

  buildActions();

  connect(search_, &QLineEdit::textChanged, this, [this](const QString& text) {
    proxy_->setSearchText(text);
    applySelection();
    updateSummary();
  });
  connect(configColumns_, &QLineEdit::textChanged, this, [this](const QString& text) {
    model_->setConfigColumns(configKeys(text));
    QSettings().setValue(kSettingsConfigColumns, text);
    applySelection();
    updateSummary();
  });
  connect(showArchived_, &QCheckBox::toggled, this, [this](bool show) {
    proxy_->setShowArchived(show);
    applySelection();
    updateSummary();
  });
  connect(view_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& current) {
            if (restoring_ || !current.isValid()) return;
            const qint64 id = current.data(RunsTableModel::RunIdRole).toLongLong();
            if (id == wanted_) return;
            wanted_ = id;
            Q_EMIT runSelected(id);
          });
  connect(view_->selectionModel(), &QItemSelectionModel::selectionChanged, this, [this] {
    updateActions();
    Q_EMIT runsSelected(selectedRunIds());
  });
  connect(view_, &QWidget::customContextMenuRequested, this, &RunsPanel::showMenu);
  connect(model_, &QAbstractItemModel::modelReset, this, &RunsPanel::applySelection);
  updateActions();
}

void RunsPanel::setServices(StoreService* store, RunQueue* queue) {
  store_ = store;
  queue_ = queue;
  connect(store_, &StoreService::runsEdited, this, [this](const QList<qint64>&, const QString& error) {
    if (!error.isEmpty()) showError(tr("Runs"), error);
    Q_EMIT editFinished(error);
  });
  connect(store_, &StoreService::runConfigLoaded, this,
          [this](qint64 runId, const QString& configJson, const QString& origin) {
            if (runId != cloning_) return;
            cloning_ = 0;
            Q_EMIT cloneRequested(configJson, origin);
          });
  connect(queue_, &RunQueue::runningChanged, this, &RunsPanel::updateActions);
}

void RunsPanel::buildActions() {
  auto make = [this](const QString& text, const QKeySequence& key, auto handler) {
    auto* action = new QAction(text, this);
    if (!key.isEmpty()) action->setShortcut(key);
    action->setShortcutContext(Qt::WidgetWithChildrenShortcut);  // the keys act on the table only
    view_->addAction(action);
    connect(action, &QAction::triggered, this, handler);
    return action;
  };
  rename_ = make(tr("&Rename…"), QKeySequence(Qt::Key_F2), [this] {
    const QList<RunSummary> runs = selectedRuns();
    if (runs.size() != 1) return;
    if (const auto name = askRunName(this, runs.first().name)) renameRun(runs.first().id, *name);
  });
  tags_ = make(tr("&Tags…"), QKeySequence(Qt::CTRL | Qt::Key_T), [this] {
    const QList<RunSummary> runs = selectedRuns();
    if (runs.isEmpty()) return;
    if (const auto tags = askRunTags(this, runs.first().tags, static_cast<int>(runs.size())))
      setTags(selectedRunIds(), *tags);
  });
  note_ = make(tr("&Note…"), QKeySequence(Qt::CTRL | Qt::Key_N), [this] {
    const QList<RunSummary> runs = selectedRuns();
    if (runs.isEmpty()) return;
    if (const auto note = askRunNote(this, runs.first().notes, static_cast<int>(runs.size())))
      setNote(selectedRunIds(), *note);
  });
  archive_ = make(tr("&Archive"), QKeySequence(Qt::CTRL | Qt::Key_E), [this] {
    const QList<RunSummary> runs = selectedRuns();
    const bool allArchived =
        !runs.isEmpty() && std::all_of(runs.begin(), runs.end(), [](const RunSummary& r) { return r.archived; });
    setArchived(selectedRunIds(), !allArchived);
  });
  delete_ = make(tr("&Delete…"), QKeySequence::Delete, [this] {
    const QList<RunSummary> runs = selectedRuns();
    if (runs.isEmpty()) return;
    QList<qint64> ids;
    for (const RunSummary& r : runs) ids << r.id;
    for (const RunSummary& r : runs)
      if (r.status == QLatin1String("running") || (queue_ && queue_->controllerOf(r.id))) {
        showError(tr("Delete runs"), tr("Run %1 is running: stop it before deleting it.").arg(r.id));
        return;
      }
    if (!confirmDeleteRuns(this, runs)) return;
    if (const QString error = deleteRuns(ids); !error.isEmpty()) showError(tr("Delete runs"), error);
  });
  resume_ = make(tr("Re&sume"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_R), [this] {
    resumeRuns(selectedRunIds());
  });
  clone_ = make(tr("&Clone to designer"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_L), [this] {
    cloneRun(selectedRunId() ? selectedRunId() : selectedRunIds().value(0));
  });
  compare_ = make(tr("Co&mpare"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_M), [this] {
    const QList<qint64> ids = selectedRunIds();
    if (!ids.isEmpty()) Q_EMIT compareRequested(ids);
  });
  routes_ = make(tr("What the routers ro&ute"), QKeySequence(), [this] {
    const QList<qint64> ids = selectedRunIds();
    if (!ids.isEmpty()) Q_EMIT compareRequested(ids, QStringLiteral("routing-by-token"));
  });
  routes_->setObjectName(QStringLiteral("routesAction"));
  tasks_ = make(tr("Score on zero-shot &tasks…"), QKeySequence(), [this] {
    const QList<qint64> ids = selectedRunIds();
    if (!ids.isEmpty()) Q_EMIT tasksRequested(ids);
  });
  tasks_->setObjectName(QStringLiteral("scoreTasksAction"));
  tasks_->setToolTip(tr("Open the Zero-shot tasks page with the selected runs checked"));
  routes_->setToolTip(
      tr("Compare the selected runs' routing by kind of token, from their latest checkpoints (the "
         "first time a checkpoint is broken down it is computed and kept in the store)"));
  copyIds_ = make(tr("Copy &ids"), QKeySequence::Copy, [this] {
    QList<qint64> ids = selectedRunIds();
    std::sort(ids.begin(), ids.end());
    QStringList text;
    for (const qint64 id : ids) text << QString::number(id);
    QGuiApplication::clipboard()->setText(text.join(QLatin1Char(',')));
  });
  copyIds_->setObjectName(QStringLiteral("copyIdsAction"));
  copyIds_->setToolTip(
      tr("Copy the selected runs' ids, comma-separated, for the command line's --runs (Ctrl+C)"));
  dashboard_ = make(tr("Open &dashboard"), QKeySequence(Qt::Key_Return), [this] {
    for (qint64 id : selectedRunIds()) Q_EMIT dashboardRequested(id);
  });
  rename_->setToolTip(tr("Rename the selected run (F2)"));
  delete_->setToolTip(tr("Delete the selected runs and their checkpoint files, after asking (Del)"));
  resume_->setToolTip(tr("Continue stopped, failed or crashed runs from their last checkpoint (Ctrl+Shift+R)"));
}

void RunsPanel::updateActions() {
  const QList<RunSummary> runs = selectedRuns();
  const bool any = !runs.isEmpty();
  const bool editable = any && store_;
  rename_->setEnabled(editable && runs.size() == 1);
  tags_->setEnabled(editable);
  note_->setEnabled(editable);
  const bool allArchived =
      any && std::all_of(runs.begin(), runs.end(), [](const RunSummary& r) { return r.archived; });
  archive_->setText(allArchived ? tr("Un&archive") : tr("&Archive"));
  archive_->setEnabled(editable);
  const bool anyRunning = std::any_of(runs.begin(), runs.end(), [this](const RunSummary& r) {
    return r.status == QLatin1String("running") || (queue_ && queue_->controllerOf(r.id));
  });
  delete_->setEnabled(editable && !anyRunning);
  resume_->setEnabled(queue_ && std::any_of(runs.begin(), runs.end(),
                                            [this](const RunSummary& r) { return canResume(r); }));
  clone_->setEnabled(editable);
  compare_->setEnabled(any);
  routes_->setEnabled(any);
  tasks_->setEnabled(any);
  copyIds_->setEnabled(any);
  dashboard_->setEnabled(any);
}

void RunsPanel::showMenu(const QPoint& pos) {
  updateActions();
  QMenu menu(this);
  menu.addAction(dashboard_);
  menu.addAction(compare_);
  menu.addAction(routes_);
  menu.addAction(tasks_);
  menu.addAction(copyIds_);
  menu.addSeparator();
  menu.addAction(resume_);
  menu.addAction(clone_);
  menu.addSeparator();
  menu.addAction(rename_);
  menu.addAction(tags_);
  menu.addAction(note_);
  menu.addAction(archive_);
  menu.addSeparator();
  menu.addAction(delete_);
  menu.exec(view_->viewport()->mapToGlobal(pos));
}

QSize RunsPanel::sizeHint() const { return {560, 420}; }

void RunsPanel::setRuns(const QList<RunSummary>& runs) {
  model_->setRuns(runs);
  updateSummary();
  updateActions();
}

void RunsPanel::updateSummary() {
  const QList<RunSummary>& runs = model_->runs();
  int running = 0, archived = 0;
  for (const RunSummary& r : runs) {
    running += r.status == QLatin1String("running");
    archived += r.archived;
  }
  const int shown = proxy_->rowCount();
  QString text = runs.isEmpty() ? tr("No runs stored yet")
                 : shown == runs.size() ? (runs.size() == 1 ? tr("1 run") : tr("%1 runs").arg(runs.size()))
                                        : tr("%1 of %2 runs shown").arg(shown).arg(runs.size());
  if (running) text += tr(", %1 running").arg(running);
  if (archived && !proxy_->showArchived()) text += tr(", %1 archived hidden").arg(archived);
  summary_->setText(text);
}

void RunsPanel::selectRun(qint64 id) {
  wanted_ = id;
  applySelection();
}

bool RunsPanel::selectRuns(const QList<qint64>& ids) {
  QList<QModelIndex> rows;
  for (const qint64 id : ids) {
    const int row = model_->rowOf(id);
    const QModelIndex index = row >= 0 ? proxy_->mapFromSource(model_->index(row, 0)) : QModelIndex();
    if (!index.isValid()) return false;
    rows << index;
  }
  if (rows.isEmpty()) return false;
  view_->selectionModel()->setCurrentIndex(rows.first(), QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  for (const QModelIndex& index : rows) view_->selectionModel()->select(index, QItemSelectionModel::Select | QItemSelectionModel::Rows);
  return true;
}

bool RunsPanel::eventFilter(QObject* watched, QEvent* event) {
  if (watched == view_->viewport() && event->type() == QEvent::Resize) fitNameColumn();
  return QWidget::eventFilter(watched, event);
}

void RunsPanel::fitNameColumn() {
  int others = 0;
  for (int c = 0; c <= RunsTableModel::BestValLossColumn; ++c)
    if (c != RunsTableModel::NameColumn && !view_->isColumnHidden(c)) others += view_->columnWidth(c);
  const int minimum = view_->fontMetrics().horizontalAdvance(QStringLiteral("dtrnet-bilay…"));
  int contents = view_->horizontalHeader()->sectionSizeHint(RunsTableModel::NameColumn);
  for (int row = 0; row < proxy_->rowCount(); ++row)
    contents = std::max(contents, view_->fontMetrics().horizontalAdvance(
                                      proxy_->index(row, RunsTableModel::NameColumn).data().toString()) + 12);
  const int room = view_->viewport()->width() - others;
  view_->setColumnWidth(RunsTableModel::NameColumn, std::max(minimum, std::min(room, contents)));
}

qint64 RunsPanel::selectedRunId() const {
  const QModelIndex current = view_->selectionModel()->currentIndex();
  return current.isValid() && view_->selectionModel()->isRowSelected(current.row(), {})
             ? current.data(RunsTableModel::RunIdRole).toLongLong()
             : 0;
}

QList<qint64> RunsPanel::selectedRunIds() const {
  QList<QModelIndex> rows = view_->selectionModel()->selectedRows();
  std::sort(rows.begin(), rows.end(), [](const QModelIndex& a, const QModelIndex& b) { return a.row() < b.row(); });
  QList<qint64> ids;
  for (const QModelIndex& index : rows) ids << index.data(RunsTableModel::RunIdRole).toLongLong();
  return ids;
}

QList<RunSummary> RunsPanel::selectedRuns() const {
  QList<RunSummary> runs;
  for (qint64 id : selectedRunIds())
    if (const RunSummary* run = model_->run(id)) runs << *run;
  return runs;
}

void RunsPanel::applySelection() {
  restoring_ = true;
  const int row = wanted_ ? model_->rowOf(wanted_) : -1;
  const QModelIndex index = row >= 0 ? proxy_->mapFromSource(model_->index(row, 0)) : QModelIndex();
  if (index.isValid()) {
    // Keep a multi-selection that still holds the wanted run; otherwise select just that run.
    if (!view_->selectionModel()->isRowSelected(index.row(), {}))
      view_->selectionModel()->setCurrentIndex(index, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    view_->scrollTo(index);
  } else if (!wanted_) {
    view_->selectionModel()->clearSelection();
  }
  restoring_ = false;
}

void RunsPanel::renameRun(qint64 runId, const QString& name) {
  if (!store_ || name.trimmed().isEmpty()) return;
  RunEdit edit;
  edit.name = name.trimmed();
  store_->requestEdit({runId}, edit);
}

void RunsPanel::setTags(const QList<qint64>& runIds, const QString& tags) {
  if (!store_ || runIds.isEmpty()) return;
  RunEdit edit;
  edit.tags = normalizeTags(tags);
  store_->requestEdit(runIds, edit);
}

void RunsPanel::setNote(const QList<qint64>& runIds, const QString& note) {
  if (!store_ || runIds.isEmpty()) return;
  RunEdit edit;
  edit.notes = note;
  store_->requestEdit(runIds, edit);
}

void RunsPanel::setArchived(const QList<qint64>& runIds, bool archived) {
  if (!store_ || runIds.isEmpty()) return;
  RunEdit edit;
  edit.archived = archived;
  store_->requestEdit(runIds, edit);
}

QString RunsPanel::deleteRuns(const QList<qint64>& runIds) {
  if (!store_ || runIds.isEmpty()) return {};
  for (qint64 id : runIds) {
    const RunSummary* run = model_->run(id);
    const bool live = queue_ && queue_->controllerOf(id);
    if (live || (run && run->status == QLatin1String("running")))
      return tr("Run %1 is running: stop it before deleting it.").arg(id);
  }
  store_->requestDelete(runIds);
  return {};
}

bool RunsPanel::canResume(const RunSummary& run) const {
  const bool resumable = run.status == QLatin1String("stopped") || run.status == QLatin1String("failed") ||
                         run.status == QLatin1String("crashed");
  return resumable && run.checkpointStep >= 0 && !(queue_ && queue_->controllerOf(run.id));
}

int RunsPanel::resumeRuns(const QList<qint64>& runIds) {
  if (!queue_) return 0;
  int queued = 0;
  for (qint64 id : runIds) {
    const RunSummary* run = model_->run(id);
    if (!run || !canResume(*run)) continue;
    queue_->submitResume(id);
    ++queued;
  }
  return queued;
}

void RunsPanel::cloneRun(qint64 runId) {
  if (!store_ || runId <= 0) return;
  cloning_ = runId;
  store_->requestRunConfig(runId);
}

void RunsPanel::showError(const QString& title, const QString& message) {
  summary_->setText(message);
  // Non-blocking, like the window's own errors: training and tests carry on while the box is open.
  auto* box = new QMessageBox(QMessageBox::Warning, title, message, QMessageBox::Close, this);
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->open();
}

}  // namespace routelab
