#include "core/run/queued_request.h"

#include "core/run/json_reader.h"

namespace routelab {

std::string QueuedRequest::to_json() const {
  nlohmann::json doc = nlohmann::json::object();
  if (processes > 1) doc["processes"] = processes;
  if (resume_run > 0) {
    doc["resume"] = resume_run;
    return doc.dump();
  }
  doc["preset"] = preset;
  if (!config_json.empty()) doc["configJson"] = config_json;
  if (!sets.empty()) doc["sets"] = sets;
  if (steps > 0) doc["steps"] = steps;
  if (!name.empty()) doc["name"] = name;
  if (!tags.empty()) doc["tags"] = tags;
  return doc.dump();
}

QueuedRequest read_queued_request(const std::string& json, const std::string& where) {
  const auto doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) throw DataError(where + ": the request is not a JSON object");
  const run_detail::Reader r(doc, where, "");
  QueuedRequest q;
  q.resume_run = r.integer("resume").value_or(0);
  q.preset = r.text("preset").value_or("");
  q.config_json = r.text("configJson").value_or("");
  q.sets = r.strings_array("sets");
  q.steps = r.integer("steps").value_or(0);
  q.name = r.text("name").value_or("");
  q.tags = r.text("tags").value_or("");
  q.processes = static_cast<int>(r.integer("processes").value_or(1));
  if (q.processes < 1 || q.processes > 1024)
    throw DataError(where + ": processes: " + std::to_string(q.processes) + " is outside 1..1024");
  if (q.resume_run <= 0 && q.preset.empty() && q.config_json.empty())
    throw DataError(where + ": the request names no preset, config or run to resume");
  return q;
}

}  // namespace routelab
