// What a training run stores of an evaluation and of a log step's routing: the metrics, the evaluation row with its
// per-layer record, the routing rows. Written through the run's RankWriter (nothing on data-parallel ranks but 0).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/train/classification_step.h"
#include "core/train/data_parallel.h"
#include "core/train/evaluation.h"
#include "core/train/trainer.h"

namespace routelab {

/// The wall time a stored row carries: seconds since the epoch, now.
double record_wall_s();

/// A language model's validation pass: val/loss, ppl, bpc (with the split's characters per token), FLOPs ratio,
/// routed share, the model's statistics and the evaluation row.
EvalMetrics record_lm_eval(RankWriter& writer, std::int64_t step, const EvalPass& pass, double chars_per_token);

/// A classifier's validation pass: loss, accuracy, macro-F1, epoch, routing, statistics and the evaluation row.
EvalMetrics record_classification_eval(RankWriter& writer, std::int64_t step, const ClassEvalPass& pass,
                                       std::int64_t steps_per_epoch, const std::vector<std::string>& labels);

/// A log step's routing: a row per layer, train/flops_ratio, the model's statistics as train/<key>; fills the
/// step's per-layer routed shares and FLOPs ratio in `m`.
void record_train_routing(RankWriter& writer, std::int64_t step, const std::vector<LayerTrace>& trace,
                          const std::map<std::string, double>& stats, StepMetrics& m);

}  // namespace routelab
