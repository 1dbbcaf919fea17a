// Reopening stored runs and evaluating them.
#include "core/analysis/run_analysis.h"

#include <cmath>

#include "core/models/registry.h"
#include "core/store/run_store.h"
#include "core/train/checkpoint.h"
#include "core/train/evaluation.h"
#include "core/util/device.h"
#include "core/util/errors.h"
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
    doc = nlohmann::json::parse(record->config_json, nullptr, false);
    if (doc.is_discarded() || !doc.is_object()) throw StoreError(where + " has an unreadable config");
    if (step <= 0) {
      checkpoint = store.latest_checkpoint(run_id);
    } else {
      for (const auto& c : store.checkpoints(run_id))
        if (c.step == step) checkpoint = c;
    }
  }
  if (!checkpoint)
    throw CheckpointError(where + (step > 0 ? " has no checkpoint at step " + std::to_string(step) : " has no checkpoint"));
  run.checkpoint = checkpoint->path;
  doc.erase("description");
  try {
    run.config = resolve_config(doc, sets, origin);
  } catch (const ConfigError& e) {
    throw ConfigError(where + ": " + e.what());
  }
  return run;
}

LoadedRun load_run(const std::string& db_path, std::int64_t run_id, const std::vector<std::string>& sets,
                   std::int64_t step) {
  StoredRun stored = read_stored_run(db_path, run_id, sets, step);
  LoadedRun run;
  run.db_path = stored.db_path;
  run.run_id = run_id;
  run.sets = sets;
  run.name = stored.name;
  run.config = std::move(stored.config);
  run.device = resolve_device(run.config.run().at("device").get<std::string>());
  run.bf16 = run.config.train().at("precision") == "bf16";
  configure_threads(static_cast<int>(run.config.run().at("threads").get<std::int64_t>()));
  run.dataset = make_dataset(run.config.data());
  run.model = create_model(run.config.model(), {run.dataset->tokenizer().vocab_size(), run.dataset->context()});
  run.model->to(run.device);
  const auto meta = load_checkpoint(stored.checkpoint, *run.model, nullptr, run.device);
  run.step = meta.step;
  run.checkpoint = stored.checkpoint;
  run.model->eval();
  return run;
}

nlohmann::json RunEvalReport::to_json() const {
  nlohmann::json j = {{"run", run_id},       {"name", name},   {"arch", arch},         {"split", split},
                      {"step", step},        {"sets", sets},   {"batches", batches},   {"batch_size", batch_size},
                      {"loss", loss},        {"ppl", ppl},     {"bpc", bpc},           {"flops_ratio", flops_ratio},
                      {"routed_fraction", routed_fraction},    {"layers", layers}};
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
  r.layers = pass.routing.to_json()["layers"];
  r.stats = pass.stats;
  return r;
}

}  // namespace routelab
