// Config diff of runs: each run's stored config JSON flattened to dotted key paths ("model.n_layer"), keeping
// only the keys whose values differ between the runs (a key missing from a run differs from any value). The
// compare view shows it beside its figures; the CLI can print it. No Torch, no Qt.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace routelab {

class RunStore;

/// The text shown for a key a run's config does not have.
inline constexpr const char* kConfigDiffMissing = "\xE2\x80\x94";  // U+2014 EM DASH

struct ConfigDiffRow {
  std::string key;                  ///< dotted path, e.g. "model.n_layer"; array elements stay one value
  std::vector<std::string> values;  ///< one per run: strings unquoted, other values as compact JSON; missing = "—"
};

struct ConfigDiff {
  std::vector<std::string> columns;  ///< one label per run, in the order given (e.g. "#3 dtrnet-a")
  std::vector<ConfigDiffRow> rows;   ///< the differing keys, sorted by section (first path part), then key
  std::size_t keys_compared = 0;     ///< distinct leaf keys over all runs (differing or not)
};

/// Flattens `doc` to (dotted key, leaf value) pairs in key order. Objects recurse; arrays, scalars and empty
/// objects are leaves. A non-object document is a ConfigError naming `origin`.
std::vector<std::pair<std::string, nlohmann::json>> flatten_config(const nlohmann::json& doc,
                                                                   const std::string& origin = "config");

/// The text a leaf value is shown as: a string without quotes, anything else as compact JSON.
std::string config_value_text(const nlohmann::json& value);

/// Pure diff of parsed configs, one label per document (sizes must match: else std::invalid_argument).
/// Values compare as JSON (1 equals 1.0); a key missing from some documents is a difference.
ConfigDiff config_diff(const std::vector<nlohmann::json>& configs, const std::vector<std::string>& labels);

/// The diff of the stored configs of `run_ids` (RunRecord.config_json), labelled "#id name". An unknown run is a
/// StoreError naming the store; a stored config that is not a JSON object is a ConfigError naming the run.
ConfigDiff config_diff(const RunStore& store, const std::vector<std::int64_t>& run_ids);

}  // namespace routelab
