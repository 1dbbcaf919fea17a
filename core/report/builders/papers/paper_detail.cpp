// The helpers the seeds' figure files share (core/report/builders/papers/paper_detail.h): reading runs, evaluations and
// probes, colours and labels, and the data shape a stored config was trained with.
#include "core/report/builders/papers/paper_detail.h"

#include <algorithm>

#include "core/data/dataset.h"
#include "core/data/tokenizer.h"
#include "core/util/errors.h"

namespace routelab::figure_detail {

std::string prefixed(const char* prefix, std::int64_t i) { return std::string(prefix).append(std::to_string(i)); }

std::vector<std::string> token_labels(const std::vector<std::string>& tokens) {
  std::vector<std::string> out;
  for (std::string s : tokens) {
    if (s == " ") s = "\u2423";
    else if (s == "\n") s = "\u21b5";
    out.push_back(s);
  }
  return out;
}

std::vector<std::string> token_labels(const json& tokens) {
  std::vector<std::string> texts;
  if (tokens.is_array())
    for (const auto& t : tokens) texts.push_back(t.is_string() ? t.get<std::string>() : t.dump());
  return token_labels(texts);
}

DataShape data_shape_of(const RunStore& store, const RunRecord& run, const json& config) {
  const auto& data = config.at("data");
  const auto source = data.value("source", std::string());
  const bool corpus = source == "kjv" || source == "file" || source == "shards";  // windows of data.context tokens
  if (const auto stored = store.run_tokenizer(run.id); corpus && !stored.empty()) {
    const auto where = store.path() + ": run " + std::to_string(run.id);
    const auto document = parse_stored_tokenizer(stored, where);  // its own errors name the store and run
    try {
      return {Tokenizer::from_json(document)->vocab_size(), data.at("context").get<std::int64_t>()};
    } catch (const DataError& e) {
      throw DataError(where + ": " + e.what());
    }
  }
  const auto dataset = make_dataset(data);
  return {dataset->tokenizer().vocab_size(), dataset->context()};
}

Figure start(const FigureRequest& request, const std::string& title) {
  Figure f;
  f.name = request.name;
  f.title = title;
  f.meta["runs"] = request.run_ids;
  return f;
}

}  // namespace routelab::figure_detail
