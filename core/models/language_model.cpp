// Shared behaviour of every language model: parameter counting and the weight-decay rule.
#include "core/models/language_model.h"

#include <sstream>

#include "core/inference/kv_cache.h"
#include "core/util/errors.h"

namespace routelab {

bool LanguageModel::decays(const std::string& name, const torch::Tensor& parameter) const {
  const bool is_embedding = name.find("emb") != std::string::npos;
  return parameter.dim() >= 2 && !is_embedding;
}

std::int64_t LanguageModel::parameter_count() const {
  std::int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

std::unique_ptr<DecodeState> LanguageModel::begin_decode(std::int64_t /*batch*/) {
  throw ConfigError("architecture '" + arch_id() + "' has no incremental decoding (KV-cache generation)");
}

torch::Tensor LanguageModel::decode(DecodeState& /*state*/, const torch::Tensor& /*tokens*/, DecodeTrace* /*trace*/) {
  throw ConfigError("architecture '" + arch_id() + "' has no incremental decoding (KV-cache generation)");
}

std::string LanguageModel::describe() const {
  std::ostringstream out;
  out << arch_id() << ", " << num_layers() << " layers, " << parameter_count() / 1.0e6 << "M parameters";
  return out.str();
}

}  // namespace routelab
