// routelab-render: draws a figure sidecar (the JSON of core/report/figure/figure.h) to PDF, SVG or PNG at a physical
// size with the GUI's QCustomPlot renderer, offscreen. `routelab-cli figure` calls it for the rendered files.
// Exit codes: 0 written, 1 export failed, 2 bad command line or sidecar (the message names the file and key).
#include <QApplication>
#include <QFileInfo>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "app/parse_command_line.h"
#include "core/report/figure/figure.h"
#include "core/util/errors.h"
#include "core/util/version.h"
#include "ui/figure_render.h"
#include "widgets/plot_export.h"

namespace {

/// Offscreen unless a display is there to use (a headless box, ssh, CI).
void chooseOffscreenPlatform() {
  const bool platformSet = std::getenv("QT_QPA_PLATFORM") != nullptr;
  const bool display = std::getenv("DISPLAY") != nullptr || std::getenv("WAYLAND_DISPLAY") != nullptr;
  if (!platformSet && !display) qputenv("QT_QPA_PLATFORM", "offscreen");
}

routelab::Figure readSidecar(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw routelab::ConfigError(path + ": cannot open the figure sidecar");
  nlohmann::json doc;
  try {
    in >> doc;
  } catch (const nlohmann::json::exception& e) {
    throw routelab::ConfigError(path + ": not valid JSON: " + e.what());
  }
  return routelab::figure_from_json(doc, path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Render a RouteLab figure sidecar (JSON) to PDF, SVG or PNG at a physical size", "routelab-render"};
  std::string sidecar, out;
  double widthCm = 0, heightCm = 0, fontPt = 0;
  int dpi = 300;
  app.add_option("sidecar", sidecar, "figure sidecar (.json), as written by routelab-cli figure")->required();
  app.add_option("--out,-o", out, "output file: .pdf, .svg or .png")->required();
  app.add_option("--width-cm", widthCm, "width in cm (default: the sidecar's width_cm)")->check(CLI::NonNegativeNumber);
  app.add_option("--height-cm", heightCm, "height in cm (default: the sidecar's height_cm)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--font-pt", fontPt, "font size in points (default: the sidecar's font_pt)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--dpi", dpi, "PNG resolution")->check(CLI::Range(10, 2400));
  app.set_version_flag("--version", std::string(ROUTELAB_VERSION));
  if (const auto exit_code = routelab::parse_command_line(app, argc, argv)) return *exit_code;

  if (!routelab::isPlotExportFormat(QFileInfo(QString::fromStdString(out)).suffix())) {
    std::cerr << "routelab-render: --out " << out << ": unknown extension (known: .pdf, .svg, .png)\n";
    return 2;
  }
  routelab::Figure figure;
  try {
    figure = readSidecar(sidecar);
  } catch (const routelab::Error& e) {
    std::cerr << "routelab-render: " << e.what() << "\n";
    return 2;
  }

  chooseOffscreenPlatform();
  QApplication qapp(argc, argv);
  QApplication::setApplicationName(QStringLiteral("routelab-render"));
  routelab::FigureExportOptions options;
  options.widthCm = widthCm;
  options.heightCm = heightCm;
  options.fontPt = fontPt;
  options.dpi = dpi;
  const QString path = QString::fromStdString(out);
  const QString error = routelab::exportFigure(figure, path, options);
  if (!error.isEmpty()) {
    std::cerr << "routelab-render: " << error.toStdString() << "\n";
    return 1;
  }
  std::cout << QFileInfo(path).absoluteFilePath().toStdString() << "\n";
  return 0;
}
