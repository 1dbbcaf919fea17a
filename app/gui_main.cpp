// routelab: the Qt 6 GUI. Parses the command line, sets up logging and resources, shows the main window.
// ROUTELAB_SCREENSHOT=path.png grabs the window at a step or after a delay, then quits (see below).
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFileInfo>
#include <QTimer>

#include <memory>

#ifdef Q_OS_UNIX
#include <QSocketNotifier>

#include <csignal>
#include <sys/socket.h>
#include <unistd.h>
#endif

#include "core/util/logging.h"
#include "core/util/version.h"
#include "ui/app_resources.h"
#include "ui/dashboard_docks.h"
#include "ui/run_dashboard.h"
#include "ui/main_window.h"
#include "ui/run_controller.h"

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

}  // namespace

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QCoreApplication::setOrganizationName(QStringLiteral("RouteLab"));
  QCoreApplication::setApplicationName(QStringLiteral("RouteLab"));
  QCoreApplication::setApplicationVersion(QStringLiteral(ROUTELAB_VERSION));
  QGuiApplication::setDesktopFileName(QStringLiteral("routelab"));

  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("RouteLab: an experiment workbench for token-routing transformers."));
  parser.addHelpOption();
  parser.addVersionOption();
  const QCommandLineOption dbOption(QStringLiteral("db"), QStringLiteral("Run store to open (default: %1)."),
                                    QStringLiteral("PATH"));
  const QCommandLineOption presetOption(QStringLiteral("preset"), QStringLiteral("Preset to select at start-up."),
                                        QStringLiteral("NAME"));
  const QCommandLineOption autostartOption(QStringLiteral("autostart"),
                                           QStringLiteral("Start the selected preset immediately."));
  const QCommandLineOption dashboardOption(QStringLiteral("dashboard"),
                                           QStringLiteral("Open the dashboard of stored run ID (repeatable)."),
                                           QStringLiteral("ID"));
  parser.addOptions({dbOption, presetOption, autostartOption, dashboardOption});
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
  for (const QString& id : dashboards) window.dashboards()->open(id.toLongLong());
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
    bool ok = false;
    int afterMs = qEnvironmentVariableIntValue("ROUTELAB_SCREENSHOT_AFTER_MS", &ok);
    if (!ok) afterMs = 30000;
    const int atStep = qEnvironmentVariableIntValue("ROUTELAB_SCREENSHOT_AT_STEP");
    auto take = [&window, screenshot, dashboards, taken = false]() mutable {
      if (taken) return;
      taken = true;
      QDir().mkpath(QFileInfo(screenshot).absolutePath());
      // ROUTELAB_SCREENSHOT_TARGET=dashboard grabs the first dashboard opened with --dashboard instead.
      QWidget* target = &window;
      if (qEnvironmentVariable("ROUTELAB_SCREENSHOT_TARGET") == QLatin1String("dashboard") && !dashboards.isEmpty())
        if (QWidget* d = window.dashboards()->dashboard(dashboards.first().toLongLong())) target = d;
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
