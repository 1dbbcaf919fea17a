// RunsTableModel: the stored runs (newest first) as a table model: id, name, architecture, status (coloured),
// steps, last train and validation loss. Updates in place when the set of runs is unchanged.
#pragma once
#include <QAbstractTableModel>
#include <QList>

#include "ui/run_progress.h"

namespace routelab {

class RunsTableModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { IdColumn, NameColumn, ArchColumn, StatusColumn, StepsColumn, TrainLossColumn, ValLossColumn,
                ColumnCount };
  enum Role { RunIdRole = Qt::UserRole + 1, StatusRole };

  explicit RunsTableModel(QObject* parent = nullptr);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  void setRuns(QList<RunSummary> runs);
  const QList<RunSummary>& runs() const { return runs_; }
  /// Row of run `id`, or -1.
  int rowOf(qint64 id) const;
  /// The run `id`, or nullptr.
  const RunSummary* run(qint64 id) const;

  /// The colour a status word is shown in (shared with the status bar).
  static QColor statusColor(const QString& status);

 private:
  QList<RunSummary> runs_;
};

}  // namespace routelab
