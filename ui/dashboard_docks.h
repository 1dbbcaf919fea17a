// DashboardDocks: one dockable RunDashboard per run in the main window (several open at once, tabbed on the
// right). Opening a run that already has one raises it; closing a dock deletes its dashboard.
#pragma once
#include <QHash>
#include <QObject>
#include <QPointer>

class QDockWidget;
class QMainWindow;

namespace routelab {

class RunController;
class RunDashboard;
class StoreService;

class DashboardDocks : public QObject {
  Q_OBJECT

 public:
  DashboardDocks(QMainWindow* window, StoreService* store, RunController* controller);

  /// Opens (or raises) the dashboard of `runId`; `live` makes it follow the controller's current run.
  RunDashboard* open(qint64 runId, bool live = false);
  RunDashboard* dashboard(qint64 runId) const;
  int count() const;

 private:
  QMainWindow* window_;
  StoreService* store_;
  RunController* controller_;
  QHash<qint64, QPointer<QDockWidget>> docks_;
};

}  // namespace routelab
