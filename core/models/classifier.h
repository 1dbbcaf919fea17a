// The interface the trainer talks to for sequence classification (TAGAT: sentence-pair entailment), parallel
// to LanguageModel: class logits, the auxiliary (routing) loss, the per-layer routing trace and per-token data.
#pragma once
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/models/language_model.h"

namespace routelab {

struct ClassifierOutput {
  torch::Tensor logits;           ///< (B, num_classes)
  torch::Tensor aux_loss;         ///< scalar, already multiplied by its coefficient(s); 0 for unrouted models
  std::vector<LayerTrace> trace;  ///< one entry per layer when tracing was asked for (stats: entropy, loads)
  /// Model-level statistics when tracing was asked for (e.g. TAGAT's {"entropy", "load_imbalance",
  /// "load/L0/E1"}): the trainer stores them as train/<key> and val/<key>.
  std::map<std::string, double> stats;
  /// Per-token data when tracing was asked for: (B, T, ...) tensors by name, e.g. TAGAT's {"gate": (B, T, L, N)
  /// renormalised top-k gate probabilities (0 for unselected experts), "expert": (B, T, L, k) chosen ids}. The
  /// trainer's probe records example 0 of each.
  std::map<std::string, torch::Tensor> token_data;
};

class SequenceClassifier : public torch::nn::Module {
 public:
  /// input (B, T) int64 token ids, [CLS] at position 0; mask (B, T) bool, true for real tokens (padding keys and
  /// pooling are masked); segment (B, T) int64 (0 first sentence, 1 second; may be undefined). With `trace` the
  /// routing trace, stats and token data are filled.
  virtual ClassifierOutput forward(const torch::Tensor& input, const torch::Tensor& mask, const torch::Tensor& segment,
                                   bool trace = false) = 0;
  virtual std::string arch_id() const = 0;
  virtual std::int64_t num_layers() const = 0;
  virtual std::int64_t num_classes() const = 0;
  /// Whether AdamW weight decay applies to the named parameter: matrices of linear layers only (as LanguageModel).
  virtual bool decays(const std::string& name, const torch::Tensor& parameter) const {
    return parameter.dim() >= 2 && name.find("emb") == std::string::npos;
  }
  /// A short description with the parameter count.
  virtual std::string describe() const {
    std::ostringstream out;
    out << arch_id() << ", " << num_layers() << " layers, " << num_classes() << " classes, "
        << parameter_count() / 1.0e6 << "M parameters";
    return out.str();
  }
  std::int64_t parameter_count() const {
    std::int64_t n = 0;
    for (const auto& p : parameters()) n += p.numel();
    return n;
  }
};

}  // namespace routelab
