// Reopening stored runs and evaluating them.
#include "core/analysis/run_analysis.h"

#include <cmath>
#include <limits>

#include "core/models/registry.h"
#include "core/run/run_config.h"
#include "core/store/run_store.h"
#include "core/train/checkpoint.h"
#include "core/train/classification_step.h"
#include "core/train/evaluation.h"
#include "core/util/device.h"
#include "core/util/errors.h"
#include "core/util/logging.h"
#include "core/util/paths.h"

namespace routelab {

Split parse_split(const std::string& name, const std::string& key) {
  if (name == "val") return Split::Val;
  if (name == "test") return Split::Test;
  if (name == "train") return Split::Train;
  throw ConfigError(key + ": '" + name + "' is not a split (val, test or train)");
}

StoredRun read_stored_run(const std::string& db_path, std::int64_t run_id, const std::vector<std::string>& sets,
                          std::int64_t step) {
  StoredRun run;
  run.db_path = db_path.empty() ? default_db_path() : db_path;
  const auto where = run.db_path + ": run " + std::to_string(run_id);
  std::optional<CheckpointRow> checkpoint;
  nlohmann::json doc;
  std::string origin;
  {
    RunStore store(run.db_path, /*mark_crashed=*/false);
    const auto record = store.run(run_id);
    if (!record) throw StoreError(run.db_path + ": no run with id " + std::to_string(run_id));
    run.name = record->name;
    run.arch = record->arch;
    origin = record->preset;
    run.expect.config_hash = record->config_hash;
    doc = stored_config(*record, run.db_path);
    run.tokenizer = parse_stored_tokenizer(store.run_tokenizer(run_id), where);
    if (step <= 0) {
      checkpoint = store.latest_checkpoint(run_id);
    } else {
      const auto kept = store.checkpoints(run_id);
      for (const auto& c : kept)
        if (c.step == step) checkpoint = c;
      if (!checkpoint) {  // name the steps it has: all of up to 8, else the first and the last
        std::string has = " (it has none)";
        if (kept.size() == 1) has = " (its one checkpoint is at step " + std::to_string(kept[0].step) + ")";
        if (kept.size() > 8)
          has = " (its " + std::to_string(kept.size()) + " checkpoints are at steps " +
                std::to_string(kept.front().step) + " to " + std::to_string(kept.back().step) + ")";
        if (kept.size() > 1 && kept.size() <= 8) {
          has = " (its checkpoints are at steps ";
          for (std::size_t i = 0; i < kept.size(); ++i) has += (i ? ", " : "") + std::to_string(kept[i].step);
          has += ")";
        }
        throw CheckpointError(where + " has no checkpoint at step " + std::to_string(step) + has);
      }
    }
  }
  if (!checkpoint) throw CheckpointError(where + " has no checkpoint");
  run.checkpoint = checkpoint->path;
  run.crc32 = checkpoint->crc32;
  run.expect.step = checkpoint->step;
  run.expect.run_id = run_id;
  doc.erase("description");
  try {
    run.config = resolve_config(doc, sets, origin);
  } catch (const ConfigError& e) {
    throw ConfigError(where + ": " + e.what());
  }
  // An option the weights are read by (the heads split the same projections another way): no shape check of the
  // checkpoint would see it.
  const auto& trained = doc.at("model");
  const auto& now = run.config.model();
  for (const auto& spec : architecture(run.arch).options)
    if (spec.weight_layout && trained.contains(spec.key) && now.contains(spec.key) &&
        trained.at(spec.key) != now.at(spec.key))
      throw ConfigError(where + ": model." + spec.key + ": the run was trained with " + trained.at(spec.key).dump() +
                        ", and its weights are read by it: an evaluation cannot change it");
  const auto overrides = model_overrides(run.arch, trained, now);
  for (const auto& key : overrides.training_only)
    logger("core")->warn(
        "{}: model.{} is read in training only: {}'s eval-mode forward does not depend on it, so "
        "this evaluation is the one without the override",
        where, key, run.arch);
  for (const auto& key : overrides.untrained)
    logger("core")->warn("{}: model.{}: the run was trained with {}; this evaluation runs its weights with {}", where,
                         key, trained.at(key).dump(), now.at(key).dump());
  for (const auto& key : overrides.unread)
    if (const auto* failed = failed_condition(*find_option(architecture(run.arch).options, key), now))
      logger("core")->warn("{}: model.{} is not read where {}: this evaluation is the one without the override", where,
                           key, condition_value_text(*failed, "model", now));
  return run;
}

ModelOverrides model_overrides(const std::string& arch, const nlohmann::json& stored, const nlohmann::json& model) {
  ModelOverrides out;
  for (const auto& spec : architecture(arch).options) {
    if (!stored.contains(spec.key) || !model.contains(spec.key) || stored.at(spec.key) == model.at(spec.key)) continue;
    if (failed_condition(spec, model))
      out.unread.push_back(spec.key);
    else if (!spec.inference)
      (spec.training_only ? out.training_only : out.untrained).push_back(spec.key);
  }
  return out;
}

namespace {

bool is_classification(const std::string& arch) { return architecture(arch).task == Task::Classification; }

std::string run_text(const StoredRun& stored, std::int64_t run_id) {
  return stored.db_path + ": run " + std::to_string(run_id) + " (" + stored.arch + ")";
}

/// The stored checkpoint's weights into `model`, built with the overrides `sets`: its CRC-32 and identity checked
/// first; an override that does not fit the weights (say model.n_layer changed) is named with the refusal. Returns
/// the checkpoint's step.
std::int64_t load_stored_checkpoint(const StoredRun& stored, torch::nn::Module& model, torch::Device device,
                                    const std::vector<std::string>& sets) {
  if (stored.crc32) verify_checkpoint_file(stored.checkpoint, *stored.crc32);
  try {
    return load_checkpoint(stored.checkpoint, model, nullptr, device, &stored.expect).step;
  } catch (const CheckpointError& e) {
    if (sets.empty()) throw;
    std::string overrides;
    for (const auto& set : sets) overrides += (overrides.empty() ? "" : ", ") + set;
    throw CheckpointError(std::string(e.what()) + " (the model was built with " + overrides +
                          ": an override that changes the model's weights cannot be evaluated on them)");
  }
}

/// The fields both kinds of run share, and the run's thread count applied.
void open_common(OpenedRun& run, StoredRun& stored, std::int64_t run_id, const std::vector<std::string>& sets) {
  run.db_path = stored.db_path;
  run.run_id = run_id;
  run.sets = sets;
  run.name = stored.name;
  run.checkpoint = stored.checkpoint;
  run.config = std::move(stored.config);
  std::string note;
  run.device = resolve_stored_device(run.config.run().at("device").get<std::string>(), &note);
  if (!note.empty()) logger("core")->warn("{}: {}", run_text(stored, run_id), note);
  if (run.device.is_cuda())
    configure_cuda_math(run.config.train().at("tf32").get<bool>(), run.config.train().at("deterministic").get<bool>());
  run.bf16 = run.config.train().at("precision") == "bf16";
  configure_threads(static_cast<int>(run.config.run().at("threads").get<std::int64_t>()));
}

}  // namespace

bool is_classification_run(const std::string& db_path, std::int64_t run_id) {
  const auto path = db_path.empty() ? default_db_path() : db_path;
  RunStore store(path, /*mark_crashed=*/false);
  const auto record = store.run(run_id);
  if (!record) throw StoreError(path + ": no run with id " + std::to_string(run_id));
  return is_classification(record->arch);
}

LoadedRun load_run(const std::string& db_path, std::int64_t run_id, const std::vector<std::string>& sets,
                   std::int64_t step, RunData data) {
  StoredRun stored = read_stored_run(db_path, run_id, sets, step);
  if (is_classification(stored.arch))
    throw ConfigError(run_text(stored, run_id) +
                      " is a sentence-pair classifier; this analysis needs a language model (eval, trace and the "
                      "token inspector open classifiers)");
  LoadedRun run;
  open_common(run, stored, run_id, sets);
  try {
    if (data == RunData::Tokenizer && !stored.tokenizer.is_null()) {
      run.stored_tokenizer = Tokenizer::from_json(stored.tokenizer);
      run.context_length = dataset_context(run.config.data());
    } else {
      run.dataset = make_dataset(run.config.data(), stored.tokenizer);
      run.context_length = run.dataset->context();
    }
  } catch (const DataError& e) {  // its corpus, shards or stored tokenizer: name the run they belong to
    throw DataError(run_text(stored, run_id) + ": " + e.what());
  }
  run.model = create_model(run.config.model(), {run.tokenizer().vocab_size(), run.context_length});
  run.model->to(run.device);
  run.step = load_stored_checkpoint(stored, *run.model, run.device, sets);
  run.model->eval();
  return run;
}

LoadedClassifierRun load_classifier_run(const std::string& db_path, std::int64_t run_id,
                                        const std::vector<std::string>& sets, std::int64_t step) {
  StoredRun stored = read_stored_run(db_path, run_id, sets, step);
  if (!is_classification(stored.arch))
    throw ConfigError(run_text(stored, run_id) + " is a language model, not a classifier");
  LoadedClassifierRun run;
  open_common(run, stored, run_id, sets);
  run.data = make_classification_dataset(run.config.data());
  run.model = create_classifier(run.config.model(),
                                {run.data->vocab_size(), run.data->max_length(), run.data->num_classes()});
  run.model->to(run.device);
  run.step = load_stored_checkpoint(stored, *run.model, run.device, sets);
  run.model->eval();
  return run;
}

nlohmann::json RunEvalReport::to_json() const {
  nlohmann::json j = {{"run", run_id},       {"name", name},   {"arch", arch},         {"split", split},
                      {"step", step},        {"sets", sets},   {"batches", batches},   {"batch_size", batch_size},
                      {"loss", loss},        {"ppl", ppl},     {"bpc", bpc},           {"flops_ratio", flops_ratio},
                      {"routed_fraction", routed_fraction},    {"layers", layers_json(layers)}};
  j["task"] = to_string(task);
  if (task == Task::Classification) {
    j["accuracy"] = accuracy;
    j["macro_f1"] = macro_f1;
    j["examples"] = examples;
    j.erase("ppl");
    j.erase("bpc");
  }
  j["stats"] = nlohmann::json::object();
  for (const auto& [key, value] : stats) j["stats"][key] = value;
  return j;
}

RunEvalReport evaluate_run(LoadedRun& run, const RunEvalOptions& options) {
  const auto& train = run.config.train();
  RunEvalReport r;
  r.run_id = run.run_id;
  r.name = run.name;
  r.arch = run.config.arch();
  r.split = to_string(options.split);
  r.step = run.step;
  r.sets = run.sets;
  r.batches = options.batches > 0 ? options.batches : train.at("eval_batches").get<std::int64_t>();
  r.batch_size = options.batch_size > 0 ? options.batch_size : train.at("batch_size").get<std::int64_t>();
  const auto seed = static_cast<std::uint64_t>(run.config.run().at("seed").get<std::int64_t>());
  const auto pass = evaluate_split(*run.model, *run.dataset, options.split, r.batches, r.batch_size, seed, run.device,
                                   run.bf16);
  r.loss = pass.loss;
  r.ppl = std::exp(pass.loss);
  r.bpc = pass.loss / std::log(2.0) / run.dataset->chars_per_token(options.split);
  r.flops_ratio = pass.routing.flops_ratio();
  r.routed_fraction = pass.routing.any_routed() ? pass.routing.mean_routed_fraction() : 1.0;
  r.layers = pass.routing.layers();
  r.stats = pass.stats;
  return r;
}

RunEvalReport evaluate_run(LoadedClassifierRun& run, const RunEvalOptions& options) {
  RunEvalReport r;
  r.run_id = run.run_id;
  r.task = Task::Classification;
  r.name = run.name;
  r.arch = run.config.arch();
  r.split = to_string(options.split);
  r.step = run.step;
  r.sets = run.sets;
  r.examples = run.data->size(options.split);
  if (r.examples == 0)
    throw DataError("run " + std::to_string(run.run_id) + ": the " + r.split + " split has no pairs (data." +
                    r.split + "_path)");
  r.batch_size = options.batch_size > 0 ? options.batch_size : run.config.train().at("batch_size").get<std::int64_t>();
  r.batches = (r.examples + r.batch_size - 1) / r.batch_size;
  const auto pass = evaluate_classifier(*run.model, *run.data, options.split, r.batch_size, run.device, run.bf16);
  r.loss = pass.loss;
  r.ppl = r.bpc = std::numeric_limits<double>::quiet_NaN();
  r.accuracy = pass.scores.accuracy;
  r.macro_f1 = pass.scores.macro_f1;
  r.flops_ratio = pass.routing.flops_ratio();
  r.routed_fraction = pass.routing.any_routed() ? pass.routing.mean_routed_fraction() : 1.0;
  r.layers = pass.routing.layers();
  r.stats = pass.stats;
  return r;
}

}  // namespace routelab
