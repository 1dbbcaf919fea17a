// WorkspaceTabs: tabs, their scroll areas and toggle actions, and the dashboards' bookkeeping.
#include "ui/workspace_tabs.h"

#include <QAction>
#include <QScrollArea>
#include <QSignalBlocker>
#include <QTabBar>

#include "ui/run_controller.h"
#include "ui/run_dashboard.h"
#include "ui/run_queue.h"

namespace routelab {

WorkspaceTabs::WorkspaceTabs(StoreService* store, RunQueue* queue, QWidget* parent)
    : QTabWidget(parent), store_(store), queue_(queue) {
  setObjectName(QStringLiteral("workspaceTabs"));
  setDocumentMode(true);
  setTabsClosable(true);
  setMovable(true);
  setElideMode(Qt::ElideNone);  // whole run names; more tabs than room scroll
  setUsesScrollButtons(true);
  connect(this, &QTabWidget::tabCloseRequested, this, &WorkspaceTabs::closeTab);
}

QScrollArea* WorkspaceTabs::wrap(QWidget* page) {
  auto* frame = new QScrollArea(this);
  frame->setObjectName(page->objectName() + QStringLiteral("Frame"));
  frame->setWidgetResizable(true);  // the page fills the tab, and scrolls only below its own minimum size
  frame->setFrameShape(QFrame::NoFrame);
  frame->setWidget(page);
  frames_.insert(page, frame);
  return frame;
}

void WorkspaceTabs::setOverview(QWidget* page, const QString& title) {
  insertTab(0, wrap(page), title);
  for (const QTabBar::ButtonPosition side : {QTabBar::LeftSide, QTabBar::RightSide})
    if (QWidget* button = tabBar()->tabButton(0, side)) {
      tabBar()->setTabButton(0, side, nullptr);
      button->deleteLater();
    }
  tabBar()->setTabToolTip(0, page->toolTip());
  setCurrentIndex(0);
}

QAction* WorkspaceTabs::addPage(QWidget* page, const QString& title) {
  QScrollArea* frame = wrap(page);
  frame->setWindowTitle(title);
  frame->hide();
  auto* action = new QAction(title, this);
  action->setCheckable(true);
  connect(action, &QAction::toggled, this, [this, page](bool open) {
    if (open) showPage(page);
    else if (const int index = tabOf(page); index >= 0) closeTab(index);
  });
  pageActions_.insert(page, action);
  return action;
}

int WorkspaceTabs::tabOf(QWidget* page) const {
  QScrollArea* frame = frames_.value(page);
  return frame ? indexOf(frame) : -1;
}

bool WorkspaceTabs::isPageOpen(QWidget* page) const { return tabOf(page) >= 0; }

void WorkspaceTabs::showPage(QWidget* page) {
  QScrollArea* frame = frames_.value(page);
  if (!frame) return;
  if (indexOf(frame) < 0) addTab(frame, frame->windowTitle());
  setCurrentWidget(frame);
  if (QAction* action = pageActions_.value(page)) {
    const QSignalBlocker blocker(action);
    action->setChecked(true);
  }
}

void WorkspaceTabs::closeTab(int index) {
  auto* frame = qobject_cast<QScrollArea*>(widget(index));
  if (!frame) return;
  QWidget* page = frame->widget();
  if (auto* board = qobject_cast<RunDashboard*>(page)) {
    removeTab(index);
    dashboards_.remove(board->runId());
    frames_.remove(page);
    frame->deleteLater();  // the dashboard with it
    return;
  }
  QAction* action = pageActions_.value(page);
  if (!action) return;  // the overview stays
  removeTab(index);
  frame->hide();
  const QSignalBlocker blocker(action);
  action->setChecked(false);
}

RunDashboard* WorkspaceTabs::dashboard(qint64 runId) const { return dashboards_.value(runId); }

int WorkspaceTabs::dashboardCount() const {
  int n = 0;
  for (const auto& board : dashboards_)
    if (board) ++n;
  return n;
}

RunDashboard* WorkspaceTabs::open(qint64 runId, bool live) {
  if (runId <= 0) return nullptr;
  RunController* controller = live ? queue_->controllerOf(runId) : nullptr;
  if (RunDashboard* existing = dashboard(runId)) {
    if (controller && !existing->isLive()) existing->followLive(controller);
    showPage(existing);
    return existing;
  }
  auto* board = new RunDashboard(runId, store_);
  if (controller) board->followLive(controller);
  QScrollArea* frame = wrap(board);
  frame->setWindowTitle(tr("run %1").arg(runId));
  connect(board, &RunDashboard::titleChanged, this, [this, frame](const QString& title) {
    // "run 6 · mod-c0.7-s2 · mod · ..." : the run and its name on the tab, all of it in the tooltip.
    frame->setWindowTitle(title.section(QStringLiteral(" · "), 0, 1));
    if (const int index = indexOf(frame); index >= 0) {
      setTabText(index, frame->windowTitle());
      setTabToolTip(index, title);
    }
  });
  dashboards_.insert(runId, board);
  showPage(board);
  return board;
}

}  // namespace routelab
