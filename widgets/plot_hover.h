// Hover readouts for QCustomPlot plots: the value under the cursor, as a tooltip naming the series, for every line
// and scatter graph of every axis rect (the loss plot, dashboard panels, Compare and exported-figure views).
#pragma once
#include <QPointF>
#include <QString>

class QCustomPlot;

namespace routelab {

/// The readout at `pixel` (widget coordinates): "<series>\n<x label> <x> · <y label> <y>" for the data point
/// nearest to it among the visible graphs, when one lies within `radius` pixels; empty otherwise. Pure: tests call
/// it directly.
QString plotReadoutAt(const QCustomPlot* plot, const QPointF& pixel, double radius = 12.0);

/// Shows plotReadoutAt as a tooltip while the mouse moves over `plot` (hidden when nothing is near).
void installPlotHoverReadout(QCustomPlot* plot);

}  // namespace routelab
