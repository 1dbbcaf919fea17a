// `routelab-cli presets` and `architectures`: what this build has registered, and one architecture's options with
// what each one is read for (training only, or meant to be set for an evaluation).
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "app/cli_commands.h"
#include "core/config/experiment_config.h"
#include "core/models/registry.h"

namespace routelab::cli {
namespace {

/// An option's values: its choices, its range, or nothing for a flag or free text.
std::string option_values(const OptionSpec& spec) {
  std::string out;
  for (const auto& c : spec.choices) out += (out.empty() ? "" : " | ") + c;
  if (!out.empty()) return out;
  const auto number = [](double v) {
    std::ostringstream s;
    s << std::setprecision(12) << v;
    return s.str();
  };
  if (spec.min && spec.max) return number(*spec.min) + " to " + number(*spec.max);
  if (spec.min) return "at least " + number(*spec.min);
  return "";
}

/// One architecture's options: a row each (key, type, default, values, what it is read for) and its help below.
void print_options(const ArchitectureEntry& e) {
  std::cout << e.id << " (" << to_string(e.task) << "): " << e.display_name << " — " << e.source << "\n"
            << e.description << "\n\n";
  std::size_t key_width = std::string("OPTION").size(), values_width = std::string("VALUES").size();
  std::size_t default_width = std::string("DEFAULT").size();
  for (const auto& spec : e.options) {
    key_width = std::max(key_width, spec.key.size());
    values_width = std::max(values_width, option_values(spec).size());
    default_width = std::max(default_width, spec.default_value.dump().size());
  }
  const auto row = [&](const std::string& key, const std::string& type, const std::string& fallback,
                       const std::string& values, const std::string& use) {
    std::ostringstream line;
    line << std::left << std::setw(static_cast<int>(key_width + 2)) << key << std::setw(8) << type
         << std::setw(static_cast<int>(default_width + 2)) << fallback
         << std::setw(static_cast<int>(values_width + 2)) << values << use;
    auto text = line.str();
    text.erase(text.find_last_not_of(' ') + 1);
    std::cout << text << "\n";
  };
  row("OPTION", "TYPE", "DEFAULT", "VALUES", "READ");
  for (const auto& spec : e.options) {
    row(spec.key, to_string(spec.type), spec.default_value.dump(), option_values(spec),
        spec.training_only ? "in training only" : spec.inference ? "for inference" : "");
    std::cout << "    " << spec.help << "\n";
  }
  std::cout << "\nSet one with --set model.KEY=VALUE. An evaluation (eval, the token inspector) may change those read "
               "for inference; one read in training only changes nothing there, and any other is named with the "
               "value the weights were trained with.\n";
}

}  // namespace

int cmd_presets(bool json) {
  const auto presets = list_presets();
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& p : presets)
      out.push_back({{"name", p.name}, {"arch", p.arch}, {"description", p.description}, {"path", p.path}});
    std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  // Columns as wide as their longest entry plus two spaces, so no name runs into the next column.
  std::size_t name_width = std::string("PRESET").size(), arch_width = std::string("ARCH").size();
  for (const auto& p : presets) {
    name_width = std::max(name_width, p.name.size());
    arch_width = std::max(arch_width, p.arch.size());
  }
  const auto row = [&](const std::string& name, const std::string& arch, const std::string& description) {
    std::cout << std::left << std::setw(static_cast<int>(name_width + 2)) << name
              << std::setw(static_cast<int>(arch_width + 2)) << arch << description << "\n";
  };
  row("PRESET", "ARCH", "DESCRIPTION");
  for (const auto& p : presets) row(p.name, p.arch, p.description);
  return 0;
}

int cmd_architectures(bool json, const std::string& id) {
  const auto entry_json = [](const ArchitectureEntry& e) {
    return nlohmann::json{{"id", e.id},         {"name", e.display_name},       {"task", to_string(e.task)},
                          {"source", e.source}, {"description", e.description}, {"options", schema_to_json(e.options)}};
  };
  const auto print_json = [](const nlohmann::json& doc) {
    std::cout << doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  };
  if (!id.empty()) {  // an unknown id: the registry's error lists the registered ones
    const auto& entry = architecture(id);
    if (json) return print_json(entry_json(entry));
    print_options(entry);
    return 0;
  }
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : architectures()) out.push_back(entry_json(e));
    return print_json(out);
  }
  for (const auto& e : architectures())
    std::cout << std::left << std::setw(20) << e.id << std::setw(16) << to_string(e.task) << e.display_name << " — "
              << e.source << "\n";
  std::cout << "\n`routelab-cli architectures ID` lists one architecture's options.\n";
  return 0;
}

}  // namespace routelab::cli
