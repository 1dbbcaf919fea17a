// The run model's JSON reader (core/run/ only): typed reads of one object's keys whose errors name where the
// document came from and the key path, so every stored document is parsed under one error policy.
#pragma once
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/util/errors.h"

namespace routelab {
enum class Task;
}

namespace routelab::run_detail {

using nlohmann::json;

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// Reads keys of one object, naming "<where>: path.key" in its errors ("evaluation at step 200: layers[1].kind").
class Reader {
 public:
  Reader(const json& doc, std::string where, std::string path)
      : doc_(doc), where_(std::move(where)), path_(std::move(path)) {}

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
  /// An array of numbers (null reads as NaN, true/false as 1/0 when `flags`); empty when absent.
  std::vector<double> numbers_array(const std::string& key, bool flags = false) const {
    std::vector<double> out;
    const json* a = array(key);
    for (std::size_t i = 0; a && i < a->size(); ++i) {
      const json& v = a->at(i);
      if (v.is_null()) out.push_back(kNaN);
      else if (v.is_number()) out.push_back(v.get<double>());
      else if (flags && v.is_boolean()) out.push_back(v.get<bool>() ? 1.0 : 0.0);
      else fail(key + "[" + std::to_string(i) + "]", "expected a number, found " + std::string(v.type_name()));
    }
    return out;
  }
  /// An array of strings; empty when absent.
  std::vector<std::string> strings_array(const std::string& key) const {
    std::vector<std::string> out;
    const json* a = array(key);
    for (std::size_t i = 0; a && i < a->size(); ++i) {
      if (!a->at(i).is_string()) fail(key + "[" + std::to_string(i) + "]", "expected a string");
      out.push_back(a->at(i).get<std::string>());
    }
    return out;
  }
  /// The members of an object, each as a reader; empty when absent.
  std::vector<std::pair<std::string, const json*>> members(const std::string& key) const {
    std::vector<std::pair<std::string, const json*>> out;
    if (const auto o = object(key))
      for (const auto& [name, value] : find(key)->items()) out.emplace_back(name, &value);
    return out;
  }
  const std::string& where() const { return where_; }
  const std::string& path() const { return path_; }

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

/// The document's "task" ("lm" or "classification"), none when absent; another word fails naming the key.
/// Defined with the Task enum (evaluation_record.cpp).
std::optional<Task> read_task(const Reader& in);

/// Reads each stored row with `read`. An unreadable row is a DataError naming the store and run, or, where
/// `unreadable` is given, skipped with that message appended.
template <class Rows, class Read>
auto read_rows(const Rows& rows, Read read, const std::string& store_path, std::int64_t run_id,
               std::vector<std::string>* unreadable) {
  std::vector<decltype(read(rows.front()))> out;
  for (const auto& row : rows) {
    try {
      out.push_back(read(row));
    } catch (const DataError& e) {
      const std::string message = store_path + ": run " + std::to_string(run_id) + ": " + e.what();
      if (!unreadable) throw DataError(message);
      unreadable->push_back(message);
    }
  }
  return out;
}

}  // namespace routelab::run_detail
