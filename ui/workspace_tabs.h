// WorkspaceTabs: the main window's central area. Its first tab is the overview (the loss curves of the runs
// selected in the runs browser), then the pages shown on demand (Compare, the token inspector) and one tab per
// run dashboard (several open at once). Every page sits in a scroll area, so a page never raises the window's
// minimum size beyond the screen: below its own minimum it scrolls. Live dashboards follow the queue's controller
// that runs their run.
#pragma once
#include <QHash>
#include <QPointer>
#include <QTabWidget>

class QAction;
class QScrollArea;

namespace routelab {

class RunQueue;
class RunDashboard;
class StoreService;

class WorkspaceTabs : public QTabWidget {
  Q_OBJECT

 public:
  WorkspaceTabs(StoreService* store, RunQueue* queue, QWidget* parent = nullptr);

  /// The first tab, never closed.
  void setOverview(QWidget* page, const QString& title);
  /// A page shown on demand and closed with its tab (kept, not deleted). Returns its checkable action: checked
  /// while the tab is open; toggling it opens (and raises) or closes the tab.
  QAction* addPage(QWidget* page, const QString& title);
  /// Opens `page`'s tab (an added page or the overview) and makes it current.
  void showPage(QWidget* page);
  bool isPageOpen(QWidget* page) const;
  /// The tab of `page`, or -1 while it is closed.
  int tabOf(QWidget* page) const;

  /// Opens (or raises) the dashboard of `runId`; `live` makes it follow the run while the queue runs it.
  RunDashboard* open(qint64 runId, bool live = false);
  RunDashboard* dashboard(qint64 runId) const;
  int dashboardCount() const;

 public Q_SLOTS:
  /// Closes the current tab (a dashboard is deleted, a page kept); the overview stays.
  void closeCurrentTab() { closeTab(currentIndex()); }

 private:
  QScrollArea* wrap(QWidget* page);
  void closeTab(int index);

  StoreService* store_;
  RunQueue* queue_;
  QHash<QWidget*, QScrollArea*> frames_;              ///< page -> its scroll area
  QHash<QWidget*, QPointer<QAction>> pageActions_;    ///< added pages -> their toggle actions
  QHash<qint64, QPointer<RunDashboard>> dashboards_;
};

}  // namespace routelab
