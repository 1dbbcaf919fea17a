#include "core/config/run_name.h"

#include <cstdio>
#include <filesystem>
#include <optional>
#include <vector>

#include "core/config/options.h"
#include "core/models/registry.h"
#include "core/util/errors.h"

namespace routelab {

namespace {

namespace fs = std::filesystem;

constexpr std::size_t kMaxChanges = 3;
constexpr const char* kNamedTrainKeys[] = {"lr", "batch_size", "grad_accum", "precision"};

bool is_config_file(const std::string& origin) { return fs::path(origin).extension() == ".json"; }

/// The origin's overrides, or nothing when the origin is neither a preset nor a readable config file.
std::optional<nlohmann::json> origin_overrides(const std::string& origin) {
  if (origin.empty()) return std::nullopt;
  try {
    auto doc = is_config_file(origin) ? load_json_file(origin) : load_preset(origin);
    if (doc.is_object()) return doc;
  } catch (const Error&) {
  }
  return std::nullopt;
}

/// "capacity" -> "c", "routed_layers" -> "rl"; a key of at most three letters stays whole ("lr").
std::string initials(const std::string& key) {
  if (key.size() <= 3 && key.find('_') == std::string::npos) return key;
  std::string out;
  bool start = true;
  for (const char c : key) {
    if (c == '_') {
      start = true;
    } else if (start) {
      out += c;
      start = false;
    }
  }
  return out;
}

std::string compact(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "" : "no";
  if (v.is_number_integer()) return std::to_string(v.get<std::int64_t>());
  if (v.is_number()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v.get<double>());
    return buf;
  }
  if (v.is_array()) {
    std::string out;
    for (const auto& item : v) out += (out.empty() ? "" : ".") + compact(item);
    return out;
  }
  return v.dump();
}

/// "c0.5", "bf16", "nobias" (false), "bias" (true).
std::string change_token(const std::string& key, const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return compact(value) + key;
  return initials(key) + compact(value);
}

std::vector<std::string> changes(const nlohmann::json& baseline, const nlohmann::json& run) {
  std::vector<std::string> out;
  const auto differs = [&](const char* section, const std::string& key) {
    const auto& b = baseline.at(section);
    return !b.contains(key) || b.at(key) != run.at(section).at(key);
  };
  for (const auto& [key, value] : run.at("model").items())
    if (key != "arch" && differs("model", key)) out.push_back(change_token(key, value));
  for (const char* key : kNamedTrainKeys)
    if (run.at("train").contains(key) && differs("train", key)) out.push_back(change_token(key, run.at("train").at(key)));
  return out;
}

}  // namespace

std::string default_run_name(const ExperimentConfig& config) {
  const auto arch = config.arch();
  const auto& origin = config.origin;
  const auto overrides = origin_overrides(origin);
  std::string origin_arch = arch;
  if (overrides && overrides->contains("model") && overrides->at("model").is_object() &&
      overrides->at("model").contains("arch") && overrides->at("model").at("arch").is_string())
    origin_arch = overrides->at("model").at("arch").get<std::string>();
  else if (overrides)
    origin_arch = kBaselineArchitecture;

  std::string name = arch;
  if (!origin.empty() && origin_arch == arch) {
    const auto stem = is_config_file(origin) ? fs::path(origin).stem().string() : origin;
    // A preset whose name holds the architecture as a word ("mod-0.7", "quickstart-dtrnet") is named as it is.
    const bool named = stem.rfind(arch + "-", 0) == 0 || stem == arch ||
                       stem.find("-" + arch + "-") != std::string::npos ||
                       (stem.size() > arch.size() && stem.compare(stem.size() - arch.size() - 1, std::string::npos, "-" + arch) == 0);
    name = named ? stem : arch + "-" + stem;
  }
  std::int64_t origin_seed = schema_defaults(run_schema()).at("seed").get<std::int64_t>();
  if (overrides) {
    try {
      auto with_arch = *overrides;
      if (!with_arch.contains("model") || !with_arch.at("model").is_object()) with_arch["model"] = nlohmann::json::object();
      if (origin_arch != arch) {
        // The origin's options that this architecture also has (the shape, shared routing options) carry over.
        nlohmann::json model{{"arch", arch}};
        for (const auto& spec : architecture(arch).options)
          if (with_arch.at("model").contains(spec.key)) model[spec.key] = with_arch.at("model").at(spec.key);
        with_arch["model"] = model;
      }
      const auto baseline = resolve_config(with_arch, {}, origin);
      origin_seed = baseline.run().at("seed").get<std::int64_t>();
      const auto changed = changes(baseline.doc, config.doc);
      for (std::size_t i = 0; i < changed.size() && i < kMaxChanges; ++i) name += "-" + changed[i];
      if (changed.size() > kMaxChanges) name += "+" + std::to_string(changed.size() - kMaxChanges);
    } catch (const Error&) {
      // an origin that no longer resolves (renamed options): the base name alone
    }
  }
  const auto seed = config.run().at("seed").get<std::int64_t>();
  if (seed != origin_seed) name += "-s" + std::to_string(seed);
  return name;
}

}  // namespace routelab
