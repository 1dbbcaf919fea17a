// Layout pieces the plot widgets share: a caption above the widget's body, and a QCustomPlot legend in a row of
// its own above the axes (bars reach the top; an inset legend would hide them).
#pragma once
#include <QString>

class QCustomPlot;
class QLabel;
class QWidget;

namespace routelab {

/// Lays `owner` out as a word-wrapped caption above `body` (stretching), without margins. The caption shows
/// `text`, and stays hidden while it is empty. Returns the caption.
QLabel* addCaptionAbove(QWidget* owner, QWidget* body, const QString& text = {});

/// Shows `plot`'s legend in a row above its axes, one point smaller than `owner`'s font, `wrap` entries per row
/// (0 = one row).
void putLegendAbove(QCustomPlot* plot, const QWidget* owner, int wrap = 0);

}  // namespace routelab
