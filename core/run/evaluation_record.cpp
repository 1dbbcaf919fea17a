// One parser for the evaluation document, with one error policy: a wrong type names the step and key path.
#include "core/run/evaluation_record.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/run/context_curve.h"
#include "core/run/json_reader.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

using nlohmann::json;
using run_detail::Reader;

std::vector<LayerRouting> read_layers(const Reader& in, const std::string& key) {
  std::vector<LayerRouting> out;
  const json* layers = in.array(key);
  for (std::size_t i = 0; layers && i < layers->size(); ++i) {
    const Reader l = in.element(key, i);
    LayerRouting layer;
    layer.layer = static_cast<int>(l.integer("layer").value_or(static_cast<std::int64_t>(i)));
    layer.kind = l.text("kind").value_or("dense");
    layer.routed = l.boolean("routed").value_or(false);
    layer.routed_fraction = l.number("routed_fraction").value_or(1.0);
    layer.flops = l.number("flops").value_or(0.0);
    layer.dense_flops = l.number("dense_flops").value_or(0.0);
    if (const auto stats = l.object("stats")) layer.stats = stats->numbers();
    out.push_back(std::move(layer));
  }
  return out;
}

json number_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json numbers_json(const std::map<std::string, double>& values) {
  json out = json::object();
  for (const auto& [key, value] : values) out[key] = number_or_null(value);
  return out;
}

}  // namespace

std::string to_string(Task task) { return task == Task::Classification ? "classification" : "lm"; }

Task parse_task(const std::string& text) {
  if (text == "lm") return Task::LanguageModel;
  if (text == "classification") return Task::Classification;
  throw ConfigError("task: '" + text + "' (lm or classification)");
}

std::vector<double> EvaluationRecord::routed_fractions() const {
  std::vector<double> out;
  for (const auto& l : layers) out.push_back(l.routed_fraction);
  return out;
}

std::vector<bool> EvaluationRecord::routed_layers() const {
  std::vector<bool> out;
  for (const auto& l : layers) out.push_back(l.routed);
  return out;
}

bool EvaluationRecord::any_routed() const {
  return std::any_of(layers.begin(), layers.end(), [](const LayerRouting& l) { return l.routed; });
}

std::optional<double> EvaluationRecord::stat(const std::string& key) const {
  const auto it = stats.find(key);
  if (it == stats.end()) return std::nullopt;
  return it->second;
}

std::optional<Task> run_detail::read_task(const Reader& in) {
  const auto text = in.text("task");
  if (!text) return std::nullopt;
  try {
    return parse_task(*text);
  } catch (const ConfigError&) {
    in.fail("task", "'" + *text + "' (lm or classification)");
  }
}

EvaluationRecord read_evaluation(const EvalRow& row) {
  EvaluationRecord r;
  r.step = row.step;
  r.split = row.split;
  r.loss = row.loss;
  r.ppl = row.ppl;
  r.bpc = row.bpc;
  const std::string where = "evaluation at step " + std::to_string(row.step);
  const json doc = json::parse(row.extra_json.empty() ? std::string("{}") : row.extra_json, nullptr, false);
  if (doc.is_discarded()) throw DataError(where + ": its document is not JSON");
  if (!doc.is_object())
    throw DataError(where + ": its document is a " + std::string(doc.type_name()) + ", not an object");
  const Reader in(doc, where, "");
  r.task = run_detail::read_task(in).value_or(Task::LanguageModel);
  r.flops_ratio = in.number("flops_ratio");
  if (in.array("layers")) r.layers = read_layers(in, "layers");
  if (const auto stats = in.object("stats")) r.stats = stats->numbers();
  r.accuracy = in.number("accuracy");
  r.macro_f1 = in.number("macro_f1");
  r.f1 = in.numbers_array("f1");
  r.labels = in.strings_array("labels");
  r.examples = in.integer("examples");
  return r;
}

std::vector<EvaluationRecord> read_evaluations(const RunStore& store, std::int64_t run_id,
                                               std::vector<std::string>* unreadable) {
  auto rows = store.evals(run_id);
  std::erase_if(rows, [](const EvalRow& row) { return is_context_curve(row); });
  return run_detail::read_rows(rows, [](const EvalRow& row) { return read_evaluation(row); }, store.path(), run_id,
                               unreadable);
}

std::vector<LayerRouting> read_layers(const json& layers, const std::string& where) {
  const json doc = {{"layers", layers}};
  return read_layers(Reader(doc, where, ""), "layers");
}

json layers_json(const std::vector<LayerRouting>& layers) {
  json out = json::array();
  for (const auto& l : layers) {
    json j = {{"layer", l.layer},
              {"kind", l.kind},
              {"routed", l.routed},
              {"routed_fraction", number_or_null(l.routed_fraction)},
              {"flops", number_or_null(l.flops)},
              {"dense_flops", number_or_null(l.dense_flops)}};
    if (!l.stats.empty()) j["stats"] = numbers_json(l.stats);
    out.push_back(std::move(j));
  }
  return out;
}

json evaluation_extra_json(const EvaluationRecord& r) {
  json doc = {{"mode", "inference"}};
  if (r.flops_ratio) doc["flops_ratio"] = number_or_null(*r.flops_ratio);
  doc["layers"] = layers_json(r.layers);
  if (!r.stats.empty()) doc["stats"] = numbers_json(r.stats);
  if (r.task == Task::Classification) {
    doc["task"] = to_string(r.task);
    if (r.accuracy) doc["accuracy"] = number_or_null(*r.accuracy);
    if (r.macro_f1) doc["macro_f1"] = number_or_null(*r.macro_f1);
    json f1 = json::array();
    for (const double v : r.f1) f1.push_back(number_or_null(v));
    doc["f1"] = std::move(f1);
    doc["labels"] = r.labels;
    if (r.examples) doc["examples"] = *r.examples;
  }
  return doc;
}

}  // namespace routelab
