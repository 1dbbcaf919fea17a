// The live loss plots smooth with core's debiased EMA (core/run/smoothing.h): the same code as the exported
// figures' smoothed curves and the divergence alert, so the line on screen is the line in the paper.
#pragma once
#include "core/run/smoothing.h"
#include "widgets/loss_plot_widget.h"

namespace routelab {

inline void useDebiasedEma(LossPlotWidget* plot) {
  plot->setEmaSmoother([](double weight) -> LossPlotWidget::RunningSmoother {
    return [ema = DebiasedEma(weight)](double value) mutable { return ema.add(value); };
  });
}

}  // namespace routelab
