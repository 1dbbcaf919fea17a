// One parser for the probe document (the trainer's probe and the token inspector's traces).
#include "core/run/probe_record.h"

#include <functional>

#include "core/run/json_reader.h"
#include "core/store/run_store.h"
#include "core/util/recent_runs.h"

namespace routelab {
namespace {

using run_detail::kNaN;
using run_detail::Reader;
using nlohmann::json;

/// One token's values of a token series, flattened row-major; `shape` collects its dimensions on first use.
void flatten(const json& v, const Reader& in, const std::string& at, std::vector<double>& out, bool& integral) {
  if (v.is_array()) {
    for (std::size_t i = 0; i < v.size(); ++i) flatten(v[i], in, at + "[" + std::to_string(i) + "]", out, integral);
  } else if (v.is_boolean()) {
    out.push_back(v.get<bool>() ? 1.0 : 0.0);
  } else if (v.is_number()) {
    integral = integral && v.is_number_integer();
    out.push_back(v.get<double>());
  } else if (v.is_null()) {
    integral = false;
    out.push_back(kNaN);
  } else {
    in.fail(at, "expected a number, found " + std::string(v.type_name()));
  }
}

TokenSeries read_series(const std::string& name, const json& data, const Reader& in) {
  TokenSeries s;
  s.name = name;
  const std::string at = "token_data." + name;
  if (!data.is_array()) in.fail(at, "expected an array over tokens, found " + std::string(data.type_name()));
  if (!data.empty())
    for (const json* d = &data.front(); d->is_array() && !d->empty(); d = &d->front())
      s.shape.push_back(static_cast<int>(d->size()));
  bool integral = true;
  for (std::size_t t = 0; t < data.size(); ++t) {
    std::vector<double> values;
    flatten(data[t], in, at + "[" + std::to_string(t) + "]", values, integral);
    s.values.push_back(std::move(values));
  }
  s.integral = integral;
  return s;
}

}  // namespace

double TokenSeries::at(std::size_t token, std::size_t index) const {
  if (token >= values.size() || index >= values[token].size()) return kNaN;
  return values[token][index];
}

const TokenSeries* ProbeRecord::series(const std::string& name) const {
  for (const auto& s : token_data)
    if (s.name == name) return &s;
  return nullptr;
}

ProbeRecord read_probe(const json& doc, std::int64_t step, const std::string& where) {
  if (!doc.is_object())
    throw DataError(where + ": the probe is a " + std::string(doc.type_name()) + ", not an object");
  const Reader in(doc, where, "");
  ProbeRecord p;
  p.step = step;
  p.task = run_detail::read_task(in).value_or(Task::LanguageModel);
  p.tokens = in.strings_array("tokens");
  p.next_logprob = in.numbers_array("next_logprob");
  const json* layers = in.array("layers");
  for (std::size_t i = 0; layers && i < layers->size(); ++i) {
    const Reader l = in.element("layers", i);
    ProbeLayer layer;
    layer.layer = static_cast<int>(l.integer("layer").value_or(static_cast<std::int64_t>(i)));
    layer.kind = l.text("kind").value_or("dense");
    layer.routed = l.boolean("routed").value_or(false);
    layer.gate = l.numbers_array("gate");
    layer.decision = l.numbers_array("decision", /*flags=*/true);
    if (const auto stats = l.object("stats")) layer.stats = stats->numbers();
    p.layers.push_back(std::move(layer));
  }
  for (const auto& [name, data] : in.members("token_data")) p.token_data.push_back(read_series(name, *data, in));
  const json* top = in.array("top_k");
  for (std::size_t i = 0; top && i < top->size(); ++i) {
    const std::string at = "top_k[" + std::to_string(i) + "]";
    const json& position = top->at(i);
    if (!position.is_array()) in.fail(at, "expected an array, found " + std::string(position.type_name()));
    std::vector<ProbePrediction> predictions;
    for (std::size_t j = 0; j < position.size(); ++j) {
      const std::string entry = at + "[" + std::to_string(j) + "]";
      if (!position[j].is_object()) in.fail(entry, "expected an object, found " + std::string(position[j].type_name()));
      const Reader r(position[j], where, entry + ".");
      predictions.push_back({r.integer("id").value_or(0), r.text("text").value_or(""), r.number("p").value_or(kNaN)});
    }
    p.top_k.push_back(std::move(predictions));
  }
  p.dropped_tokens = in.integer("dropped_tokens").value_or(0);
  p.labels = in.strings_array("labels");
  p.class_probs = in.numbers_array("class_probs");
  p.predicted = static_cast<int>(in.integer("predicted").value_or(-1));
  p.label = static_cast<int>(in.integer("label").value_or(-1));
  p.label_name = in.text("label_name").value_or("");
  return p;
}

ProbeRecord read_probe(const ProbeRow& row) {
  const std::string where = "probe at step " + std::to_string(row.step);
  const json doc = json::parse(row.json.empty() ? std::string("{}") : row.json, nullptr, false);
  if (doc.is_discarded()) throw DataError(where + ": its document is not JSON");
  return read_probe(doc, row.step, where);
}

std::vector<ProbeRecord> read_probes(const RunStore& store, std::int64_t run_id, std::vector<std::string>* unreadable) {
  if (auto* cache = CachedProbeReads::current()) return cache->read(store, run_id, unreadable);
  return run_detail::read_rows(store.probes(run_id), [](const ProbeRow& row) { return read_probe(row); }, store.path(),
                               run_id, unreadable);
}

std::vector<ProbeRecord> ProbeRecordCache::read(const RunStore& store, std::int64_t run_id,
                                                std::vector<std::string>* unreadable) {
  last_read_[run_id] = ++reads_;
  forget_least_recent(last_read_, max_runs_, [this](std::int64_t run) { runs_.erase(run); });
  auto& before = runs_[run_id];
  std::map<std::int64_t, Entry> now;  // this read's documents: those of steps no longer stored are forgotten
  const auto read = [&](const ProbeRow& row) {
    const auto hash = std::hash<std::string>{}(row.json), length = row.json.size();
    if (const auto it = before.find(row.step);
        it != before.end() && it->second.hash == hash && it->second.length == length)
      return (now[row.step] = it->second).record;
    ++parsed_;
    return (now[row.step] = {hash, length, read_probe(row)}).record;
  };
  auto records = run_detail::read_rows(store.probes(run_id), read, store.path(), run_id, unreadable);
  before = std::move(now);
  return records;
}

}  // namespace routelab
