// The compiled-in resources of the GUI (resources/routelab.qrc) and the application icon drawn from its SVG.
#pragma once
#include <QIcon>
#include <QString>

namespace routelab {

/// Registers resources/routelab.qrc (routelab_ui is a static library, so the linker would drop it otherwise).
/// Idempotent.
void initResources();
/// The application icon at the usual sizes, rendered from :/routelab/icons/routelab.svg.
QIcon appIcon();
/// The About dialog's HTML: RouteLab, Qt, LibTorch and CUDA versions, the devices available and `inUse` (the
/// devices of the runs in progress, "" when none runs).
QString aboutHtml(const QString& inUse = {});
void showAboutDialog(QWidget* parent, const QString& inUse = {});

}  // namespace routelab
