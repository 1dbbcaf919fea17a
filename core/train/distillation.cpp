// The distillation loss and the teacher's opening.
#include "core/train/distillation.h"

#include <algorithm>

#include "core/analysis/run_analysis.h"
#include "core/models/registry.h"
#include "core/util/errors.h"

namespace routelab {

torch::Tensor distill_kl(const torch::Tensor& student_logits, const torch::Tensor& teacher_logits,
                         const torch::Tensor& mask) {
  const auto log_s = torch::log_softmax(student_logits.to(torch::kFloat), -1);   // (B, T, V)
  const auto log_t = torch::log_softmax(teacher_logits.to(torch::kFloat), -1);   // (B, T, V)
  const auto per_position = (log_t.exp() * (log_t - log_s)).sum(-1);             // (B, T)
  if (!mask.defined()) return per_position.mean();
  const auto m = mask.to(torch::kFloat);
  return (per_position * m).sum() / m.sum().clamp_min(1.0);
}

torch::Tensor distill_hidden_loss(const std::vector<torch::Tensor>& student, const std::vector<torch::Tensor>& teacher,
                                  const torch::Tensor& mask) {
  const auto n = std::min(student.size(), teacher.size());
  if (n == 0) throw ConfigError("train.distill_hidden: the student or the teacher recorded no layer outputs");
  torch::Tensor total;
  for (std::size_t s = 0; s < n; ++s) {
    const auto t = teacher[s].to(torch::kFloat);
    const auto per_position =
        (student[s].to(torch::kFloat) - t).pow(2).sum(-1) / t.pow(2).sum(-1).clamp_min(1e-12);  // (B, T)
    const auto term = mask.defined() ? (per_position * mask.to(torch::kFloat)).sum() / mask.sum().clamp_min(1.0)
                                     : per_position.mean();
    total = total.defined() ? total + term : term;
  }
  return total / static_cast<double>(n);
}

Teacher open_teacher(const std::string& db_path, std::int64_t run_id, std::int64_t vocab, double weight,
                     double hidden_weight) {
  const auto where = "train.distill_from: run " + std::to_string(run_id);
  LoadedRun run;
  try {
    run = load_run(db_path, run_id, {}, 0, RunData::Tokenizer);
  } catch (const Error& e) {
    throw ConfigError(where + " cannot be opened as a teacher: " + e.what());
  }
  const auto teacher_vocab = run.tokenizer().vocab_size();
  if (teacher_vocab != vocab)
    throw ConfigError(where + " (" + run.name + ") has a vocabulary of " + std::to_string(teacher_vocab) +
                      " tokens, this run " + std::to_string(vocab) + ": give it the teacher's data and tokenizer");
  Teacher teacher;
  teacher.model = run.model;
  teacher.model->eval();
  for (auto& p : teacher.model->parameters()) p.set_requires_grad(false);
  teacher.run_id = run_id;
  teacher.name = run.name;
  teacher.arch = run.config.arch();
  teacher.weight = weight;
  teacher.hidden_weight = hidden_weight;
  return teacher;
}

}  // namespace routelab
