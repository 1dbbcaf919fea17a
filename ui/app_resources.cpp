// Resource registration, the application icon and the About dialog text.
#include "ui/app_resources.h"

#include <QMessageBox>
#include <QPainter>
#include <QPixmap>
#include <QSvgRenderer>
#include <QtGlobal>

#include "core/train/trainer.h"
#include "core/util/device.h"
#include "core/util/version.h"

// Q_INIT_RESOURCE must be used outside any namespace.
static void initRouteLabQrc() { Q_INIT_RESOURCE(routelab); }

namespace routelab {

void initResources() {
  static const bool done = (initRouteLabQrc(), true);
  Q_UNUSED(done);
}

QIcon appIcon() {
  initResources();
  QSvgRenderer renderer(QStringLiteral(":/routelab/icons/routelab.svg"));
  QIcon icon;
  if (!renderer.isValid()) return icon;
  for (int size : {16, 22, 24, 32, 48, 64, 128, 256}) {
    QPixmap pixmap(size, size);
    pixmap.fill(Qt::transparent);
    QPainter painter(&pixmap);
    painter.setRenderHint(QPainter::Antialiasing);
    renderer.render(&painter);
    painter.end();
    icon.addPixmap(pixmap);
  }
  return icon;
}

QString aboutHtml(const QString& inUse) {
  return QStringLiteral(
             "<h3>RouteLab %1</h3>"
             "<p>An experiment workbench for token-routing transformers: train presets, watch the curves, "
             "compare stored runs.</p>"
             "<table>"
             "<tr><td>RouteLab</td><td>&nbsp;%1</td></tr>"
             "<tr><td>Qt</td><td>&nbsp;%2 (built with %3)</td></tr>"
             "<tr><td>LibTorch</td><td>&nbsp;%4</td></tr>"
             "<tr><td>CUDA</td><td>&nbsp;%5</td></tr>"
             "<tr><td>Devices</td><td>&nbsp;%6</td></tr>"
             "<tr><td>In use</td><td>&nbsp;%7</td></tr>"
             "</table>")
      .arg(QStringLiteral(ROUTELAB_VERSION), QString::fromLatin1(qVersion()), QStringLiteral(QT_VERSION_STR),
           QString::fromStdString(torch_version_string()).toHtmlEscaped(),
           QString::fromStdString(cuda_version_string()).toHtmlEscaped(),
           QString::fromStdString(devices_available_string()).toHtmlEscaped(),
           inUse.isEmpty() ? QObject::tr("no run in progress") : inUse.toHtmlEscaped());
}

void showAboutDialog(QWidget* parent, const QString& inUse) {
  auto* box = new QMessageBox(parent);
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->setWindowTitle(QObject::tr("About RouteLab"));
  box->setTextFormat(Qt::RichText);
  box->setText(aboutHtml(inUse));
  box->setIconPixmap(appIcon().pixmap(64, 64));
  box->setStandardButtons(QMessageBox::Close);
  box->open();
}

}  // namespace routelab
