// Lenient reads of stored JSON records (evaluation layers, run documents, preset listings, shard manifests): a missing
// key or a value of another type gives the caller's fallback instead of throwing, so an old or hand-edited record
// never stops a figure.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace routelab {

/// `object[key]` when it is a number, else `fallback`.
inline double json_number(const nlohmann::json& object, const char* key, double fallback) {
  if (!object.is_object() || !object.contains(key) || !object.at(key).is_number()) return fallback;
  return object.at(key).get<double>();
}

/// `object[key]` when it is a string, else `fallback`.
inline std::string json_text(const nlohmann::json& object, const char* key, const std::string& fallback) {
  if (!object.is_object() || !object.contains(key) || !object.at(key).is_string()) return fallback;
  return object.at(key).get<std::string>();
}

/// `object[key]` when it is a boolean, else `fallback`.
inline bool json_flag(const nlohmann::json& object, const char* key, bool fallback) {
  if (!object.is_object() || !object.contains(key) || !object.at(key).is_boolean()) return fallback;
  return object.at(key).get<bool>();
}

}  // namespace routelab
