// Config diff: flatten each config to dotted key paths, collect the union of keys, keep the differing ones.
#include "core/report/tables/config_diff.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "core/config/options.h"
#include "core/run/run_config.h"
#include "core/store/run_store.h"
#include "core/util/errors.h"

namespace routelab {
namespace {

void flatten_into(const nlohmann::json& node, const std::string& prefix,
                  std::vector<std::pair<std::string, nlohmann::json>>& out) {
  if (node.is_object() && !node.empty()) {
    for (auto it = node.begin(); it != node.end(); ++it)
      flatten_into(it.value(), prefix.empty() ? it.key() : prefix + "." + it.key(), out);
    return;
  }
  out.emplace_back(prefix, node);
}

std::vector<std::string> split_path(const std::string& key) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t dot = key.find('.', start);
    parts.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

/// Section first, then the remaining path part by part ("model.a.b" after "model.a", before "model.a_b").
bool key_before(const std::string& a, const std::string& b) {
  const auto pa = split_path(a), pb = split_path(b);
  return std::lexicographical_compare(pa.begin(), pa.end(), pb.begin(), pb.end());
}

}  // namespace

std::vector<std::pair<std::string, nlohmann::json>> flatten_config(const nlohmann::json& doc,
                                                                   const std::string& origin) {
  if (!doc.is_object()) throw ConfigError(origin + ": config is not a JSON object");
  std::vector<std::pair<std::string, nlohmann::json>> out;
  if (doc.empty()) return out;
  flatten_into(doc, "", out);
  return out;
}

std::string config_value_text(const nlohmann::json& value) { return option_value_text(value); }

ConfigDiff config_diff(const std::vector<nlohmann::json>& configs, const std::vector<std::string>& labels) {
  if (configs.size() != labels.size())
    throw std::invalid_argument("config_diff: " + std::to_string(configs.size()) + " configs but " +
                                std::to_string(labels.size()) + " labels");
  std::vector<std::map<std::string, nlohmann::json>> flat;
  flat.reserve(configs.size());
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    std::map<std::string, nlohmann::json> leaves;
    for (auto& [key, value] : flatten_config(configs[i], labels[i])) {
      keys.push_back(key);
      leaves.emplace(std::move(key), std::move(value));
    }
    flat.push_back(std::move(leaves));
  }
  std::sort(keys.begin(), keys.end(), key_before);
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());

  ConfigDiff diff;
  diff.columns = labels;
  diff.keys_compared = keys.size();
  for (const std::string& key : keys) {
    bool differs = false;
    const nlohmann::json* first = nullptr;
    bool first_seen = false;
    for (const auto& leaves : flat) {
      const auto it = leaves.find(key);
      const nlohmann::json* value = it == leaves.end() ? nullptr : &it->second;
      if (!first_seen) {
        first = value;
        first_seen = true;
      } else if ((first == nullptr) != (value == nullptr) || (first && *first != *value)) {
        differs = true;
        break;
      }
    }
    if (!differs) continue;
    ConfigDiffRow row;
    row.key = key;
    for (const auto& leaves : flat) {
      const auto it = leaves.find(key);
      row.values.push_back(it == leaves.end() ? std::string(kConfigDiffMissing) : config_value_text(it->second));
    }
    diff.rows.push_back(std::move(row));
  }
  return diff;
}

ConfigDiff config_diff(const RunStore& store, const std::vector<std::int64_t>& run_ids) {
  std::vector<nlohmann::json> configs;
  std::vector<std::string> labels;
  for (const std::int64_t id : run_ids) {
    const auto record = store.run(id);
    if (!record) throw StoreError("run store " + store.path() + ": no run " + std::to_string(id));
    configs.push_back(stored_config(*record, store.path()));
    labels.push_back("#" + std::to_string(id) + " " + record->name);
  }
  return config_diff(configs, labels);
}

}  // namespace routelab
