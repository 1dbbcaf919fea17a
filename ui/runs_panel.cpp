// RunsPanel: QTableView over RunsTableModel with single-row selection.
#include "ui/runs_panel.h"

#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QTableView>
#include <QVBoxLayout>

#include "ui/runs_table_model.h"

namespace routelab {

RunsPanel::RunsPanel(QWidget* parent) : QWidget(parent) {
  model_ = new RunsTableModel(this);
  view_ = new QTableView(this);
  view_->setObjectName(QStringLiteral("runsTable"));
  view_->setModel(model_);
  view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  view_->setSelectionMode(QAbstractItemView::SingleSelection);
  view_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  view_->setAlternatingRowColors(true);
  view_->setWordWrap(false);
  view_->verticalHeader()->setVisible(false);
  view_->verticalHeader()->setDefaultSectionSize(view_->fontMetrics().height() + 6);
  // Numbers and words that must stay readable fit their contents; the name takes what is left.
  QHeaderView* header = view_->horizontalHeader();
  header->setHighlightSections(false);
  header->setMinimumSectionSize(36);
  header->setSectionResizeMode(QHeaderView::ResizeToContents);
  header->setSectionResizeMode(RunsTableModel::NameColumn, QHeaderView::Stretch);

  summary_ = new QLabel(tr("No runs stored yet"), this);
  summary_->setObjectName(QStringLiteral("runsSummary"));
  summary_->setContentsMargins(4, 0, 4, 0);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(2);
  layout->addWidget(view_, 1);
  layout->addWidget(summary_);

  connect(view_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this](const QModelIndex& current) {
            if (restoring_ || !current.isValid()) return;
            const qint64 id = current.data(RunsTableModel::RunIdRole).toLongLong();
            if (id == wanted_) return;
            wanted_ = id;
            Q_EMIT runSelected(id);
          });
  connect(model_, &QAbstractItemModel::modelReset, this, &RunsPanel::applySelection);
}

QSize RunsPanel::sizeHint() const { return {560, 420}; }

void RunsPanel::setRuns(const QList<RunSummary>& runs) {
  model_->setRuns(runs);
  int running = 0;
  for (const RunSummary& r : runs) running += r.status == QLatin1String("running");
  QString text = runs.isEmpty() ? tr("No runs stored yet")
                                : runs.size() == 1 ? tr("1 run") : tr("%1 runs").arg(runs.size());
  if (running) text += tr(", %1 running").arg(running);
  summary_->setText(text);
}

void RunsPanel::selectRun(qint64 id) {
  wanted_ = id;
  applySelection();
}

qint64 RunsPanel::selectedRunId() const {
  const QModelIndex current = view_->selectionModel()->currentIndex();
  return current.isValid() && view_->selectionModel()->isRowSelected(current.row(), {})
             ? current.data(RunsTableModel::RunIdRole).toLongLong()
             : 0;
}

void RunsPanel::applySelection() {
  restoring_ = true;
  const int row = wanted_ ? model_->rowOf(wanted_) : -1;
  if (row >= 0) {
    const QModelIndex index = model_->index(row, 0);
    view_->selectionModel()->setCurrentIndex(
        index, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    view_->scrollTo(index);
  } else if (!wanted_) {
    view_->selectionModel()->clearSelection();
  }
  restoring_ = false;
}

}  // namespace routelab
