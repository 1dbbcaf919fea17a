// What a router routes: the share of tokens each routed layer sends down its routed (computed) path, broken down by
// the kind of token (character class, position in the window, training frequency, how predictable the token was and
// how hard the next one is), over a sample of a split run through the model in inference mode. The seeds make such
// claims from a probe sentence (TSA: later routers attenuate spaces, punctuation and predictable characters and keep
// content-bearing characters in mid-word positions); this measures them over thousands of tokens, for any language
// model of the registry.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/analysis/run_analysis.h"
#include "core/report/tables/table.h"

namespace routelab {

class LanguageModel;
class LmDataset;
class Tokenizer;

/// How the sample's tokens are grouped.
enum class TokenGrouping {
  Class,           ///< the token's characters: space, newline, punctuation, digit, word start, mid-word, other
  Position,        ///< its position in the window, in buckets of powers of four (0, 1-3, 4-15, ...)
  Frequency,       ///< how common it is in the training split (the most frequent tokens making 50% of it, ...)
  Predictability,  ///< the model's p(token | the tokens before it), in quartiles over the sample
  Difficulty,      ///< the loss of the model's prediction of the next token at this position, in quartiles
};
std::string to_string(TokenGrouping grouping);
/// "class", "position", "frequency", "predictability" or "difficulty"; anything else is a ConfigError naming `key`.
TokenGrouping parse_token_grouping(const std::string& name, const std::string& key);
const std::vector<TokenGrouping>& all_token_groupings();
/// to_string of each of all_token_groupings(), in that order.
std::vector<std::string> token_grouping_names();

/// A token's character class from its displayed text (Tokenizer::token_text) and whether the token before it ends in
/// a letter or digit: "space", "newline", "punctuation", "digit", "word start", "mid-word" or "other" (byte and
/// control pieces, ids without text). Letters after a leading space, or after a token that does not end in a letter
/// or digit, start a word.
std::string token_class(const std::string& text, bool previous_ends_in_alnum);
/// Whether the displayed text ends in a letter or digit (what token_class asks of the token before).
bool ends_in_alnum(const std::string& text);

/// One group of tokens: how many of the sample fell in it and the share of them each routed layer sent down its
/// routed path (NaN for an empty group); gate: the mean gate where the layer has one (NaN otherwise).
struct BreakdownGroup {
  std::string label;
  std::string short_label;  ///< what a figure's row shows ("top 50%", "Q4 least"); the label where that is short
  std::int64_t tokens = 0;
  std::vector<double> routed;  ///< per routed layer
  std::vector<double> gate;    ///< per routed layer
  /// The mean of `routed` over the routed layers (the share of the group's token-layer decisions taken).
  double mean_routed() const;
  /// The mean of `gate` over the routed layers that have one.
  double mean_gate() const;
};

struct BreakdownTable {
  TokenGrouping by = TokenGrouping::Class;
  std::vector<BreakdownGroup> groups;  ///< in a fixed order (classes as listed above, positions and quartiles rising)
};

struct RoutedLayerInfo {
  int layer = 0;
  std::string kind;  ///< the layer kind its trace names (LayerTrace::kind)
};

struct RoutingBreakdownOptions {
  Split split = Split::Val;
  std::int64_t tokens = 16384;              ///< tokens analysed, in whole windows spread evenly over the split
  std::int64_t frequency_tokens = 1 << 20;  ///< training tokens counted for the frequency groups (evenly spread)
  std::int64_t batch_size = 0;              ///< windows per forward; 0 = the run's train.batch_size
  std::vector<TokenGrouping> groupings = all_token_groupings();
  /// A model that routes no token gives a breakdown without layers or tables instead of a ConfigError (a figure of
  /// several runs draws the others).
  bool unrouted_is_empty = false;
};

struct RoutingBreakdown {
  std::int64_t run_id = 0, step = 0;
  std::string name, arch, split;
  std::int64_t tokens = 0, windows = 0, frequency_tokens = 0;
  std::vector<RoutedLayerInfo> layers;  ///< the routed layers, in the order of the trace
  BreakdownGroup all;                   ///< every token of the sample
  std::vector<BreakdownTable> tables;   ///< one per grouping asked for

  nlohmann::json to_json() const;
  /// Plain-text tables: per grouping a row per group (tokens, share of the sample, mean over routed layers, each
  /// routed layer), percentages on the routed path, or with `gates` the mean gates (a soft-gated model such as TSA
  /// in its soft inference computes every token: its gates are what differ).
  std::string to_table(bool gates = false) const;
};

/// The breakdown of `model` (put in eval mode) over `data`'s split: windows spread evenly over the split (a synthetic
/// task's evaluation examples instead), every token of each window counted. A model that routes no token (dense) is a
/// ConfigError naming its architecture (unless options.unrouted_is_empty).
RoutingBreakdown routing_breakdown(LanguageModel& model, const LmDataset& data, const RoutingBreakdownOptions& options,
                                   const torch::Device& device = torch::kCPU, bool bf16 = false,
                                   std::uint64_t seed = 0);

/// The same for a stored run (its device, precision and seed), named after it.
RoutingBreakdown routing_breakdown(LoadedRun& run, const RoutingBreakdownOptions& options = {});

struct BreakdownTableOptions {
  bool per_layer = false;              ///< a column per run and routed layer (else the mean over the routed layers)
  bool by_seed = true;                 ///< runs of one config but their seeds share a column, mean +- std
  bool gates = false;                  ///< the groups' mean gates instead of their routed shares (TSA's soft gating)
  std::vector<std::string> sets = {};  ///< eval-only overrides of every run ("model.inference=sparse")
  std::int64_t step = 0;               ///< every run's checkpoint of this step (0: each run's latest)
};

/// A paper table of several runs' breakdowns (kept ones read, others computed and kept), each at its latest
/// checkpoint or all at the checkpoint of one step (a run without it is a ConfigError naming the run and the steps it
/// has): a row per group of `by` any run's sample holds (the short labels, in the order first seen), a column
/// per run (or per run and routed layer), each cell the percentage of the group's decisions on the routed path (or
/// its mean gate). A run that routes no token keeps a column of dashes. Written by to_latex / to_markdown / to_csv
/// (core/report/tables/table.h).
ReportTable routing_breakdown_table(const std::string& db_path, const std::vector<std::int64_t>& run_ids,
                                    TokenGrouping by, const RoutingBreakdownOptions& sample = {},
                                    const BreakdownTableOptions& table = {});

/// Reads RoutingBreakdown::to_json back; a missing or mistyped field is a StoreError naming `origin`.
RoutingBreakdown routing_breakdown_from_json(const nlohmann::json& doc, const std::string& origin);

/// The breakdown of run `run_id` of the store at `db_path` ("" = the default store) at its checkpoint of `step` (0 =
/// the latest) with the eval-only overrides `sets`, read from the store when that checkpoint was broken down before
/// with the same overrides, device, split and sample (every grouping is computed and kept, so another grouping reads
/// it too), else computed from the checkpoint and kept in the store (a read-only store keeps nothing). A kept
/// document that cannot be read is computed again. `from_store` (optional) says which it was.
RoutingBreakdown stored_routing_breakdown(const std::string& db_path, std::int64_t run_id,
                                          const RoutingBreakdownOptions& options,
                                          const std::vector<std::string>& sets = {}, std::int64_t step = 0,
                                          bool* from_store = nullptr);

}  // namespace routelab
