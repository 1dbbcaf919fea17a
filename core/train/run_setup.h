// What a training run is made of before its first step, built once for `train` (the trainer's session) and `bench
// step` alike: its data, its model or classifier from the run's seed on its device (with train.distill_from, started
// from the stored teacher's weights), the optimizer, a classifier's epoch order, and the batch of each step.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/config/experiment_config.h"
#include "core/data/classification.h"
#include "core/data/dataset.h"
#include "core/models/classifier.h"
#include "core/models/language_model.h"
#include "core/train/classification_step.h"
#include "core/train/distillation.h"
#include "core/train/optimizer.h"

namespace routelab {

struct ArchitectureEntry;  // core/models/registry.h

class RunSetup {
 public:
  RunSetup() = default;
  /// Builds `config`'s run on `device` (CUDA math set from train.tf32 and train.deterministic there). `db_path`: the
  /// store that holds train.distill_from's teacher; `stored_tokenizer`: the tokenizer a resumed run trained with
  /// (null for a new run). Throws ConfigError naming the key for a teacher the architecture cannot start from, and
  /// what the data, model and teacher readers throw.
  RunSetup(const ExperimentConfig& config, torch::Device device, const std::string& db_path,
           const nlohmann::json& stored_tokenizer = nullptr);

  torch::Device device{torch::kCPU};
  bool classification = false;
  bool bf16 = false;                            ///< train.precision
  std::int64_t batch_size = 0, grad_accum = 1;  ///< a micro-batch's rows, and micro-batches a step
  std::int64_t seed = 0;                        ///< run.seed
  bool distill_layers = false;                  ///< train.distill_layers: every weight trains, not the router only
  std::unique_ptr<LmDataset> dataset;                  ///< language modelling
  std::shared_ptr<LanguageModel> model;
  std::optional<Teacher> teacher;                      ///< train.distill_from
  std::unique_ptr<ClassificationDataset> class_data;  ///< classification
  std::shared_ptr<SequenceClassifier> classifier;
  std::unique_ptr<EpochSchedule> schedule;  ///< classification: the examples of each step
  std::unique_ptr<MultiTensorAdamW> optimizer;

  /// Rows (sequences or examples) a step.
  std::int64_t step_rows() const { return batch_size * grad_accum; }
  /// Step `step`'s (numbered from 1) whole batch on the host, drawn as one so that a run with accumulation sees the
  /// batches of a run with one batch of that size: a language model's windows by (seed, step).
  Batch lm_batch(std::int64_t step) const;
  /// A classifier's step: its slice of its epoch's shuffled order, padding columns trimmed.
  ClassBatch class_batch(std::int64_t step);
  /// The model or the classifier.
  torch::nn::Module& module();
  const Teacher* teacher_or_null() const { return teacher ? &*teacher : nullptr; }
  /// "distilled from run 3 (name, dense; training the router only)"; empty without a teacher.
  std::string distillation() const;

 private:
  void adopt_teacher(const ArchitectureEntry& entry, std::int64_t run, const nlohmann::json& train,
                     const std::string& db_path);
};

}  // namespace routelab
