// RunsPanel: the runs browser. A sortable table of every stored run behind a search box and a "Show archived"
// toggle; multi-selection; a context menu (and shortcuts) to rename, tag, note, archive, delete (with
// confirmation; checkpoint files removed), resume from the last checkpoint, clone into the designer, compare and
// open dashboards. Writes go through StoreService; resumes through the RunQueue.
#pragma once
#include <QList>
#include <QWidget>

#include "ui/run_progress.h"

class QAction;
class QCheckBox;
class QLabel;
class QLineEdit;
class QTableView;

namespace routelab {

class RunQueue;
class RunsFilterProxy;
class RunsTableModel;
class StoreService;

class RunsPanel : public QWidget {
  Q_OBJECT

 public:
  explicit RunsPanel(QWidget* parent = nullptr);

  /// The store the edits go to and the queue that resumes runs; without them the panel only shows runs.
  void setServices(StoreService* store, RunQueue* queue);

  /// Wide enough for every column: docks take their first size from it.
  QSize sizeHint() const override;
  void setRuns(const QList<RunSummary>& runs);
  /// Selects run `id` (now, or as soon as a refresh brings it); 0 clears the selection.
  void selectRun(qint64 id);
  /// Selects the listed runs as a user's clicks would (the first current: the main view's run, the others drawn
  /// over it). False when one of them is not listed (yet).
  bool selectRuns(const QList<qint64>& ids);
  /// The current run when it is selected, else 0.
  qint64 selectedRunId() const;
  /// Every selected run, in table order.
  QList<qint64> selectedRunIds() const;
  RunsTableModel* model() const { return model_; }
  RunsFilterProxy* proxy() const { return proxy_; }
  QTableView* view() const { return view_; }
  QLineEdit* searchBox() const { return search_; }
  /// Config keys shown as further columns ("train.lr model.capacity"); remembered across starts.
  QLineEdit* configColumnsBox() const { return configColumns_; }
  QCheckBox* showArchivedBox() const { return showArchived_; }

  // The operations behind the menu, without dialogs (the menu asks first).
  void renameRun(qint64 runId, const QString& name);
  void setTags(const QList<qint64>& runIds, const QString& tags);
  void setNote(const QList<qint64>& runIds, const QString& note);
  void setArchived(const QList<qint64>& runIds, bool archived);
  /// Deletes rows and checkpoint folders. Refuses (returning why, deleting nothing) when a run is running.
  QString deleteRuns(const QList<qint64>& runIds);
  /// Queues the continuation of each resumable run; returns how many were queued.
  int resumeRuns(const QList<qint64>& runIds);
  /// Stopped, failed or crashed with a checkpoint, and not running in this window.
  bool canResume(const RunSummary& run) const;
  /// Reads the run's config and emits cloneRequested.
  void cloneRun(qint64 runId);

 Q_SIGNALS:
  void runSelected(qint64 runId);
  /// The selection changed: every selected run, in table order (the main view overlays them).
  void runsSelected(const QList<qint64>& runIds);
  /// Compare the runs, with `figure` (a catalogue name) chosen where one is given.
  void compareRequested(const QList<qint64>& runIds, const QString& figure = QString());
  void dashboardRequested(qint64 runId);
  /// Score the runs on zero-shot tasks (the workspace's Zero-shot tasks page, these runs checked).
  void tasksRequested(const QList<qint64>& runIds);
  void cloneRequested(const QString& configJson, const QString& origin);
  /// A store edit ended; `error` is empty on success.
  void editFinished(const QString& error);

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  /// The name column takes the room the columns up to "Best val" leave in the view, between a readable minimum
  /// and its contents' width: whole names on a wide screen, the key columns in view on a narrow one.
  void fitNameColumn();
  void buildActions();
  void updateActions();
  void showMenu(const QPoint& pos);
  QList<RunSummary> selectedRuns() const;
  void applySelection();
  void updateSummary();
  void showError(const QString& title, const QString& message);

  RunsTableModel* model_ = nullptr;
  RunsFilterProxy* proxy_ = nullptr;
  QTableView* view_ = nullptr;
  QLineEdit* search_ = nullptr;
  QLineEdit* configColumns_ = nullptr;
  QCheckBox* showArchived_ = nullptr;
  QLabel* summary_ = nullptr;
  StoreService* store_ = nullptr;
  RunQueue* queue_ = nullptr;
  QAction *rename_ = nullptr, *tags_ = nullptr, *note_ = nullptr, *archive_ = nullptr, *delete_ = nullptr,
          *resume_ = nullptr, *clone_ = nullptr, *compare_ = nullptr, *dashboard_ = nullptr, *routes_ = nullptr,
          *tasks_ = nullptr, *copyIds_ = nullptr;
  qint64 wanted_ = 0;     ///< the run that should be selected
  qint64 cloning_ = 0;    ///< the run whose config is being read for Clone
  bool restoring_ = false;
};

}  // namespace routelab
