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
/// "RouteLab x.y.z · Qt a.b.c · LibTorch d.e.f" as HTML for the About dialog.
QString aboutHtml();
void showAboutDialog(QWidget* parent);

}  // namespace routelab
