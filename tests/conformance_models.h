// The conformance suite's models built from one option's values: an eval-mode model of either task with its logits on
// fixed inputs, the same with one option changed, the weights copied from one to the other, a section where an
// option's read condition fails, and an option's other valid values (tests/test_conformance.cpp).
#pragma once
#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/config/options.h"
#include "core/models/classifier.h"
#include "core/models/language_model.h"
#include "core/models/registry.h"
#include "core/util/errors.h"
#include "tests/conformance_support.h"

namespace routelab::test::conformance {

/// A small eval-mode model of either task built from `section`, with its eval forward's logits on fixed inputs
/// (a language model's routed share forced to one half where its entry can and `force_share` asks).
struct EvalModel {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor()> logits;
};

inline EvalModel eval_model(const ArchitectureEntry& entry, const nlohmann::json& section, bool force_share) {
  torch::manual_seed(11);
  const auto tokens = torch::randint(0, kVocab, {2, 24}, torch::kLong);
  if (entry.task == Task::Classification) {
    auto classifier = create_classifier(section, {kVocab, 32, 3});
    classifier->eval();
    const auto mask = torch::ones_like(tokens, torch::kBool);
    return {classifier, [=] { return classifier->forward(tokens, mask, torch::Tensor()).logits; }};
  }
  auto lm = create_model(section, {kVocab, 32});
  lm->eval();
  if (force_share && entry.force_routed_share) entry.force_routed_share(*lm, tokens, 0.5);
  return {lm, [=] { return lm->forward(tokens).logits; }};
}

/// The model of `base` with `key` set to `value`; none where the architecture's cross-field check refuses the value
/// (MoD's capacity 0 cannot be set at all).
inline std::optional<EvalModel> eval_model_with(const ArchitectureEntry& entry, nlohmann::json base, const std::string& key,
                                         const nlohmann::json& value) {
  base[key] = value;
  try {
    if (entry.check) entry.check(base, "model");
  } catch (const ConfigError&) {
    return std::nullopt;
  }
  return eval_model(entry, base, /*force_share=*/false);
}

/// Copies every parameter and buffer of `from` into `to` where both hold the same names with the same shapes (the
/// same checkpoint loads into either); false, with a warning naming the tensor, where they differ.
inline bool copy_same_tensors(torch::nn::Module& from, torch::nn::Module& to, const std::string& what) {
  torch::NoGradGuard no_grad;
  for (auto [mine, theirs] : {std::pair{to.named_parameters(), from.named_parameters()},
                              std::pair{to.named_buffers(), from.named_buffers()}}) {
    if (mine.size() != theirs.size()) {
      qWarning("%s: other tensors", what.c_str());
      return false;
    }
    for (auto& item : mine) {
      const auto* same = theirs.find(item.key());
      if (!same || same->sizes() != item.value().sizes()) {
        qWarning("%s: %s differs", what.c_str(), item.key().c_str());
        return false;
      }
      item.value().copy_(*same);
    }
  }
  return true;
}

/// A model of either task built from `section` (holding the tensors of `from` where given): its eval logits, and the
/// logits and auxiliary loss of a training forward from a fixed seed, on fixed inputs. `same` is false where the
/// tensors differ from `from`'s.
struct SeededForwards {
  std::shared_ptr<torch::nn::Module> module;
  torch::Tensor eval, train, aux;
  bool same = true;
};

inline SeededForwards seeded_forwards(const ArchitectureEntry& entry, const nlohmann::json& section,
                                      torch::nn::Module* from, const std::string& what) {
  SeededForwards f;
  torch::manual_seed(11);
  const auto tokens = torch::randint(0, kVocab, {2, 24}, torch::kLong);
  std::function<std::pair<torch::Tensor, torch::Tensor>()> forward;  // -> logits, aux loss
  if (entry.task == Task::Classification) {
    auto classifier = create_classifier(section, {kVocab, 32, 3});
    const auto mask = torch::ones_like(tokens, torch::kBool);
    forward = [=] {
      auto out = classifier->forward(tokens, mask, torch::Tensor());
      return std::pair{out.logits, out.aux_loss};
    };
    f.module = classifier;
  } else {
    auto lm = create_model(section, {kVocab, 32});
    forward = [=] {
      auto out = lm->forward(tokens);
      return std::pair{out.logits, out.aux_loss};
    };
    f.module = lm;
  }
  if (from) f.same = copy_same_tensors(*from, *f.module, what);
  torch::NoGradGuard no_grad;
  f.module->eval();
  f.eval = forward().first;
  f.module->train();
  torch::manual_seed(3);
  std::tie(f.train, f.aux) = forward();
  if (!f.aux.defined()) f.aux = torch::zeros({});
  return f;
}

/// `section` with `condition`'s option (`on`) where the condition fails and the architecture accepts it: at 0, or at
/// the first choice outside the values it holds for; none where no such value is accepted.
inline std::optional<nlohmann::json> section_failing(const ArchitectureEntry& entry, nlohmann::json section,
                                                     const OptionCondition& condition, const OptionSpec& on) {
  std::vector<nlohmann::json> failing;
  if (condition.nonzero) failing.push_back(on.type == OptionType::Int ? nlohmann::json(0) : nlohmann::json(0.0));
  for (const auto& choice : on.choices)
    if (!condition.nonzero &&
        std::find(condition.values.begin(), condition.values.end(), choice) == condition.values.end())
      failing.emplace_back(choice);
  for (const auto& value : failing) {
    section[condition.key] = value;
    try {
      if (entry.check) entry.check(section, "model");
      return section;
    } catch (const ConfigError&) {
    }
  }
  return std::nullopt;
}

/// Valid values of an option other than its default: every other choice, the other truth value, the bounds of a
/// number (or its default moved by one), a longer string, a short list.
inline std::vector<nlohmann::json> other_values(const OptionSpec& spec) {
  std::vector<nlohmann::json> out;
  const auto& d = spec.default_value;
  const auto number = [&](double v) {
    return spec.type == OptionType::Int ? nlohmann::json(static_cast<std::int64_t>(v)) : nlohmann::json(v);
  };
  switch (spec.type) {
    case OptionType::Choice:
      for (const auto& c : spec.choices)
        if (c != d.get<std::string>()) out.emplace_back(c);
      break;
    case OptionType::Bool:
      out.emplace_back(!d.get<bool>());
      break;
    case OptionType::Int:
    case OptionType::Float:
      for (const auto& bound : {spec.min, spec.max})
        if (bound && number(*bound) != d) out.push_back(number(*bound));
      if (out.empty()) out.push_back(number(d.get<double>() + 1));
      break;
    case OptionType::String:
      out.emplace_back(d.get<std::string>() + "-other");
      break;
    case OptionType::IntList:
      out.push_back(nlohmann::json::array({1, 2}));
      break;
  }
  return out;
}

}  // namespace routelab::test::conformance
