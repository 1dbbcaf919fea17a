// Perceptually uniform, colour-blind-safe colour map (viridis, matplotlib's default) for routing heat maps and
// token views, and a readable text colour on top of it. Header-only; no QCustomPlot here.
#pragma once
#include <QColor>

#include <algorithm>
#include <array>
#include <cmath>

namespace routelab {

/// Viridis sampled at 9 evenly spaced stops (matplotlib's table), interpolated linearly in RGB.
inline QColor viridis(double t) {
  static constexpr std::array<std::array<int, 3>, 9> kStops{{{68, 1, 84},
                                                             {71, 44, 122},
                                                             {59, 81, 139},
                                                             {44, 113, 142},
                                                             {33, 144, 141},
                                                             {39, 173, 129},
                                                             {92, 200, 99},
                                                             {170, 220, 50},
                                                             {253, 231, 37}}};
  if (!std::isfinite(t)) return QColor(200, 200, 200);
  const double x = std::clamp(t, 0.0, 1.0) * (kStops.size() - 1);
  const auto i = std::min<std::size_t>(static_cast<std::size_t>(x), kStops.size() - 2);
  const double f = x - static_cast<double>(i);
  auto mix = [&](int c) { return static_cast<int>(std::lround(kStops[i][c] + f * (kStops[i + 1][c] - kStops[i][c]))); };
  return QColor(mix(0), mix(1), mix(2));
}

/// Black on the bright end of viridis, white on the dark end.
inline QColor textColorOn(const QColor& background) {
  const double luminance = 0.299 * background.redF() + 0.587 * background.greenF() + 0.114 * background.blueF();
  return luminance > 0.55 ? QColor(Qt::black) : QColor(Qt::white);
}

}  // namespace routelab
