// Reads everything a run dashboard shows from the run store (called on the store thread): loss curves, the
// per-layer routing history, evaluations with their routing (extra_json) and the probe documents, parsed into
// plain values. Generic: per-token data is whatever the model put in its trace and token_data.
#pragma once
#include <string>

#include "ui/dashboard_data.h"

namespace routelab {

class RunStore;

RunDashboardData loadDashboardData(const RunStore& store, qint64 runId);

/// Parses one probe document (the trainer's probe_json); throws nlohmann::json::exception on malformed JSON.
ProbeSnapshot parseProbe(qint64 step, const std::string& json);
/// Parses one evaluation's extra_json.
EvalSnapshot parseEval(qint64 step, double valLoss, const std::string& extraJson);
/// Sets the per-layer routing of `eval` from its stored layer records (a JSON array); throws
/// nlohmann::json::exception on malformed JSON.
void setEvalLayers(EvalSnapshot& eval, const std::string& layersJson);

/// Whether the metrics tab plots `key` as a curve: train/<x> and val/<x> but the losses (the loss plot shows
/// them), the epoch counter and the per-expert series (load/..., assign/...: the expert-load bars show those).
bool isMetricsViewKey(const QString& key);
/// Reads the metric keys of `runId` and the series the metrics tab shows, with the last evaluation's expert
/// loads (val/load/L<l>/E<i>).
RunMetricsData loadMetricsData(const RunStore& store, qint64 runId);

}  // namespace routelab
