// Distillation from a stored sequential model (issue 22; Radial Networks' post-training route): the teacher's
// weights copied into a new model of an architecture that declares how (ArchitectureEntry::adopt_teacher), and the
// KL term that trains the student to match the teacher's next-token distribution.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "core/models/language_model.h"

namespace routelab {

/// The teacher of a distilled run, in eval mode, never trained.
struct Teacher {
  std::shared_ptr<LanguageModel> model;
  std::int64_t run_id = 0;
  std::string name, arch;
  double weight = 1.0;         ///< train.distill_weight
  double hidden_weight = 0.0;  ///< train.distill_hidden
};

/// Mean over the counted positions (`mask` 1; all when undefined) of KL(teacher || student), from the two models'
/// logits (B, T, V), in fp32: sum_v p_t(v) (log p_t(v) - log p_s(v)). Zero when the two agree.
torch::Tensor distill_kl(const torch::Tensor& student_logits, const torch::Tensor& teacher_logits,
                         const torch::Tensor& mask);

/// The teacher's layer outputs matched: the mean over the first min(S, L) of the student's per-step (or per-layer)
/// streams h_s and the teacher's per-layer outputs t_s (B, T, C) of ||h_s - t_s||² / ||t_s||² per position, over the
/// counted positions, in fp32. Zero when the student computes the teacher's stack.
torch::Tensor distill_hidden_loss(const std::vector<torch::Tensor>& student, const std::vector<torch::Tensor>& teacher,
                                  const torch::Tensor& mask);

/// Opens run `run_id` of the store as the teacher of a model of `vocab` tokens: ConfigError naming
/// train.distill_from for an unknown run, a classifier, or another vocabulary.
Teacher open_teacher(const std::string& db_path, std::int64_t run_id, std::int64_t vocab, double weight,
                     double hidden_weight = 0.0);

}  // namespace routelab
