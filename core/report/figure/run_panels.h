// The panels of one run's dashboard as figures, built from typed records: routed tokens per layer (inference and
// training mode), the routing history (layer x logged step), and the per-token map of a probe. Pure functions: the
// dashboard draws them from the data it holds (live points included), the catalogue figures "routed-layers",
// "routing-history" and "token-map" (core/report/builders/catalog.h) from the store, so screen and paper show the same
// numbers. No Torch, no Qt.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/report/figure/figure.h"
#include "core/run/probe_record.h"
#include "core/run/routing_history.h"

namespace routelab {

/// One group of runs (seeds of one configuration, or one run) in the routed-layers bars.
struct RoutedLayersGroup {
  std::string label;
  int color = 0;
  std::vector<std::vector<double>> inference;  ///< [run][layer]: inference-mode share at the evaluation
  std::vector<bool> routed;                    ///< per layer: it makes routing decisions (from the first run)
  std::vector<double> training;                ///< [layer]: training-mode share at `training_step`; empty = none
  std::int64_t training_step = 0;
};

/// Routed tokens per layer (%), grouped bars: per group its inference-mode mean (std over runs as error bars),
/// its training-mode shares faint beside them ("label (training)"; the step is the caller's to say), and the
/// layers that do not route as hatched full bars.
FigurePanel routed_layers_panel(const std::vector<RoutedLayersGroup>& groups);

/// The most columns of a routing-history heat map: more than a panel has pixels across, or a paper figure at 300 dpi.
constexpr std::size_t kRoutingHistoryColumns = 1000;

/// The training-mode routed tokens (%) of each layer at each logged step: a heat map of layers x steps (columns in
/// logged order, labelled by step); layers that do not route (`routed` false) are empty cells. A history of more than
/// `max_columns` logged steps is drawn in columns of k = ceil(steps / max_columns) consecutive logged steps each (the
/// last one may hold fewer), labelled by their last step, each cell the mean of the shares its steps logged; the x
/// label says k.
FigurePanel routing_history_panel(const std::string& title, const RoutingHistory& history,
                                  const std::vector<bool>& routed, std::size_t max_columns = kRoutingHistoryColumns);

/// What colours the routed layers' rows of a token map.
enum class TokenMapColour {
  Gate,      ///< the gate (routed-path probability); TAGAT: its gate per layer and expert
  Decision,  ///< the hard decision (0 skipped, 1 routed)
  Expert,    ///< TAGAT: the chosen expert ids per layer and rank (the gate where a model has none)
};
std::string to_string(TokenMapColour colour);
/// "gate", "decision" or "expert"; anything else is a ConfigError naming `key`.
TokenMapColour parse_token_map_colour(const std::string& text, const std::string& key);
/// Whether the probe holds chosen expert ids (a TAGAT-style "expert" series of shape (T, L, k)).
bool has_expert_ids(const ProbeRecord& probe);

/// The probe's per-token routing: one heat map row per routed layer (coloured by `colour`), then one per
/// component of every per-token series the model reports (exit layer, depth, path, ...), then p(next token) for
/// language models; columns are the probe's tokens. Rows have their own ranges (`row_lo`/`row_hi`): [0, 1] for
/// gates, decisions and probabilities; integer data from 0 (negative: none) to its largest value (expert ids to
/// the expert count - 1, so an id keeps its colour); other data its own min .. max.
FigurePanel token_map_panel(const std::string& title, const ProbeRecord& probe, TokenMapColour colour);

}  // namespace routelab
