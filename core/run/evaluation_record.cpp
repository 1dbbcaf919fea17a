// One parser for the evaluation document, with one error policy: a wrong type names the step and key path.
#include "core/run/evaluation_record.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/store/run_store.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

using nlohmann::json;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// Reads keys of one object, naming "evaluation at step S: path.key" in its errors.
class Reader {
 public:
  Reader(const json& doc, std::string where, std::string path) : doc_(doc), where_(std::move(where)), path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw DataError(where_ + ": " + path_ + key + ": " + what);
  }
  const json* find(const std::string& key) const {
    const auto it = doc_.find(key);
    return it == doc_.end() || it->is_null() ? nullptr : &*it;
  }
  /// Absent: none. NaN and infinities, which JSON cannot hold, are written as null and read back as NaN.
  std::optional<double> number(const std::string& key) const {
    const auto it = doc_.find(key);
    if (it == doc_.end()) return std::nullopt;
    if (it->is_null()) return kNaN;
    if (!it->is_number()) fail(key, "expected a number, found " + std::string(it->type_name()));
    return it->get<double>();
  }
  std::optional<std::int64_t> integer(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) fail(key, "expected an integer, found " + std::string(v->type_name()));
    return v->get<std::int64_t>();
  }
  std::optional<bool> boolean(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) fail(key, "expected true or false, found " + std::string(v->type_name()));
    return v->get<bool>();
  }
  std::optional<std::string> text(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) fail(key, "expected a string, found " + std::string(v->type_name()));
    return v->get<std::string>();
  }
  const json* array(const std::string& key) const {
    const json* v = find(key);
    if (v && !v->is_array()) fail(key, "expected an array, found " + std::string(v->type_name()));
    return v;
  }
  std::optional<Reader> object(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_object()) fail(key, "expected an object, found " + std::string(v->type_name()));
    return Reader(*v, where_, path_ + key + ".");
  }
  Reader element(const std::string& key, std::size_t i) const {
    const json& v = doc_.at(key).at(i);
    const std::string at = key + "[" + std::to_string(i) + "]";
    if (!v.is_object()) fail(at, "expected an object, found " + std::string(v.type_name()));
    return Reader(v, where_, path_ + at + ".");
  }
  /// Every member of an object of numbers (a stats map); null members (NaN when written) read as NaN.
  std::map<std::string, double> numbers() const {
    std::map<std::string, double> out;
    for (const auto& [key, value] : doc_.items()) {
      if (value.is_null()) out[key] = kNaN;
      else if (value.is_number()) out[key] = value.get<double>();
      else fail(key, "expected a number, found " + std::string(value.type_name()));
    }
    return out;
  }

 private:
  const json& doc_;
  std::string where_, path_;
};

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
  if (!doc.is_object()) throw DataError(where + ": its document is a " + std::string(doc.type_name()) + ", not an object");
  const Reader in(doc, where, "");
  if (const auto task = in.text("task")) {
    if (*task != "classification" && *task != "lm") in.fail("task", "'" + *task + "' (lm or classification)");
    r.task = parse_task(*task);
  }
  r.flops_ratio = in.number("flops_ratio");
  if (const json* layers = in.array("layers")) {
    for (std::size_t i = 0; i < layers->size(); ++i) {
      const Reader l = in.element("layers", i);
      LayerRouting layer;
      layer.layer = static_cast<int>(l.integer("layer").value_or(static_cast<std::int64_t>(i)));
      layer.kind = l.text("kind").value_or("dense");
      layer.routed = l.boolean("routed").value_or(false);
      layer.routed_fraction = l.number("routed_fraction").value_or(1.0);
      layer.flops = l.number("flops").value_or(0.0);
      layer.dense_flops = l.number("dense_flops").value_or(0.0);
      if (const auto stats = l.object("stats")) layer.stats = stats->numbers();
      r.layers.push_back(std::move(layer));
    }
  }
  if (const auto stats = in.object("stats")) r.stats = stats->numbers();
  r.accuracy = in.number("accuracy");
  r.macro_f1 = in.number("macro_f1");
  if (const json* f1 = in.array("f1"))
    for (std::size_t i = 0; i < f1->size(); ++i) {
      const json& v = f1->at(i);
      if (!v.is_number() && !v.is_null()) in.fail("f1[" + std::to_string(i) + "]", "expected a number");
      r.f1.push_back(v.is_null() ? kNaN : v.get<double>());
    }
  if (const json* labels = in.array("labels"))
    for (std::size_t i = 0; i < labels->size(); ++i) {
      if (!labels->at(i).is_string()) in.fail("labels[" + std::to_string(i) + "]", "expected a string");
      r.labels.push_back(labels->at(i).get<std::string>());
    }
  r.examples = in.integer("examples");
  return r;
}

std::vector<EvaluationRecord> read_evaluations(const RunStore& store, std::int64_t run_id,
                                               std::vector<std::string>* unreadable) {
  std::vector<EvaluationRecord> out;
  for (const auto& row : store.evals(run_id)) {
    try {
      out.push_back(read_evaluation(row));
    } catch (const DataError& e) {
      const std::string message = store.path() + ": run " + std::to_string(run_id) + ": " + e.what();
      if (!unreadable) throw DataError(message);
      unreadable->push_back(message);
    }
  }
  return out;
}

json evaluation_extra_json(const EvaluationRecord& r) {
  json doc = {{"mode", "inference"}};
  if (r.flops_ratio) doc["flops_ratio"] = number_or_null(*r.flops_ratio);
  json layers = json::array();
  for (const auto& l : r.layers) {
    json j = {{"layer", l.layer},  {"kind", l.kind},   {"routed", l.routed}, {"routed_fraction", number_or_null(l.routed_fraction)},
              {"flops", l.flops}, {"dense_flops", l.dense_flops}};
    if (!l.stats.empty()) j["stats"] = numbers_json(l.stats);
    layers.push_back(std::move(j));
  }
  doc["layers"] = std::move(layers);
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
