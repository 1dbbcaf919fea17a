// Experiment configuration: a JSON document with sections model / data / train / run, resolved from the
// defaults of each section's schema (the model's from its architecture), a preset or file, and --set overrides.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config/options.h"

namespace routelab {

const OptionSchema& data_schema();
const OptionSchema& train_schema();
const OptionSchema& run_schema();

/// The sections of a config document, in order.
inline constexpr const char* kConfigSections[] = {"model", "data", "train", "run"};

/// "cpu", "cuda" or "cuda:N" (N up to three digits): the device names run.device and every --device accept.
bool is_device_name(const std::string& name);

struct ExperimentConfig {
  nlohmann::json doc;      ///< fully resolved and validated: {model:{arch,...}, data:{...}, train:{...}, run:{...}}
  std::string origin;      ///< preset name or file the overrides came from ("" for pure defaults)

  const nlohmann::json& model() const { return doc.at("model"); }
  const nlohmann::json& data() const { return doc.at("data"); }
  const nlohmann::json& train() const { return doc.at("train"); }
  const nlohmann::json& run() const { return doc.at("run"); }
  std::string arch() const { return model().at("arch").get<std::string>(); }
  /// Stable 16-hex-digit FNV-1a hash of the canonical (sorted-key) JSON of the resolved config.
  std::string hash() const;
};

/// Resolves `overrides` (a preset or file; keys limited to model/data/train/run/description) plus
/// `sets` ("train.steps=200", "model.n_layer=4") on top of the defaults, then validates cross-field rules.
/// Every error is a ConfigError naming `origin` (when given) and the key path.
ExperimentConfig resolve_config(const nlohmann::json& overrides, const std::vector<std::string>& sets = {},
                                const std::string& origin = "");

/// The files and folders a resolved config's `data` section names exist and are of the right kind: data.path (a
/// file for source 'file', a folder for 'shards'), data.tokenizer_model (sentencepiece), data.vocab_path
/// (wordpiece), data.train_path / val_path / test_path ('pairs'). A ConfigError naming the key and the path
/// otherwise, so a form can flag the field before anything is launched. Their contents are read when the data is.
void check_data_files(const ExperimentConfig& config);

/// The keys set away from their defaults that this config never reads, one message each naming the key, its value and
/// what reads it. Model options whose schema marks when they are read (OptionSpec::read_when: DTRNet's capacity with
/// expert routing, the RoPE options in the llama style); train.steps where train.epochs sets the steps; the
/// distillation options without train.distill_from; and the data section's: data.path outside sources file and
/// shards (the 360M presets keep their shard folder when `--set data.source=kjv` runs them on the embedded corpus), the
/// split fractions outside kjv and file, the synthetic tasks' keys outside their sources, data.shard_vocab outside
/// shards, data.tokenizer_model outside sentencepiece, the word tokenizers' keys outside theirs, the sentence-pair keys
/// outside source 'pairs'; train.tf32 and train.deterministic under run.device cpu (OptionSpec::cuda_only); run.backend
/// and the dist_* options in a run of one process, unless `data_parallel` (OptionSpec::data_parallel_only). Warnings,
/// not errors: such a config runs, not as its author may have meant.
std::vector<std::string> unread_config_keys(const ExperimentConfig& config, bool data_parallel = false);

/// Re-validates a stored resolved config (e.g. from a checkpoint or the run store).
ExperimentConfig config_from_resolved(const nlohmann::json& doc, const std::string& origin);

/// Reads a JSON file; a missing file or a syntax error is a ConfigError naming the file (and line).
nlohmann::json load_json_file(const std::string& path);

struct PresetInfo {
  std::string name;
  std::string description;
  std::string arch;
  std::string path;
};

/// Presets in experiments_dir(), sorted by name.
std::vector<PresetInfo> list_presets();
/// The overrides of preset `name`; an unknown name is a ConfigError listing the known ones.
nlohmann::json load_preset(const std::string& name);
/// Resolves preset `name` with `sets`.
ExperimentConfig preset_config(const std::string& name, const std::vector<std::string>& sets = {});

}  // namespace routelab
