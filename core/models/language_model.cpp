// Shared behaviour of every language model: parameter counting and the weight-decay rule.
#include "core/models/language_model.h"

#include <sstream>

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

std::string LanguageModel::describe() const {
  std::ostringstream out;
  out << arch_id() << ", " << num_layers() << " layers, " << parameter_count() / 1.0e6 << "M parameters";
  return out.str();
}

}  // namespace routelab
