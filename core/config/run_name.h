// The default name of a run: what it is and what sets it apart, so runs launched side by side can be told apart in
// the runs browser, on tabs and in legends ("mod-c0.5-s2" rather than "mod-dtrnet-bilayer" twice).
#pragma once
#include <string>

#include "core/config/experiment_config.h"

namespace routelab {

/// The base is the preset (or config file stem) when the run keeps its architecture ("mod-0.7"; prefixed with the
/// architecture where the preset's name does not start with it: "dense-quickstart"), else the architecture alone
/// (a DTRNet preset launched as MoD is "mod"). Then, compared with the origin resolved with this run's
/// architecture, up to three changed model options and train.{lr, batch_size, grad_accum, precision}, each as the
/// initials of its key and its value ("capacity" 0.5 -> "c0.5", "routed_layers" [1, 2] -> "rl1.2", a string value
/// alone: "bf16"; more changes add "+N"), and "-s<seed>" where the seed is not the origin's. An origin that is not a
/// preset or a readable config file (tests, pure defaults) adds no changes and compares the seed with the default.
std::string default_run_name(const ExperimentConfig& config);

}  // namespace routelab
