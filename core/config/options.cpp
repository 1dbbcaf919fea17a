// Validation and parsing of option values against their specs.
#include "core/config/options.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/util/errors.h"

namespace routelab {
namespace {

std::string show(const nlohmann::json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

bool is_integral(const nlohmann::json& v) {
  if (v.is_number_integer()) return true;
  if (v.is_number_float()) {
    double d = v.get<double>();
    return std::isfinite(d) && std::floor(d) == d;
  }
  return false;
}

void check_range(double x, const OptionSpec& spec, const std::string& key_path) {
  std::ostringstream msg;
  if (spec.min && x < *spec.min) {
    msg << key_path << ": " << x << " is below the minimum " << *spec.min;
    throw ConfigError(msg.str());
  }
  if (spec.max && x > *spec.max) {
    msg << key_path << ": " << x << " is above the maximum " << *spec.max;
    throw ConfigError(msg.str());
  }
}

}  // namespace

std::string to_string(OptionType type) {
  switch (type) {
    case OptionType::Int: return "int";
    case OptionType::Float: return "float";
    case OptionType::Bool: return "bool";
    case OptionType::String: return "string";
    case OptionType::Choice: return "choice";
    case OptionType::IntList: return "int_list";
  }
  return "unknown";
}

nlohmann::json schema_defaults(const OptionSchema& schema) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& spec : schema) out[spec.key] = spec.default_value;
  return out;
}

const OptionSpec* find_option(const OptionSchema& schema, const std::string& key) {
  for (const auto& spec : schema)
    if (spec.key == key) return &spec;
  return nullptr;
}

void validate_value(const nlohmann::json& value, const OptionSpec& spec, const std::string& key_path) {
  auto wrong_type = [&](const char* expected) {
    throw ConfigError(key_path + ": expected " + expected + ", got " + show(value));
  };
  switch (spec.type) {
    case OptionType::Int:
      if (!is_integral(value)) wrong_type("an integer");
      check_range(value.get<double>(), spec, key_path);
      break;
    case OptionType::Float:
      if (!value.is_number()) wrong_type("a number");
      if (!std::isfinite(value.get<double>())) wrong_type("a finite number");
      check_range(value.get<double>(), spec, key_path);
      break;
    case OptionType::Bool:
      if (!value.is_boolean()) wrong_type("true or false");
      break;
    case OptionType::String:
      if (!value.is_string()) wrong_type("a string");
      break;
    case OptionType::Choice: {
      if (!value.is_string()) wrong_type("a string");
      const auto s = value.get<std::string>();
      bool ok = false;
      for (const auto& c : spec.choices) ok = ok || c == s;
      if (!ok) {
        std::string list;
        for (const auto& c : spec.choices) list += (list.empty() ? "" : ", ") + c;
        throw ConfigError(key_path + ": '" + s + "' is not one of " + list);
      }
      break;
    }
    case OptionType::IntList:
      if (!value.is_array()) wrong_type("a list of integers");
      for (std::size_t i = 0; i < value.size(); ++i) {
        const std::string item_path = key_path + "[" + std::to_string(i) + "]";
        if (!is_integral(value[i])) throw ConfigError(item_path + ": expected an integer, got " + show(value[i]));
        check_range(value[i].get<double>(), spec, item_path);
      }
      break;
  }
}

void validate_section(const nlohmann::json& section, const OptionSchema& schema, const std::string& path) {
  if (!section.is_object()) throw ConfigError(path + ": expected an object, got " + show(section));
  for (const auto& [key, value] : section.items()) {
    const OptionSpec* spec = find_option(schema, key);
    if (!spec) throw ConfigError(path + "." + key + ": unknown key");
    validate_value(value, *spec, path + "." + key);
  }
}

nlohmann::json parse_value(const std::string& text, const OptionSpec& spec, const std::string& key_path) {
  nlohmann::json value;
  if (spec.type == OptionType::String || spec.type == OptionType::Choice) {
    value = text;
  } else {
    value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) throw ConfigError(key_path + ": cannot parse '" + text + "' as " + to_string(spec.type));
  }
  if (spec.type == OptionType::Int && is_integral(value)) value = value.get<std::int64_t>();
  validate_value(value, spec, key_path);
  return value;
}

nlohmann::json schema_to_json(const OptionSchema& schema) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& spec : schema) {
    nlohmann::json o = {{"key", spec.key}, {"type", to_string(spec.type)}, {"default", spec.default_value},
                        {"help", spec.help}};
    if (spec.min) o["min"] = *spec.min;
    if (spec.max) o["max"] = *spec.max;
    if (!spec.choices.empty()) o["choices"] = spec.choices;
    if (spec.training_only) o["training_only"] = true;
    if (spec.inference) o["inference"] = true;
    if (spec.weight_layout) o["weight_layout"] = true;
    if (spec.same_result) o["same_result"] = true;
    if (spec.cuda_only) o["cuda_only"] = true;
    if (spec.data_parallel_only) o["data_parallel_only"] = true;
    for (const auto& c : spec.read_when)
      o["read_when"].push_back(c.nonzero ? nlohmann::json{{"key", c.key}, {"nonzero", true}}
                                         : nlohmann::json{{"key", c.key}, {"values", c.values}});
    out.push_back(o);
  }
  return out;
}

namespace {

bool condition_holds(const OptionCondition& c, const nlohmann::json& section) {
  const auto it = section.find(c.key);
  if (it == section.end()) return false;
  if (c.nonzero) return it->is_number() && it->get<double>() != 0;
  return std::find(c.values.begin(), c.values.end(), option_value_text(*it)) != c.values.end();
}

}  // namespace

std::string option_value_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

const OptionCondition* failed_condition(const OptionSpec& spec, const nlohmann::json& section) {
  for (const auto& c : spec.read_when)
    if (!condition_holds(c, section)) return &c;
  return nullptr;
}

std::string condition_value_text(const OptionCondition& condition, const std::string& name,
                                 const nlohmann::json& section) {
  const auto it = section.find(condition.key);
  const auto value = it == section.end() ? std::string("unset")
                     : it->is_string()   ? "'" + it->get<std::string>() + "'"
                                         : option_value_text(*it);
  return name + "." + condition.key + " is " + value;
}

std::string condition_text(const OptionCondition& condition, const std::string& name) {
  std::string text = name + "." + condition.key + " ";
  if (condition.nonzero) return text + "other than 0";
  const auto& values = condition.values;
  for (std::size_t i = 0; i < values.size(); ++i)
    text += (i == 0 ? "" : i + 1 == values.size() ? " or " : ", ") + values[i];
  return text;
}

}  // namespace routelab
