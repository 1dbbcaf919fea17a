// The ui-side adapter from a run to core/cost/cost_curve.h: forward FLOPs and KV-cache bytes per sequence against
// sequence length, for the dense model and for the routing of one evaluation, priced by the architecture's registry
// entry (its FLOPs model at the evaluation's measured fractions, its KV rule), exactly as the cost-length figure.
#pragma once
#include <string>

#include <QString>
#include <QVector>

#include "ui/dashboard_data.h"

namespace routelab {

/// What the cost curves need from a resolved config (JSON text), or why a run's cost cannot be priced.
CostModel costModelFromConfig(const std::string& configJson);

struct CostCurves {
  QVector<double> seqLen;
  QVector<double> denseFlops, routedFlops;  ///< forward FLOPs of all layers, one sequence; routed empty without routing
  QVector<double> denseKvMiB, routedKvMiB;  ///< KV cache of all layers, one sequence
  double contextRatio = 1;                  ///< routed / dense FLOPs priced at exactly the run's context
  double contextDenseFlops = 0;             ///< dense FLOPs at the run's context (0 without routing)
  QString error;                            ///< why the evaluation's routing could not be priced (dense curves kept)
};

/// Curves over sequence lengths 64 .. max(8192, 4 x context) (powers of two) for `eval`'s stored layer records;
/// dense only when `eval` is null or has none.
CostCurves costCurves(const CostModel& model, const EvalSnapshot* eval);

}  // namespace routelab
