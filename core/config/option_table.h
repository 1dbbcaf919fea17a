// An options struct bound to its config section once: each option's key, type, range and help beside an accessor
// of the struct field it sets. The schema's defaults are read from a default-constructed struct, and the same
// table reads a section into the struct and writes the struct back, so a default is stated once (in the struct's
// TORCH_ARG line) and no hand mapper can skip a key. No Torch in this header.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config/options.h"

namespace routelab {

/// An option's key and the accessor of the struct field of the same name, for OptionTable::value and ::choice:
/// ROUTELAB_OPTION(capacity) is "capacity", [](auto& o) -> auto& { return o.capacity(); }.
#define ROUTELAB_OPTION(name) #name, [](auto& o) -> auto& { return o.name(); }

template <class O>
class OptionTable {
 public:
  /// `defaults` builds the struct whose fields are the defaults (for structs with required constructor
  /// arguments, which no option of the table sets).
  explicit OptionTable(std::function<O()> defaults = [] { return O{}; }) : defaults_(std::move(defaults)) {}

  /// An option stored as is: Int, Float, Bool, String or IntList. `field` is a generic accessor of the struct
  /// field, `[](auto& o) -> auto& { return o.capacity(); }` (ROUTELAB_OPTION writes the key and the accessor).
  template <class Field>
  OptionTable& value(std::string key, Field field, OptionType type, std::string help,
                     std::optional<double> min = std::nullopt, std::optional<double> max = std::nullopt) {
    rows_.push_back({{std::move(key), type, {}, std::move(help), min, max, {}},
                     [field](O& o, const nlohmann::json& v) {
                       auto& target = field(o);
                       target = v.get<std::decay_t<decltype(target)>>();
                     },
                     [field](const O& o) { return nlohmann::json(field(o)); }});
    return *this;
  }

  /// A choice option: an enum field whose values `choices` name in declaration order (0, 1, ...), or a string
  /// field holding the name itself.
  template <class Field>
  OptionTable& choice(std::string key, Field field, std::vector<std::string> choices, std::string help) {
    const auto names = choices;
    rows_.push_back({{std::move(key), OptionType::Choice, {}, std::move(help), std::nullopt, std::nullopt,
                      std::move(choices)},
                     [field, names](O& o, const nlohmann::json& v) {
                       auto& target = field(o);
                       using E = std::decay_t<decltype(target)>;
                       const auto name = v.get<std::string>();
                       if constexpr (std::is_same_v<E, std::string>) {
                         target = name;
                       } else {
                         for (std::size_t i = 0; i < names.size(); ++i)
                           if (names[i] == name) target = static_cast<E>(i);
                       }
                     },
                     [field, names](const O& o) {
                       const auto& value = field(o);
                       if constexpr (std::is_same_v<std::decay_t<decltype(value)>, std::string>) {
                         return nlohmann::json(value);
                       } else {
                         const auto index = static_cast<std::size_t>(value);
                         return nlohmann::json(index < names.size() ? names[index] : std::string("?"));
                       }
                     }});
    return *this;
  }

  /// A value option whose section default is a sentinel the struct does not hold: the struct keeps the resolved
  /// value and the section's `sentinel` (say 0: the data's context) stands for it until the reader resolves it.
  template <class Field>
  OptionTable& resolved(std::string key, Field field, OptionType type, nlohmann::json sentinel, std::string help,
                        std::optional<double> min = std::nullopt, std::optional<double> max = std::nullopt) {
    value(std::move(key), field, type, std::move(help), min, max);
    rows_.back().spec.default_value = std::move(sentinel);
    return *this;
  }

  /// Marks the option added last as read in training (or at initialisation) only (OptionSpec::training_only).
  OptionTable& training_only() {
    rows_.back().spec.training_only = true;
    return *this;
  }

  /// Marks the option added last as read only where option `key` of the section takes one of `values`
  /// (OptionSpec::read_when; a second call adds a second condition).
  OptionTable& read_when(std::string key, std::vector<std::string> values) {
    rows_.back().spec.read_when.push_back({std::move(key), std::move(values)});
    return *this;
  }
  /// Marks the option added last as read only where the number `key` of the section is not 0 (a coefficient that
  /// switches a term off at 0).
  OptionTable& read_when_nonzero(std::string key) {
    rows_.back().spec.read_when.push_back({.key = std::move(key), .nonzero = true});
    return *this;
  }

  /// Marks the option added last as one the trained weights are read by (OptionSpec::weight_layout).
  OptionTable& weight_layout() {
    rows_.back().spec.weight_layout = true;
    return *this;
  }

  /// Marks the option added last as one an evaluation may set whose values compute the same result
  /// (OptionSpec::inference and ::same_result).
  OptionTable& same_result() {
    rows_.back().spec.inference = rows_.back().spec.same_result = true;
    return *this;
  }

  /// Marks the option added last as one an evaluation may set (OptionSpec::inference).
  OptionTable& inference() {
    rows_.back().spec.inference = true;
    return *this;
  }

  /// The schema: one spec per option in table order, its default written from the defaults struct (a resolved
  /// option's: its sentinel).
  OptionSchema schema() const {
    const O defaults = defaults_();
    OptionSchema out;
    for (const auto& row : rows_) {
      out.push_back(row.spec);
      if (out.back().default_value.is_null()) out.back().default_value = row.write(defaults);
    }
    return out;
  }

  /// The defaults struct with every option set from a resolved section (every key present; a missing key is
  /// nlohmann's out_of_range).
  O read(const nlohmann::json& section) const { return read(section, defaults_()); }
  /// `start` with every option set from a resolved section.
  O read(const nlohmann::json& section, O start) const {
    for (const auto& row : rows_) row.read(start, section.at(row.spec.key));
    return start;
  }

  /// {key: value} of every option of `o`.
  nlohmann::json write(const O& o) const {
    auto out = nlohmann::json::object();
    for (const auto& row : rows_) out[row.spec.key] = row.write(o);
    return out;
  }

 private:
  struct Row {
    OptionSpec spec;
    std::function<void(O&, const nlohmann::json&)> read;
    std::function<nlohmann::json(const O&)> write;
  };
  std::function<O()> defaults_;
  std::vector<Row> rows_;
};

/// The schemas of `tables` one after another (an architecture's options: the shared ones, then its own).
template <class... Tables>
OptionSchema schema_of(const Tables&... tables) {
  OptionSchema out;
  const auto append = [&out](const OptionSchema& s) { out.insert(out.end(), s.begin(), s.end()); };
  (append(tables.schema()), ...);
  return out;
}

/// The options a section yields, written back: every table reads `section` into its struct and writes it out, the
/// objects merged (what ArchitectureEntry::read_back_options returns).
template <class... Tables>
nlohmann::json read_back(const nlohmann::json& section, const Tables&... tables) {
  auto out = nlohmann::json::object();
  (out.update(tables.write(tables.read(section))), ...);
  return out;
}

}  // namespace routelab
