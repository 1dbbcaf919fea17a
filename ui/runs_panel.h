// RunsPanel: the table of stored runs. Keeps the selected run selected across refreshes and reports
// the user's choice as runSelected.
#pragma once
#include <QWidget>

#include "ui/run_progress.h"

class QTableView;
class QLabel;

namespace routelab {

class RunsTableModel;

class RunsPanel : public QWidget {
  Q_OBJECT

 public:
  explicit RunsPanel(QWidget* parent = nullptr);

  /// Wide enough for every column: docks take their first size from it.
  QSize sizeHint() const override;
  void setRuns(const QList<RunSummary>& runs);
  /// Selects run `id` (now, or as soon as a refresh brings it); 0 clears the selection.
  void selectRun(qint64 id);
  qint64 selectedRunId() const;
  RunsTableModel* model() const { return model_; }
  QTableView* view() const { return view_; }

 Q_SIGNALS:
  void runSelected(qint64 runId);

 private:
  void applySelection();

  RunsTableModel* model_ = nullptr;
  QTableView* view_ = nullptr;
  QLabel* summary_ = nullptr;
  qint64 wanted_ = 0;     ///< the run that should be selected
  bool restoring_ = false;
};

}  // namespace routelab
