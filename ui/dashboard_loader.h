// Reads everything a run dashboard shows from the run store (called on the store thread): loss curves, the
// per-layer routing history, evaluations with their routing (extra_json) and the probe documents, parsed into
// plain values. Generic: per-token data is whatever the model put in its trace and token_data.
#pragma once
#include <string>

#include "core/run/evaluation_record.h"
#include "core/run/probe_record.h"
#include "ui/dashboard_data.h"

namespace routelab {

class RunStore;

/// Every metric series it reads (the loss curves, the metrics tab's and the cost panel's) goes through read_metric:
/// the store reader keeps a MetricSeriesCache alive around it (CachedMetricReads), so a live run's repeated reads
/// read the rows stored since the last one.
RunDashboardData loadDashboardData(const RunStore& store, qint64 runId);

/// What the dashboard and the token inspector show of one probe.
ProbeSnapshot probeSnapshot(const ProbeRecord& record);
/// What the dashboard shows of one stored evaluation.
EvalSnapshot evalSnapshot(const EvaluationRecord& record);
/// Sets the per-layer routing of `eval` from its layer records.
void setEvalLayers(EvalSnapshot& eval, std::vector<LayerRouting> layers);

/// The catalogue request of the metrics tab's figure: one run's panel of `panel` (a quantity, e.g. "lr"), or
/// every panel ("all").
FigureRequest metricsRequest(qint64 runId, const std::string& panel = "all");
/// The catalogue request of the metrics tab's expert loads: the last evaluation's.
FigureRequest expertLoadsRequest(qint64 runId);
/// Reads the metric keys of `runId` and builds the metrics tab's figures (the expert loads when the run stores
/// val/load/L<l>/E<i>).
RunMetricsData loadMetricsData(const RunStore& store, qint64 runId);

}  // namespace routelab
