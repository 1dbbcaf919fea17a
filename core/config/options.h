// Option schemas: typed, ranged, documented options. One mechanism validates every config section and
// describes architecture options to the GUI's generated form.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace routelab {

enum class OptionType { Int, Float, Bool, String, Choice, IntList };

std::string to_string(OptionType type);

/// A condition on another option of the same section: its value is one of `values` (a choice's values, or an
/// integer's written out: "0"), or, with `nonzero`, it is a number other than 0 (Radial's depth_warmup is read where
/// depth_coeff is not 0).
struct OptionCondition {
  std::string key;
  std::vector<std::string> values = {};
  bool nonzero = false;
};

struct OptionSpec {
  std::string key;
  OptionType type = OptionType::Float;
  nlohmann::json default_value;
  std::string help;
  std::optional<double> min;          ///< inclusive; for IntList, bounds each element
  std::optional<double> max;          ///< inclusive
  std::vector<std::string> choices;   ///< for Choice
  /// Read in training (or at initialisation) only: the eval-mode forward of the same weights does not depend on it
  /// (the conformance suite checks it for every language model), so an evaluation that overrides it says so.
  bool training_only = false;
  /// Meant to be set for an evaluation: it chooses how the trained weights are run (an inference knob such as TSA's
  /// inference mode or RoPE scaling, or a computation with the same result) and leaves the parameters as they are
  /// (the conformance suite checks that). An evaluation that overrides any other option that was neither this nor
  /// training_only says that the weights were trained with another value.
  bool inference = false;
  /// Read only where each of these holds (DTRNet's capacity: model.routing expert; data.path: data.source file or
  /// shards). Elsewhere a value set away from the default is named as unread (unread_config_keys); for a model option
  /// the conformance suite checks that the model's forward and training loss do not depend on it there.
  std::vector<OptionCondition> read_when = {};
  /// How the trained weights are read, though their shapes do not show it (n_head splits the projections into
  /// heads): an evaluation that overrides it is refused by name (no shape check of the checkpoint would see it), and
  /// the conformance suite checks that another value loads the same tensors and computes something else.
  bool weight_layout = false;
  /// An inference option whose values compute the same result other ways (a reference oracle, a sparse dispatch):
  /// the conformance suite checks that every value's eval forward equals the default's.
  bool same_result = false;
  /// Read on a CUDA device only (train.tf32, train.deterministic): under run.device cpu a value set away from the
  /// default is named as unread.
  bool cuda_only = false;
  /// Read by a data-parallel run only (run.backend, the dist_* options): in a run of one process a value set away
  /// from the default is named as unread.
  bool data_parallel_only = false;
};

using OptionSchema = std::vector<OptionSpec>;

/// {key: default} for every option of the schema.
nlohmann::json schema_defaults(const OptionSchema& schema);

/// Checks that `section` is an object whose keys are all in the schema and whose values have the right type
/// and range. Integral floats are accepted for Int. Throws ConfigError naming `path.key`.
void validate_section(const nlohmann::json& section, const OptionSchema& schema, const std::string& path);

/// Validates one value against one spec; throws ConfigError naming `key_path`.
void validate_value(const nlohmann::json& value, const OptionSpec& spec, const std::string& key_path);

/// Parses a command-line string ("4", "3e-4", "true", "[1,3]", "llama") into the spec's type.
nlohmann::json parse_value(const std::string& text, const OptionSpec& spec, const std::string& key_path);

/// Machine-readable schema (for `presets --json`, the GUI form and documentation).
nlohmann::json schema_to_json(const OptionSchema& schema);

const OptionSpec* find_option(const OptionSchema& schema, const std::string& key);

/// The text a config value reads as in messages and conditions: a string as it is, anything else as compact JSON
/// ("0", "0.5", "[1,2]").
std::string option_value_text(const nlohmann::json& value);

/// The first of `spec`'s read_when conditions that `section` (a resolved section) fails; nullptr where the option is
/// read.
const OptionCondition* failed_condition(const OptionSpec& spec, const nlohmann::json& section);

/// What `section` (named `name`) holds at a condition's key: "model.rope_scaling is 'none'", "model.depth_coeff is 0".
std::string condition_value_text(const OptionCondition& condition, const std::string& name,
                                 const nlohmann::json& section);
/// Where a condition holds: "model.rope_scaling linear or yarn", "model.depth_coeff other than 0".
std::string condition_text(const OptionCondition& condition, const std::string& name);

}  // namespace routelab
