#include "core/config/sweep.h"

#include <functional>

#include "core/util/errors.h"

namespace routelab {
namespace {

/// Sets "section.key" in an overrides document.
void assign(nlohmann::json& overrides, const std::string& path, const nlohmann::json& value) {
  const auto dot = path.find('.');
  overrides[path.substr(0, dot)][path.substr(dot + 1)] = value;
}

}  // namespace

SweepPlan expand_sweep(const nlohmann::json& doc, const std::string& origin) {
  auto fail = [&](const std::string& what) { throw ConfigError(origin + ": " + what); };
  if (!doc.is_object()) fail("a sweep must be a JSON object");
  for (const auto& [key, value] : doc.items()) {
    bool known = key == "name" || key == "description" || key == "base" || key == "grid" || key == "baselines" ||
                 key == "table";
    for (const char* s : kConfigSections) known = known || key == s;
    if (!known) fail(key + ": unknown key (expected name, description, base, grid, baselines, table, model, data, "
                     "train, run)");
  }
  // `key`'s text in `object` (at `where`), or `fallback` where it is absent.
  auto text = [&](const nlohmann::json& object, const std::string& key, const std::string& where,
                  const std::string& fallback, const char* expected) {
    if (!object.contains(key)) return fallback;
    if (!object[key].is_string()) fail(where + ": expected " + expected + ", got " + object[key].dump());
    return object[key].get<std::string>();
  };
  // The preset `name` (at `where`), its errors naming the file and key.
  auto preset_at = [&](const std::string& where, const std::string& name) {
    try {
      return load_preset(name);
    } catch (const ConfigError& e) {
      fail(where + ": " + e.what());
    }
    return nlohmann::json();
  };
  SweepPlan plan;
  plan.name = text(doc, "name", "name", "sweep", "a name");
  plan.description = text(doc, "description", "description", "", "a text");
  plan.origin = origin;
  plan.table = text(doc, "table", "table", "summary", "a table name");
  if (plan.name.empty()) fail("name: must not be empty");

  nlohmann::json base = nlohmann::json::object();
  std::string base_name;
  if (doc.contains("base")) {
    base_name = text(doc, "base", "base", "", "a preset name");
    base = preset_at("base", base_name);
  }
  nlohmann::json sections = nlohmann::json::object();  // the file's own section overrides
  for (const char* s : kConfigSections)
    if (doc.contains(s)) {
      if (!doc[s].is_object()) fail(std::string(s) + ": expected an object");
      sections[s] = doc[s];
    }
  auto with_sections = [&](nlohmann::json overrides, bool include_model) {
    for (const auto& [section, body] : sections.items())
      if (include_model || section != "model")
        for (const auto& [key, value] : body.items()) overrides[section][key] = value;
    return overrides;
  };

  auto check_path = [&](const std::string& where, const std::string& path) {
    const auto dot = path.find('.');
    bool section_ok = false;
    for (const char* s : kConfigSections) section_ok = section_ok || (dot != std::string::npos && path.substr(0, dot) == s);
    if (!section_ok || dot + 1 >= path.size()) fail(where + ": expected section.key (model, data, train, run)");
  };
  std::vector<std::pair<std::string, std::vector<nlohmann::json>>> axes;
  if (doc.contains("grid")) {
    if (!doc["grid"].is_object()) fail("grid: expected an object of \"section.key\": [values]");
    for (const auto& [path, values] : doc["grid"].items()) {
      check_path("grid." + path, path);
      if (!values.is_array() || values.empty()) fail("grid." + path + ": expected a non-empty array of values");
      axes.emplace_back(path, std::vector<nlohmann::json>(values.begin(), values.end()));
    }
  }

  // Appends "key=value" (the path without its section) to a point's name suffix. Appended piece by piece: GCC 12
  // warns falsely on the chained operator+ form (-Wstringop-overflow).
  auto name_axis = [](std::string& suffix, const std::string& path, const nlohmann::json& value) {
    if (!suffix.empty()) suffix += ',';
    suffix += path.substr(path.find('.') + 1);
    suffix += '=';
    suffix += option_value_text(value);
  };

  auto resolve_point = [&](const nlohmann::json& overrides, const std::string& name, const std::string& from) {
    try {
      plan.points.push_back({name, from, resolve_config(overrides, {}, from)});
    } catch (const ConfigError& e) {
      fail("point '" + name + "': " + e.what());
    }
  };

  // The grid: odometer over the axes, the last key fastest.
  std::vector<std::size_t> index(axes.size(), 0);
  const auto grid_overrides = with_sections(base, true);
  while (true) {
    nlohmann::json overrides = grid_overrides;
    std::string suffix;
    for (std::size_t a = 0; a < axes.size(); ++a) {
      const auto& [path, values] = axes[a];
      assign(overrides, path, values[index[a]]);
      name_axis(suffix, path, values[index[a]]);
    }
    resolve_point(overrides, suffix.empty() ? plan.name : plan.name + "/" + suffix, base_name.empty() ? origin : base_name);
    std::size_t a = axes.size();
    while (a > 0 && ++index[a - 1] == axes[a - 1].second.size()) index[--a] = 0;
    if (a == 0) break;
  }

  if (doc.contains("baselines")) {
    if (!doc["baselines"].is_array()) fail("baselines: expected an array of {\"preset\": ..., \"name\": ...}");
    for (std::size_t b = 0; b < doc["baselines"].size(); ++b) {
      const auto& entry = doc["baselines"][b];
      const std::string where = "baselines[" + std::to_string(b) + "]";
      if (!entry.is_object() || !entry.contains("preset") || !entry["preset"].is_string())
        fail(where + ".preset: expected a preset name");
      for (const auto& [key, value] : entry.items())
        if (key != "preset" && key != "name" && key != "set")
          fail(where + "." + key + ": unknown key (expected preset, name, set)");
      const auto preset = entry["preset"].get<std::string>();
      const auto label = text(entry, "name", where + ".name", preset, "a name");
      // The baseline's own settings: {"train.lr": 1e-4, ...}, applied over the sweep's sections and axes.
      const auto own = entry.value("set", nlohmann::json::object());
      if (!own.is_object()) fail(where + ".set: expected an object of \"section.key\": value");
      for (const auto& [path, value] : own.items()) check_path(where + ".set." + path, path);
      // The shared budget and seeds: every grid axis outside the model section.
      std::vector<std::pair<std::string, std::vector<nlohmann::json>>> shared;
      for (const auto& axis : axes)
        if (axis.first.rfind("model.", 0) != 0) shared.push_back(axis);
      std::vector<std::size_t> at(shared.size(), 0);
      const auto baseline_overrides = with_sections(preset_at(where + ".preset", preset), false);
      while (true) {
        nlohmann::json overrides = baseline_overrides;
        std::string suffix;
        for (std::size_t a = 0; a < shared.size(); ++a) {
          assign(overrides, shared[a].first, shared[a].second[at[a]]);
          name_axis(suffix, shared[a].first, shared[a].second[at[a]]);
        }
        for (const auto& [path, value] : own.items()) assign(overrides, path, value);
        resolve_point(overrides, plan.name + "/" + label + (suffix.empty() ? "" : "," + suffix), preset);
        std::size_t a = shared.size();
        while (a > 0 && ++at[a - 1] == shared[a - 1].second.size()) at[--a] = 0;
        if (a == 0) break;
      }
    }
  }
  return plan;
}

SweepPlan load_sweep(const std::string& path) { return expand_sweep(load_json_file(path), path); }

}  // namespace routelab
