// routelab: the Qt 6 GUI. Parses the command line, sets up logging and resources, shows the main window.
// ROUTELAB_SCREENSHOT=path.png grabs the window at a step or after a delay, then quits (see below).
#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QCommandLineParser>
#include <QDir>
#include <QDockWidget>
#include <QFileInfo>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QTabWidget>
#include <QThread>
#include <QTimer>

#include <memory>

#ifdef Q_OS_UNIX
#include <QSocketNotifier>

#include <csignal>
#include <sys/socket.h>
#include <unistd.h>
#endif

#include "core/util/logging.h"
#include "core/util/paths.h"
#include "core/util/process.h"
#include "core/util/version.h"
#include "ui/app_resources.h"
#include "ui/compare_view.h"
#include "ui/run_dashboard.h"
#include "ui/main_window.h"
#include "ui/run_controller.h"
#include "ui/run_queue.h"
#include "ui/runs_panel.h"
#include "ui/token_inspector.h"
#include "ui/workspace_tabs.h"
#include "ui/zero_shot_view.h"

namespace {

#ifdef Q_OS_UNIX
int g_signalPipe[2] = {-1, -1};

void onTerminationSignal(int) {
  const char byte = 1;
  [[maybe_unused]] const auto written = ::write(g_signalPipe[0], &byte, 1);  // async-signal-safe
}

/// SIGINT/SIGTERM close the window as the user would, so a run in progress ends `stopped` (not `crashed`).
/// A second signal takes the default action.
void closeOnTerminationSignals(routelab::MainWindow& window) {
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, g_signalPipe) != 0) return;
  auto* notifier = new QSocketNotifier(g_signalPipe[1], QSocketNotifier::Read, &window);
  QObject::connect(notifier, &QSocketNotifier::activated, &window, [&window] {
    char byte = 0;
    [[maybe_unused]] const auto read = ::read(g_signalPipe[1], &byte, 1);
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    routelab::logger("ui")->info("termination signal: stopping and closing");
    window.setConfirmOnClose(false);
    window.close();
  });
  struct sigaction action {};
  action.sa_handler = onTerminationSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}
#endif

/// --sweep: queues the sweep's points once the stored queue was read (they go after what it holds).
void queueSweep(routelab::MainWindow& window, const QString& path) {
  routelab::RunQueue* queue = window.runQueue();
  auto submit = [&window, queue, path] {
    QString error;
    const int points = queue->submitSweep(path, &error);
    if (points < 0) {
      routelab::logger("ui")->error("--sweep {}: {}", path.toStdString(), error.toStdString());
      return;
    }
    routelab::logger("ui")->info("--sweep {}: {} runs queued", path.toStdString(), points);
    window.queueDock()->show();
    window.queueDock()->raise();
  };
  if (queue->isLoaded()) {
    submit();
  } else {
    QObject::connect(queue, &routelab::RunQueue::loaded, &window, submit, Qt::SingleShotConnection);
  }
}

/// --inspect: shows the token inspector with `runId` (and `withId` to compare) once the runs list arrived, each side's
/// model `options` typed in and its maps coloured by `colour` (gate when empty), then traces `text` (the inspector's
/// default text when empty) when their checkpoints are listed.
void openInspector(routelab::MainWindow& window, qint64 runId, qint64 withId, const QString& text,
                   const QString (&options)[2], const QString& colour) {
  routelab::TokenInspector* inspector = window.inspector();
  window.workspace()->showPage(inspector);
  if (!colour.isEmpty()) {
    const int index = inspector->colourBy()->findData(colour);
    if (index < 0)
      routelab::logger("ui")->warn("--inspect-colour: '{}' is not gate, decision or expert", colour.toStdString());
    else
      inspector->colourBy()->setCurrentIndex(index);
  }
  if (!text.isEmpty()) inspector->textEdit()->setPlainText(text);
  for (int side = 0; side < 2; ++side) inspector->optionsEdit(side)->setText(options[side]);
  // Trace once both chosen runs have their checkpoints listed (earlier lists may belong to a default choice).
  auto traced = std::make_shared<bool>(false);
  QObject::connect(inspector, &routelab::TokenInspector::checkpointsLoaded, inspector,
                   [inspector, traced, runId, withId](int) {
                     auto ready = [inspector](int side, qint64 id) {
                       return inspector->runCombo(side)->currentData().toLongLong() == id &&
                              inspector->stepCombo(side)->count() > 0;
                     };
                     if (*traced || !ready(0, runId) || (withId > 0 && !ready(1, withId))) return;
                     *traced = true;
                     inspector->runTrace();
                   });
  auto* poll = new QTimer(inspector);
  QObject::connect(poll, &QTimer::timeout, inspector, [inspector, poll, runId, withId] {
    if (!inspector->selectRun(0, runId)) return;  // the runs list has not arrived yet
    poll->stop();
    poll->deleteLater();
    if (withId > 0) {
      inspector->compareCheck()->setChecked(true);
      inspector->selectRun(1, withId);
    }
  });
  poll->start(200);
}

}  // namespace

int main(int argc, char** argv) {
  // The GUI shares the machine with its runs' threads. Started by its launcher (routelab), this returns at once.
  routelab::relaunch_with_process_settings(argv);
  QApplication app(argc, argv);
  if (QThread::idealThreadCount() >= 4) routelab::reserve_cores(1);  // a core for the window beside every run
  QCoreApplication::setOrganizationName(QStringLiteral("RouteLab"));
  QCoreApplication::setApplicationName(QStringLiteral("RouteLab"));
  QCoreApplication::setApplicationVersion(QStringLiteral(ROUTELAB_VERSION));
  QGuiApplication::setDesktopFileName(QStringLiteral("routelab"));

  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("RouteLab: an experiment workbench for token-routing transformers."));
  parser.addHelpOption();
  parser.addVersionOption();
  const QCommandLineOption dbOption(QStringLiteral("db"), QStringLiteral("Run store to open (default: %1).")
                                        .arg(QString::fromStdString(routelab::default_db_path())),
                                    QStringLiteral("PATH"));
  const QCommandLineOption presetOption(QStringLiteral("preset"), QStringLiteral("Preset to select at start-up."),
                                        QStringLiteral("NAME"));
  const QCommandLineOption autostartOption(QStringLiteral("autostart"),
                                           QStringLiteral("Start the selected preset immediately."));
  const QCommandLineOption dashboardOption(QStringLiteral("dashboard"),
                                           QStringLiteral("Open the dashboard of stored run ID (repeatable)."),
                                           QStringLiteral("ID"));
  const QCommandLineOption compareOption(QStringLiteral("compare"),
                                         QStringLiteral("Open the Compare view with stored runs IDS (comma-separated)."),
                                         QStringLiteral("IDS"));
  const QCommandLineOption figureOption(QStringLiteral("figure"),
                                        QStringLiteral("The Compare view's figure (routelab-cli figures lists them)."),
                                        QStringLiteral("NAME"));
  const QCommandLineOption inspectOption(QStringLiteral("inspect"),
                                         QStringLiteral("Open the token inspector on stored run ID (its latest checkpoint)."),
                                         QStringLiteral("ID"));
  const QCommandLineOption inspectWithOption(QStringLiteral("inspect-with"),
                                             QStringLiteral("A second run for the inspector to compare with."),
                                             QStringLiteral("ID"));
  const QCommandLineOption inspectTextOption(QStringLiteral("inspect-text"),
                                             QStringLiteral("The text the inspector traces at start-up."),
                                             QStringLiteral("TEXT"));
  const QCommandLineOption inspectOptionsOption(
      QStringLiteral("inspect-options"),
      QStringLiteral("Model options the inspector traces --inspect's run with (\"inference=sparse threshold=0.3\")."),
      QStringLiteral("KEY=VALUE ..."));
  const QCommandLineOption inspectWithOptionsOption(QStringLiteral("inspect-with-options"),
                                                    QStringLiteral("Model options for --inspect-with's run."),
                                                    QStringLiteral("KEY=VALUE ..."));
  const QCommandLineOption inspectColourOption(QStringLiteral("inspect-colour"),
                                               QStringLiteral("What the inspector's maps colour: gate (the default), "
                                                              "decision or expert."),
                                               QStringLiteral("WHAT"));
  const QCommandLineOption selectOption(QStringLiteral("select"),
                                        QStringLiteral("Select stored runs IDS in the runs browser (comma-separated; the "
                                                       "overview draws the first with the others over it)."),
                                        QStringLiteral("IDS"));
  const QCommandLineOption tasksOption(QStringLiteral("tasks"),
                                       QStringLiteral("Open the Zero-shot tasks page with stored runs IDS checked "
                                                      "(comma-separated)."),
                                       QStringLiteral("IDS"));
  const QCommandLineOption sweepOption(QStringLiteral("sweep"),
                                       QStringLiteral("Queue every point of sweep FILE (experiments/sweeps/)."),
                                       QStringLiteral("FILE"));
  parser.addOptions({dbOption, presetOption, autostartOption, dashboardOption, compareOption, figureOption,
                     inspectOption, inspectWithOption, inspectTextOption, inspectOptionsOption,
                     inspectWithOptionsOption, inspectColourOption, selectOption, tasksOption, sweepOption});
  parser.process(app);

  routelab::init_logging();
  routelab::initResources();
  QApplication::setWindowIcon(routelab::appIcon());

  routelab::MainWindowOptions options;
  if (parser.isSet(dbOption)) options.dbPath = QFileInfo(parser.value(dbOption)).absoluteFilePath();
  options.preset = parser.value(presetOption);
  options.autostart = parser.isSet(autostartOption);
  routelab::MainWindow window(options);
  window.show();
  const QStringList dashboards = parser.values(dashboardOption);
  for (const QString& id : dashboards) window.workspace()->open(id.toLongLong());
  // Scripted screenshots of a tab other than the first: ROUTELAB_SCREENSHOT_TAB=Metrics shows the tab of that name
  // in the dashboards opened with --dashboard.
  if (const QString tab = qEnvironmentVariable("ROUTELAB_SCREENSHOT_TAB"); !tab.isEmpty())
    for (const QString& id : dashboards)
      if (QWidget* dashboard = window.workspace()->dashboard(id.toLongLong()))
        for (QTabWidget* tabs : dashboard->findChildren<QTabWidget*>())
          for (int i = 0; i < tabs->count(); ++i)
            if (tabs->tabText(i).remove(QLatin1Char('&')).compare(tab, Qt::CaseInsensitive) == 0)
              tabs->setCurrentIndex(i);
  if (parser.isSet(compareOption)) {
    QList<qint64> ids;
    for (const QString& id : parser.value(compareOption).split(QLatin1Char(','), Qt::SkipEmptyParts))
      ids << id.trimmed().toLongLong();
    if (parser.isSet(figureOption) && !window.compareView()->setFigureName(parser.value(figureOption)))
      routelab::logger("ui")->warn("--figure: unknown figure '{}'", parser.value(figureOption).toStdString());
    window.compareView()->showRuns(ids);
    window.workspace()->showPage(window.compareView());
  }
  if (parser.isSet(tasksOption)) {
    QList<qint64> ids;
    for (const QString& id : parser.value(tasksOption).split(QLatin1Char(','), Qt::SkipEmptyParts))
      ids << id.trimmed().toLongLong();
    window.zeroShotView()->checkRuns(ids);
    window.workspace()->showPage(window.zeroShotView());
  }
  if (parser.isSet(selectOption)) {
    QList<qint64> ids;
    for (const QString& id : parser.value(selectOption).split(QLatin1Char(','), Qt::SkipEmptyParts)) ids << id.trimmed().toLongLong();
    auto* poll = new QTimer(&window);  // until the runs list has arrived
    QObject::connect(poll, &QTimer::timeout, &window, [&window, poll, ids] {
      if (!window.runsPanel()->selectRuns(ids)) return;
      poll->stop();
      poll->deleteLater();
    });
    poll->start(200);
  }
  if (parser.isSet(sweepOption)) queueSweep(window, QFileInfo(parser.value(sweepOption)).absoluteFilePath());
  if (parser.isSet(inspectOption)) {
    const QString inspectOptions[2] = {parser.value(inspectOptionsOption), parser.value(inspectWithOptionsOption)};
    openInspector(window, parser.value(inspectOption).toLongLong(), parser.value(inspectWithOption).toLongLong(),
                  parser.value(inspectTextOption), inspectOptions, parser.value(inspectColourOption));
  }
  // ROUTELAB_WINDOW_SIZE=WxH (scripted screenshots at a chosen size).
  if (const QStringList size = qEnvironmentVariable("ROUTELAB_WINDOW_SIZE").split(QLatin1Char('x')); size.size() == 2)
    window.resize(size[0].toInt(), size[1].toInt());
#ifdef Q_OS_UNIX
  closeOnTerminationSignals(window);
#endif

  // Scripted screenshots: grab the window once the live run reaches ROUTELAB_SCREENSHOT_AT_STEP (if set) or
  // after ROUTELAB_SCREENSHOT_AFTER_MS (default 30 s), whichever comes first; then close (stopping the run).
  const QString screenshot = qEnvironmentVariable("ROUTELAB_SCREENSHOT");
  if (!screenshot.isEmpty()) {
    const QString targetName = qEnvironmentVariable("ROUTELAB_SCREENSHOT_TARGET");
    // ROUTELAB_SCREENSHOT_RAISE=designerDock,queueDock: docks (by object name) raised in their tab groups first.
    for (const QString& name : qEnvironmentVariable("ROUTELAB_SCREENSHOT_RAISE").split(QLatin1Char(','), Qt::SkipEmptyParts))
      if (auto* dock = window.findChild<QDockWidget*>(name.trimmed())) dock->raise();
    bool ok = false;
    int afterMs = qEnvironmentVariableIntValue("ROUTELAB_SCREENSHOT_AFTER_MS", &ok);
    if (!ok) afterMs = 30000;
    const int atStep = qEnvironmentVariableIntValue("ROUTELAB_SCREENSHOT_AT_STEP");
    auto take = [&window, screenshot, dashboards, targetName, taken = false]() mutable {
      if (taken) return;
      taken = true;
      QDir().mkpath(QFileInfo(screenshot).absolutePath());
      // ROUTELAB_SCREENSHOT_TARGET=dashboard grabs the tab of the first dashboard opened with --dashboard alone;
      // compare and inspector those tabs (opened with --compare and --inspect).
      QWidget* target = &window;
      if (targetName == QLatin1String("dashboard") && !dashboards.isEmpty())
        if (QWidget* d = window.workspace()->dashboard(dashboards.first().toLongLong())) target = d;
      if (targetName == QLatin1String("compare")) target = window.compareView();
      if (targetName == QLatin1String("inspector")) target = window.inspector();
      const bool saved = target->grab().save(screenshot);
      routelab::logger("ui")->info("screenshot {} {}", screenshot.toStdString(), saved ? "saved" : "NOT saved");
      window.setConfirmOnClose(false);
      window.close();  // stops a run in progress first
    };
    auto shared = std::make_shared<decltype(take)>(std::move(take));
    QTimer::singleShot(afterMs, &window, [shared] { (*shared)(); });
    if (atStep > 0) {
      auto* poll = new QTimer(&window);
      QObject::connect(poll, &QTimer::timeout, &window, [&window, shared, atStep, poll] {
        const auto& last = window.runController()->lastStep();
        if (!last || last->step < atStep) return;
        poll->stop();
        // A moment later, so the plot has replotted the step that was reached.
        QTimer::singleShot(200, &window, [shared] { (*shared)(); });
      });
      poll->start(250);
    }
  }
  return app.exec();
}
