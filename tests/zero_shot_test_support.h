// What the zero-shot suites share: task files written into a temporary folder, a small dense model over a
// character vocabulary, and a log-likelihood read straight off one forward.
#pragma once
#include <QTemporaryDir>
#include <algorithm>
#include <fstream>
#include <memory>
#include <string>
#include <utility>

#include "core/data/tokenizer.h"
#include "core/models/language_model.h"
#include "core/models/registry.h"
#include "tests/conformance_support.h"

namespace routelab::test::zero_shot {

inline std::string write(const QTemporaryDir& dir, const std::string& name, const std::string& text) {
  const auto path = dir.filePath(QString::fromStdString(name)).toStdString();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

inline const std::string kAlphabet = "abcdefghijklmnopqrst .";  // 22 characters: vocabulary 23 with the unknown id

/// The log-likelihood of the last `scored` of `ids`, each predicted from the ids before it (the last max_length of
/// them at most), read straight off one forward; and whether each was the most likely token.
inline std::pair<double, bool> direct_ids_score(LanguageModel& model, const std::vector<std::int64_t>& ids,
                                                std::int64_t scored, std::int64_t max_length) {
  const auto n = std::min<std::int64_t>(static_cast<std::int64_t>(ids.size()) - 1, max_length);
  const auto all = torch::tensor(ids, torch::kLong);
  const auto input = all.narrow(0, all.size(0) - 1 - n, n).unsqueeze(0);
  const auto target = all.narrow(0, all.size(0) - n, n);
  torch::NoGradGuard no_grad;
  model.eval();
  const auto logp = torch::log_softmax(model.forward(input).logits[0].to(torch::kDouble), -1);  // (n, V)
  double ll = 0;
  bool greedy = true;
  for (auto t = n - std::min(scored, n); t < n; ++t) {
    ll += logp[t][target[t].item<std::int64_t>()].item<double>();
    greedy = greedy && logp[t].argmax().item<std::int64_t>() == target[t].item<std::int64_t>();
  }
  return {ll, greedy};
}

/// The log-likelihood of `continuation` after `context` read straight off one forward of the whole text.
inline std::pair<double, bool> direct_score(LanguageModel& model, const Tokenizer& tokenizer,
                                            const std::string& context, const std::string& continuation,
                                            std::int64_t max_length) {
  const auto ids = tokenizer.encode(context + continuation);
  const auto scored = static_cast<std::int64_t>(ids.size() - tokenizer.encode(context).size());
  return direct_ids_score(model, ids, scored, max_length);
}

inline std::shared_ptr<LanguageModel> small_dense(std::int64_t vocab) {
  torch::manual_seed(3);
  auto section = conformance::small_model(architecture("dense"));
  section["max_seq_len"] = 64;
  return create_model(section, {vocab, 64});
}

}  // namespace routelab::test::zero_shot
