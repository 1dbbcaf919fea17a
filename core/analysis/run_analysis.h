// Analysis of a stored run: reopen it (its stored config, optionally with eval-only overrides such as
// model.inference=sparse or model.exit_threshold=0.9, its dataset and the weights of a checkpoint) and evaluate
// it on a split with the same fixed batches the trainer uses (classifiers: the whole split).
#pragma once
#include "core/train/checkpoint.h"
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/run/evaluation_record.h"

#include "core/config/experiment_config.h"
#include "core/data/classification.h"
#include "core/data/dataset.h"
#include "core/models/classifier.h"
#include "core/models/language_model.h"

namespace routelab {

/// What every reopened run carries besides its data and model.
struct OpenedRun {
  std::int64_t run_id = 0;
  std::string db_path;
  std::string name;
  ExperimentConfig config;              ///< the stored config with the overrides applied
  std::vector<std::string> sets;        ///< the overrides
  std::int64_t step = 0;                ///< the checkpoint's step
  std::string checkpoint;               ///< its path
  torch::Device device = torch::kCPU;
  bool bf16 = false;
};

/// What of a language-model run's data load_run opens.
enum class RunData {
  Full,       ///< its dataset, rebuilt from the config (the corpus read and tokenized, the shards mapped)
  Tokenizer,  ///< its stored tokenizer and context alone, for analyses of text given to them (generate, score,
              ///< tasks, the token inspector, a teacher): a run trained on shards opens without them. A run stored
              ///< before its tokenizer was (schema v4) opens its dataset.
};

struct LoadedRun : OpenedRun {
  std::unique_ptr<LmDataset> dataset;    ///< null when opened with RunData::Tokenizer from the stored tokenizer
  std::shared_ptr<LanguageModel> model;  ///< in eval mode
  std::shared_ptr<const Tokenizer> stored_tokenizer;  ///< set where `dataset` is null
  std::int64_t context_length = 0;                    ///< T of the dataset's batches (data.context for corpora)
  const Tokenizer& tokenizer() const { return dataset ? dataset->tokenizer() : *stored_tokenizer; }
};

/// A stored sentence-pair classification run (task "classification", e.g. tagat), opened as LoadedRun is.
struct LoadedClassifierRun : OpenedRun {
  std::unique_ptr<ClassificationDataset> data;   ///< rebuilt from the config (files re-read, synthetic regenerated)
  std::shared_ptr<SequenceClassifier> model;     ///< in eval mode
};

/// A stored run's resolved config and the checkpoint to load, read without loading anything.
struct StoredRun {
  std::string db_path;     ///< the store actually read
  std::string name, arch;
  ExperimentConfig config;  ///< the stored config with `sets` applied
  std::string checkpoint;   ///< path of the checkpoint's weights
  /// What the checkpoint must be (its row's step, the run, the run's config): checked, with the CRC-32 the store
  /// recorded, before the weights are used.
  CheckpointExpectation expect;
  std::optional<std::uint32_t> crc32;
  /// The tokenizer the run trained with (Tokenizer::to_json; null for a run stored before schema v4).
  nlohmann::json tokenizer;
};

/// Reads run `run_id` of `db_path` ("" = the default store): its config with `sets` applied and its checkpoint at
/// `step` (0 = the latest). An unknown run, an unreadable config or a missing checkpoint are errors naming the store
/// and the run.
StoredRun read_stored_run(const std::string& db_path, std::int64_t run_id, const std::vector<std::string>& sets = {},
                          std::int64_t step = 0);

/// The model options of architecture `arch` whose value in `model` differs from `stored`'s (the run's resolved model
/// section), in schema order, by what an evaluation with them is (read_stored_run warns of both kinds).
struct ModelOverrides {
  /// Read in training only (OptionSpec::training_only): the evaluation is the one without them.
  std::vector<std::string> training_only;
  /// Neither that nor meant for inference (OptionSpec::inference): the weights run with a value other than the one
  /// they were trained with (say model.norm_eps or rope_theta).
  std::vector<std::string> untrained;
  /// Not read by the evaluated model (OptionSpec::read_when fails: rope_factor without rope_scaling), of any kind:
  /// the evaluation is the one without them.
  std::vector<std::string> unread;
};
ModelOverrides model_overrides(const std::string& arch, const nlohmann::json& stored, const nlohmann::json& model);

/// Opens run `run_id` of the store `db_path` ("" = the default store) with the weights of its checkpoint at
/// `step` (0 = the latest). `sets` ("model.exit_threshold=0.9") are applied to the stored config; an option that
/// changes parameter shapes fails when the weights load (CheckpointError naming the file). A run without a
/// checkpoint, an unknown run or a config that no longer resolves are errors naming the store and the run. A
/// classification run is a ConfigError naming the run and its architecture (open it with load_classifier_run).
LoadedRun load_run(const std::string& db_path, std::int64_t run_id, const std::vector<std::string>& sets = {},
                   std::int64_t step = 0, RunData data = RunData::Full);

/// load_run for classification runs; a language-model run is a ConfigError naming the run.
LoadedClassifierRun load_classifier_run(const std::string& db_path, std::int64_t run_id,
                                        const std::vector<std::string>& sets = {}, std::int64_t step = 0);

/// Whether run `run_id` of `db_path` is a classification run (its architecture's task), read from the store.
bool is_classification_run(const std::string& db_path, std::int64_t run_id);

struct RunEvalOptions {
  Split split = Split::Val;
  std::int64_t batches = 0;     ///< 0 = the run's train.eval_batches
  std::int64_t batch_size = 0;  ///< 0 = the run's train.batch_size
};

struct RunEvalReport {
  std::int64_t run_id = 0;
  Task task = Task::LanguageModel;
  std::string name, arch, split;
  std::int64_t step = 0;
  std::vector<std::string> sets;
  std::int64_t batches = 0, batch_size = 0;
  double loss = 0, ppl = 0, bpc = 0, flops_ratio = 1, routed_fraction = 1;  ///< ppl, bpc: NaN for classifiers
  double accuracy = 0, macro_f1 = 0;      ///< classification only
  std::int64_t examples = 0;              ///< classification: the split's pairs (all are evaluated)
  std::vector<LayerRouting> layers;       ///< InferenceRouting::layers()
  std::map<std::string, double> stats;    ///< ModelOutput::stats, mean over the batches
  nlohmann::json to_json() const;
};

/// Evaluates in inference mode; with the run's own batch settings on the val split this reproduces the last
/// evaluation recorded at the checkpoint's step.
RunEvalReport evaluate_run(LoadedRun& run, const RunEvalOptions& options = {});

/// A classifier on the whole split (options.batches is ignored), as the trainer's per-epoch evaluation: loss,
/// accuracy, macro-F1, routing and the model's stats. An empty split is a DataError naming it.
RunEvalReport evaluate_run(LoadedClassifierRun& run, const RunEvalOptions& options = {});

/// "val", "test" or "train" -> Split; anything else is a ConfigError naming `key`.
Split parse_split(const std::string& name, const std::string& key);

}  // namespace routelab
