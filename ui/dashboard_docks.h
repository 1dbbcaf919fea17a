// DashboardDocks: one dockable RunDashboard per run in the main window (several open at once, tabbed on the
// right). Opening a run that already has one raises it; closing a dock deletes its dashboard. Live dashboards
// follow the queue's controller that runs their run (several live at once when runs go side by side).
#pragma once
#include <QHash>
#include <QObject>
#include <QPointer>

class QDockWidget;
class QMainWindow;

namespace routelab {

class RunQueue;
class RunDashboard;
class StoreService;

class DashboardDocks : public QObject {
  Q_OBJECT

 public:
  DashboardDocks(QMainWindow* window, StoreService* store, RunQueue* queue);

  /// Opens (or raises) the dashboard of `runId`; `live` makes it follow the run while the queue runs it.
  RunDashboard* open(qint64 runId, bool live = false);
  RunDashboard* dashboard(qint64 runId) const;
  int count() const;

 private:
  QMainWindow* window_;
  StoreService* store_;
  RunQueue* queue_;
  QHash<qint64, QPointer<QDockWidget>> docks_;
};

}  // namespace routelab
