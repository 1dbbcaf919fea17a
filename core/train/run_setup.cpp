#include "core/train/run_setup.h"

#include <algorithm>

#include "core/models/registry.h"
#include "core/train/evaluation.h"
#include "core/util/device.h"
#include "core/util/errors.h"

namespace routelab {

RunSetup::RunSetup(const ExperimentConfig& config, torch::Device device_, const std::string& db_path,
                   const nlohmann::json& stored_tokenizer)
    : device(device_) {
  const auto& train = config.train();
  batch_size = train.at("batch_size").get<std::int64_t>();
  grad_accum = train.at("grad_accum").get<std::int64_t>();
  seed = config.run().at("seed").get<std::int64_t>();
  bf16 = train.at("precision") == "bf16";
  distill_layers = train.at("distill_layers").get<bool>();
  const auto& entry = architecture(config.arch());
  const auto teacher_run = train.at("distill_from").get<std::int64_t>();
  if (teacher_run > 0 && !entry.adopt_teacher)  // a classifier's too
    throw ConfigError("train.distill_from: " + entry.display_name + " (model.arch=" + entry.id +
                      ") cannot start from a teacher; architectures that can: " +
                      architectures_with([](const ArchitectureEntry& e) { return e.adopt_teacher != nullptr; }));
  if (device.is_cuda()) configure_cuda_math(train.at("tf32").get<bool>(), train.at("deterministic").get<bool>());
  classification = entry.task == Task::Classification;
  if (classification) {
    class_data = make_classification_dataset(config.data());
    torch::manual_seed(static_cast<std::uint64_t>(seed));
    classifier = create_classifier(config.model(),
                                   {class_data->vocab_size(), class_data->max_length(), class_data->num_classes()});
    classifier->to(device);
    optimizer = make_optimizer(*classifier, train);
    schedule = std::make_unique<EpochSchedule>(class_data->size(Split::Train), step_rows(),
                                              static_cast<std::uint64_t>(seed));
    return;
  }
  dataset = make_dataset(config.data(), stored_tokenizer);
  torch::manual_seed(static_cast<std::uint64_t>(seed));
  model = create_model(config.model(), {dataset->tokenizer().vocab_size(), dataset->context()});
  model->to(device);
  if (teacher_run > 0) adopt_teacher(entry, teacher_run, config.train(), db_path);
  optimizer = make_optimizer(*model, train);  // over the weights the teacher left trainable
}

void RunSetup::adopt_teacher(const ArchitectureEntry& entry, std::int64_t run, const nlohmann::json& train,
                             const std::string& db_path) {
  teacher = open_teacher(db_path, run, dataset->tokenizer().vocab_size(), train.at("distill_weight").get<double>(),
                         train.at("distill_hidden").get<double>());
  teacher->model->to(device);
  // The teacher's weights copied in (a resumed run's checkpoint replaces them); without train.distill_layers only the
  // model's own parts (its router) train.
  const auto own = entry.adopt_teacher(*model, *teacher->model);
  if (distill_layers) return;
  for (auto& item : model->named_parameters()) {
    const auto& name = item.key();
    item.value().set_requires_grad(
        std::any_of(own.begin(), own.end(), [&](const auto& prefix) { return name.rfind(prefix, 0) == 0; }));
  }
}

Batch RunSetup::lm_batch(std::int64_t step) const {
  return dataset->sample(Split::Train, step_rows(), mix_seed(static_cast<std::uint64_t>(seed), kTrainStream,
                                                          static_cast<std::uint64_t>(step)));
}

ClassBatch RunSetup::class_batch(std::int64_t step) {
  return trim_padding(class_data->batch(Split::Train, schedule->indices(step)));
}

std::string RunSetup::distillation() const {
  if (!teacher) return {};
  return "distilled from run " + std::to_string(teacher->run_id) + " (" + teacher->name + ", " + teacher->arch +
         "; training " + (distill_layers ? "every weight" : "the router only") + ")";
}

torch::nn::Module& RunSetup::module() {
  if (classification) return *classifier;
  return *model;
}

}  // namespace routelab
