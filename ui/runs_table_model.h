// RunsTableModel: the stored runs (newest first) as a table model: id, name, architecture, status (coloured),
// steps, last train, last and best validation loss, duration, device, tags, then one column per config key asked
// for (setConfigColumns: "train.lr", "model.capacity"; sorting by one groups the runs by it). Updates in place
// when the set of runs is unchanged. RunsFilterProxy sorts it by value and filters it by a search text and the archived flag.
#pragma once
#include <QAbstractTableModel>
#include <QList>
#include <QSortFilterProxyModel>

#include "ui/run_progress.h"
#include "ui/runs_query.h"

namespace routelab {

class RunsTableModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { IdColumn, NameColumn, ArchColumn, SeedColumn, StatusColumn, StepsColumn, BestValLossColumn, ValLossColumn,
                TrainLossColumn, DurationColumn, DeviceColumn, TagsColumn, ColumnCount };
  /// SortRole: the column's value as a number or text (NaN losses sort last); SearchRole: the text the search
  /// box matches (id, name, architecture, status, tags, notes).
  enum Role { RunIdRole = Qt::UserRole + 1, StatusRole, SortRole, SearchRole, ArchivedRole };

  explicit RunsTableModel(QObject* parent = nullptr);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  void setRuns(QList<RunSummary> runs);
  /// Further columns, one per "section.key" of the runs' configs, after TagsColumn. The search box matches their
  /// "key=value" too ("lr=0.003").
  void setConfigColumns(const QStringList& keys);
  const QStringList& configColumns() const { return configKeys_; }
  const QList<RunSummary>& runs() const { return runs_; }
  /// Row of run `id`, or -1.
  int rowOf(qint64 id) const;
  /// The run `id`, or nullptr.
  const RunSummary* run(qint64 id) const;

  /// The colour a status word is shown in (shared with the status bar).
  static QColor statusColor(const QString& status);
  /// Seconds from start to end (to the last heartbeat while running); NaN when unknown.
  static double durationSeconds(const RunSummary& run);
  /// "42 s", "3 min 5 s", "2 h 04 min".
  static QString formatDuration(double seconds);

 private:
  /// The run's value of config column `column` (>= ColumnCount), invalid when its config has none.
  QVariant configValue(const RunSummary& run, int column) const;

  QList<RunSummary> runs_;
  QStringList configKeys_;
};

class RunsFilterProxy : public QSortFilterProxyModel {
  Q_OBJECT

 public:
  explicit RunsFilterProxy(QObject* parent = nullptr);

  /// Every whitespace-separated word must occur (case-insensitive) in the run's SearchRole text, every comparison
  /// ("lr<0.01", "capacity>=0.5", "best<2.4") hold for the run (RunQuery).
  void setSearchText(const QString& text);
  QString searchText() const { return query_.text(); }
  void setShowArchived(bool show);
  bool showArchived() const { return showArchived_; }

 protected:
  bool filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const override;
  bool lessThan(const QModelIndex& left, const QModelIndex& right) const override;

 private:
  RunSearch query_;
  bool showArchived_ = false;
};

}  // namespace routelab
