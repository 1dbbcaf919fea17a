// The ui-side adapter from a run's routing to core/cost/flops.h: forward FLOPs and KV-cache bytes per sequence
// against sequence length, for the dense model and for the run's current routing. Per layer, a sub-layer that
// followed the routing in training (its token count equalled the routed count) runs the evaluation's routed
// share of the tokens; one that ran every token stays dense; anything else is scaled by eval/train share.
// An approximation for any architecture; the evaluation's measured FLOPs ratio is drawn beside it.
#pragma once
#include <QString>
#include <QVector>

#include "ui/dashboard_data.h"

namespace routelab {

/// The model shape from a resolved config (JSON text); invalid (with the reason) when it is not a Transformer.
CostShape costShapeFromConfig(const std::string& configJson);

/// Per layer, the share of a sequence's tokens each sub-layer processes under the evaluation's routing.
struct LayerParticipation {
  QVector<double> attn, mlp;
};

/// From the evaluation's per-layer routed shares and flags, and the training step's sub-layer shares
/// (`history` column at or before the evaluation; empty history = whole blocks follow the routing).
LayerParticipation participationAt(const EvalSnapshot& eval, const RoutingHistory& history);

struct CostCurves {
  QVector<double> seqLen;
  QVector<double> denseFlops, routedFlops;  ///< forward FLOPs of all layers, one sequence
  QVector<double> denseKvMiB, routedKvMiB;  ///< KV cache of all layers, one sequence
  double measuredSeqLen = 0, measuredFlops = 0;  ///< the evaluation's measured ratio at the run's context
};

/// Curves over sequence lengths 64 .. max(8192, 4 x context) (powers of two).
CostCurves costCurves(const CostShape& shape, const LayerParticipation& participation, double measuredFlopsRatio);

}  // namespace routelab
