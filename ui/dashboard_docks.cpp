// DashboardDocks: dock creation, tabbing and bookkeeping.
#include "ui/dashboard_docks.h"

#include <QDockWidget>
#include <QMainWindow>
#include <QTimer>

#include "ui/run_controller.h"
#include "ui/run_queue.h"
#include "ui/run_dashboard.h"

namespace routelab {

DashboardDocks::DashboardDocks(QMainWindow* window, StoreService* store, RunQueue* queue)
    : QObject(window), window_(window), store_(store), queue_(queue) {}

RunDashboard* DashboardDocks::dashboard(qint64 runId) const {
  const QPointer<QDockWidget> dock = docks_.value(runId);
  return dock ? qobject_cast<RunDashboard*>(dock->widget()) : nullptr;
}

int DashboardDocks::count() const {
  int n = 0;
  for (const auto& dock : docks_)
    if (dock) ++n;
  return n;
}

RunDashboard* DashboardDocks::open(qint64 runId, bool live) {
  if (runId <= 0) return nullptr;
  RunController* controller = live ? queue_->controllerOf(runId) : nullptr;
  if (RunDashboard* existing = dashboard(runId)) {
    if (controller && !existing->isLive()) existing->followLive(controller);
    QDockWidget* dock = docks_.value(runId);
    dock->show();
    dock->raise();
    return existing;
  }
  auto* dashboard = new RunDashboard(runId, store_);
  if (controller) dashboard->followLive(controller);
  auto* dock = new QDockWidget(tr("Run %1").arg(runId), window_);
  dock->setObjectName(QStringLiteral("dashboardDock%1").arg(runId));
  dock->setAttribute(Qt::WA_DeleteOnClose);
  dock->setWidget(dashboard);
  dock->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable |
                    QDockWidget::DockWidgetClosable);
  connect(dashboard, &RunDashboard::titleChanged, dock, [dock](const QString& title) {
    dock->setWindowTitle(title.section(QStringLiteral(" · "), 0, 1));
    dock->setToolTip(title);
  });
  QDockWidget* sibling = nullptr;
  for (const auto& other : docks_)
    if (other && !other->isFloating()) sibling = other;
  window_->addDockWidget(Qt::RightDockWidgetArea, dock);
  if (sibling) {
    window_->tabifyDockWidget(sibling, dock);
  } else {
    // The first dashboard takes most of the width: it holds six views.
    QTimer::singleShot(0, dock, [this, dock] { window_->resizeDocks({dock}, {window_->width() * 3 / 5}, Qt::Horizontal); });
  }
  docks_.insert(runId, dock);
  dock->show();
  dock->raise();
  return dashboard;
}

}  // namespace routelab
