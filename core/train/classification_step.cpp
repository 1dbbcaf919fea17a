// Classification training step, epoch schedule, whole-split evaluation (accuracy, macro-F1) and probe.
#include "core/train/classification_step.h"

#include <algorithm>
#include <cmath>

#include "core/dist/grad_sync.h"
#include "core/models/blocks/part_scope.h"
#include "core/models/language_model.h"
#include "core/train/step.h"
#include "core/train/token_probe.h"
#include "core/util/device.h"
#include "core/util/errors.h"
#include "core/util/interrupt.h"

namespace routelab {

ClassBatch to_device(ClassBatch b, const torch::Device& device) {
  if (device.is_cpu()) return b;
  b.input = copy_to_device(b.input, device);
  b.mask = copy_to_device(b.mask, device);
  b.segment = copy_to_device(b.segment, device);
  b.label = copy_to_device(b.label, device);
  return b;
}

ClassBatch trim_padding(ClassBatch b) {
  const auto used = b.mask.any(0).nonzero();  // positions that hold a real token in some example
  if (used.numel() == 0) return b;
  const auto length = used.max().item<std::int64_t>() + 1;
  if (length >= b.input.size(1)) return b;
  b.input = b.input.narrow(1, 0, length).contiguous();
  b.mask = b.mask.narrow(1, 0, length).contiguous();
  if (b.segment.defined()) b.segment = b.segment.narrow(1, 0, length).contiguous();
  return b;
}

torch::Tensor classification_loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  return torch::nn::functional::cross_entropy(logits.to(torch::kFloat), labels);
}

EpochSchedule::EpochSchedule(std::int64_t examples, std::int64_t batch_size, std::uint64_t seed)
    : examples_(examples), batch_size_(batch_size), seed_(seed) {
  if (examples <= 0) throw DataError("classification data: the training split is empty");
  steps_per_epoch_ = (examples + batch_size - 1) / batch_size;
}

std::int64_t EpochSchedule::batch_size_at(std::int64_t step) const {
  const auto within = (step - 1) % steps_per_epoch_;
  return std::min(batch_size_, examples_ - within * batch_size_);
}

std::vector<std::int64_t> EpochSchedule::indices(std::int64_t step) {
  const auto epoch = epoch_of(step);
  if (epoch != cached_epoch_) {
    order_ = epoch_order(examples_, mix_seed(seed_, kTrainStream, static_cast<std::uint64_t>(epoch)));
    cached_epoch_ = epoch;
  }
  const auto begin = ((step - 1) % steps_per_epoch_) * batch_size_;
  return {order_.begin() + begin, order_.begin() + begin + batch_size_at(step)};
}

ClassBatch class_batch_rows(const ClassBatch& b, std::int64_t start, std::int64_t rows) {
  return {b.input.narrow(0, start, rows), b.mask.narrow(0, start, rows),
          b.segment.defined() ? b.segment.narrow(0, start, rows) : torch::Tensor(), b.label.narrow(0, start, rows)};
}

ClassifierOutput merge_classifier_micro_batches(std::vector<ClassifierOutput> parts, std::vector<double> weights) {
  if (parts.size() == 1) return std::move(parts.front());
  std::vector<ModelOutput> outputs(parts.size());  // the language models' merge, on the fields both outputs have
  for (std::size_t i = 0; i < parts.size(); ++i) {
    outputs[i].aux_loss = parts[i].aux_loss;
    outputs[i].trace = std::move(parts[i].trace);
    outputs[i].stats = std::move(parts[i].stats);
    outputs[i].token_data = std::move(parts[i].token_data);
  }
  auto merged = merge_micro_batches(std::move(outputs), std::move(weights));
  ClassifierOutput out;
  out.aux_loss = merged.aux_loss;
  out.trace = std::move(merged.trace);
  out.stats = std::move(merged.stats);
  out.token_data = std::move(merged.token_data);
  return out;
}

ClassStepResult classification_train_step(SequenceClassifier& model, torch::optim::Optimizer& optimizer,
                                          const ClassBatch& batch, double grad_clip, bool bf16, bool trace,
                                          std::int64_t micro_batches, const StepShare* share) {
  if (micro_batches < 1)
    throw ConfigError("train.grad_accum: " + std::to_string(micro_batches) + " micro-batches (at least 1)");
  const auto rows = batch.label.size(0);
  // An epoch's last step may hold fewer examples than the others: its micro-batches are as even as they can be (and
  // no more than its examples), and each one's losses weigh by its share of the step's examples (over every rank).
  const auto parts = std::max<std::int64_t>(1, std::min(micro_batches, rows));
  const bool stand_in = share && share->stand_in;
  const auto step_rows = static_cast<double>(share ? share->global_rows : rows);
  const auto add = [](torch::Tensor& sum, const torch::Tensor& t) { sum = sum.defined() ? sum + t : t; };
  ClassStepResult result;
  result.examples = stand_in ? 0 : rows;
  zero_grads(model);
  std::vector<ClassifierOutput> outputs;
  // The merge's weights: a traced step's real tokens (its statistics are means over them, as an evaluation's are),
  // else examples (nothing to average).
  std::vector<double> weights;
  torch::Tensor correct, loss, aux;
  for (std::int64_t i = 0, start = 0; i < parts; ++i) {
    const auto size = rows / parts + (i < rows % parts ? 1 : 0);
    const auto micro = class_batch_rows(batch, start, size);
    start += size;
    const double weight = stand_in ? 0.0 : static_cast<double>(size) / step_rows;
    // One part of a one-process step is the step's own mean.
    const auto weigh = [&](const torch::Tensor& t) { return parts > 1 || share ? t * weight : t; };
    ClassifierOutput output;
    torch::Tensor ce, total;
    {
      AutocastGuard autocast(bf16, micro.input.device());
      output = model.forward(micro.input, micro.mask, micro.segment, trace);
      ROUTELAB_PART("loss");
      ce = classification_loss(output.logits, micro.label);
      total = ce + output.aux_loss.to(torch::kFloat);
    }
    if (!stand_in) add(correct, output.logits.argmax(-1).eq(micro.label).sum());
    output.logits = torch::Tensor();
    add(loss, weigh(ce.detach()));
    add(aux, weigh(output.aux_loss.detach().to(torch::kFloat)));
    if (share && share->sync && i + 1 == parts) share->sync->arm();  // the last pass sends the gradients
    weigh(total).backward();
    outputs.push_back(std::move(output));
    weights.push_back(trace ? micro.mask.sum().item<double>() : static_cast<double>(size));
    if (trace && !stand_in) result.real_tokens += weights.back();
  }
  if (share && share->sync) share->sync->finish();
  result.output = merge_classifier_micro_batches(std::move(outputs), std::move(weights));
  result.correct = correct.defined() ? correct.item<std::int64_t>() : 0;
  result.grad_norm = clip_and_step(model, optimizer, grad_clip);
  result.loss = loss;
  result.aux_loss = aux;
  return result;
}

ClassificationScores classification_scores(const std::vector<std::int64_t>& labels,
                                           const std::vector<std::int64_t>& predicted, std::int64_t num_classes) {
  ClassificationScores s;
  const auto C = static_cast<std::size_t>(num_classes);
  std::vector<double> tp(C, 0), labelled(C, 0), chosen(C, 0);
  std::int64_t correct = 0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const auto y = static_cast<std::size_t>(labels[i]), p = static_cast<std::size_t>(predicted[i]);
    labelled[y] += 1;
    chosen[p] += 1;
    if (y == p) tp[y] += 1, ++correct;
  }
  s.accuracy = labels.empty() ? 0.0 : static_cast<double>(correct) / static_cast<double>(labels.size());
  s.f1.assign(C, 0.0);
  double sum = 0;
  int present = 0;
  for (std::size_t c = 0; c < C; ++c) {
    if (labelled[c] + chosen[c] == 0) continue;
    s.f1[c] = 2 * tp[c] / (labelled[c] + chosen[c]);  // F1 = 2TP / (2TP + FP + FN)
    sum += s.f1[c];
    ++present;
  }
  s.macro_f1 = present ? sum / present : 0.0;
  return s;
}

std::map<std::string, double> routing_change(const torch::Tensor& previous, const torch::Tensor& current) {
  std::map<std::string, double> stats;
  if (!previous.defined() || !current.defined() || previous.sizes() != current.sizes()) return stats;
  const auto real = current.select(-1, 0).ge(0);                                                  // (n, T, L)
  const auto share = [&](const torch::Tensor& changed, const std::string& key) {                  // (n, T, L)
    const auto per_layer = changed.logical_and(real).sum(std::vector<std::int64_t>{0, 1}).to(torch::kDouble) /
                           real.sum(std::vector<std::int64_t>{0, 1}).clamp_min(1).to(torch::kDouble);  // (L)
    for (std::int64_t l = 0; l < per_layer.size(0); ++l)
      stats[key + "/L" + std::to_string(l)] = per_layer[l].item<double>();
    stats[key] = per_layer.mean().item<double>();
  };
  share(previous.select(-1, 0).ne(current.select(-1, 0)), "routing_change");
  share(std::get<0>(previous.sort(-1)).ne(std::get<0>(current.sort(-1))).any(-1), "routing_change_set");
  return stats;
}

ClassEvalSums evaluate_classifier_sums(SequenceClassifier& model, const ClassificationDataset& data, Split split,
                                       std::int64_t batch_size, const torch::Device& device, bool bf16,
                                       std::int64_t shard, std::int64_t shards) {
  torch::NoGradGuard no_grad;
  const EvalMode eval_mode(model);
  ClassEvalSums sums;
  const auto n = sums.examples = data.size(split);
  for (std::int64_t begin = shard * batch_size; begin < n; begin += shards * batch_size) {
    interruption_point();
    std::vector<std::int64_t> indices(static_cast<std::size_t>(std::min(batch_size, n - begin)));
    for (std::size_t i = 0; i < indices.size(); ++i) indices[i] = begin + static_cast<std::int64_t>(i);
    const auto batch = to_device(trim_padding(data.batch(split, indices)), device);
    AutocastGuard autocast(bf16, device);
    const auto out = model.forward(batch.input, batch.mask, batch.segment, /*trace=*/true);
    const auto b = static_cast<double>(indices.size());
    sums.loss += classification_loss(out.logits, batch.label).item<double>() * b;
    const auto pred = out.logits.argmax(-1).to(torch::kCPU, torch::kLong).contiguous();
    const auto lab = batch.label.to(torch::kCPU, torch::kLong).contiguous();
    sums.predicted.insert(sums.predicted.end(), pred.data_ptr<std::int64_t>(),
                          pred.data_ptr<std::int64_t>() + pred.numel());
    sums.labels.insert(sums.labels.end(), lab.data_ptr<std::int64_t>(), lab.data_ptr<std::int64_t>() + lab.numel());
    sums.routing.add(out.trace);
    if (const auto it = out.token_data.find("expert"); it != out.token_data.end()) {
      const auto chosen = it->second.to(torch::kCPU, torch::kShort);  // (b, T, L, k), highest gate first
      if (!sums.assignments.defined())
        sums.assignments =
            torch::full({n, data.max_length(), chosen.size(2), chosen.size(3)}, -1, chosen.options());
      const auto real = batch.mask.to(torch::kCPU).view({-1, chosen.size(1), 1, 1});
      sums.assignments.narrow(0, begin, chosen.size(0))
          .narrow(1, 0, chosen.size(1))
          .copy_(chosen.masked_fill(real.logical_not(), -1));
    }
    const double tokens = batch.mask.sum().item<double>();
    for (const auto& [key, value] : out.stats) sums.stats[key] += value * tokens;
    sums.tokens += tokens;
  }
  return sums;
}

ClassEvalPass finish_classifier_eval(const ClassEvalSums& sums, std::int64_t num_classes,
                                     const torch::Tensor& previous) {
  ClassEvalPass pass;
  pass.examples = sums.examples;
  pass.loss = sums.examples > 0 ? sums.loss / static_cast<double>(sums.examples) : 0.0;
  pass.routing = sums.routing;
  pass.assignments = sums.assignments;
  for (const auto& [key, value] : sums.stats) pass.stats[key] = value / std::max(1.0, sums.tokens);
  pass.scores = classification_scores(sums.labels, sums.predicted, num_classes);
  for (const auto& [key, value] : routing_change(previous, pass.assignments)) pass.stats[key] = value;
  return pass;
}

ClassEvalPass evaluate_classifier(SequenceClassifier& model, const ClassificationDataset& data, Split split,
                                  std::int64_t batch_size, const torch::Device& device, bool bf16,
                                  const torch::Tensor& previous) {
  return finish_classifier_eval(evaluate_classifier_sums(model, data, split, batch_size, device, bf16),
                                data.num_classes(), previous);
}

void ClassEvalSums::merge(const ClassEvalSums& other) {
  loss += other.loss;
  tokens += other.tokens;
  for (const auto& [key, value] : other.stats) stats[key] += value;
  labels.insert(labels.end(), other.labels.begin(), other.labels.end());
  predicted.insert(predicted.end(), other.predicted.begin(), other.predicted.end());
  routing.merge(other.routing);
}

nlohmann::json ClassEvalSums::to_json() const {
  nlohmann::json j{{"examples", examples}, {"loss", loss},           {"tokens", tokens},
                   {"stats", stats},       {"labels", labels},       {"predicted", predicted},
                   {"routing", routing.to_json()}};
  if (assignments.defined()) j["assignments_shape"] = assignments.sizes().vec();
  return j;
}

ClassEvalSums ClassEvalSums::from_json(const nlohmann::json& j) {
  ClassEvalSums sums;
  sums.examples = j.at("examples").get<std::int64_t>();
  sums.loss = j.at("loss").get<double>();
  sums.tokens = j.at("tokens").get<double>();
  sums.stats = j.at("stats").get<std::map<std::string, double>>();
  sums.labels = j.at("labels").get<std::vector<std::int64_t>>();
  sums.predicted = j.at("predicted").get<std::vector<std::int64_t>>();
  sums.routing = InferenceRouting::from_json(j.at("routing"));
  return sums;
}

std::string classification_probe_json(SequenceClassifier& model, const ClassificationDataset& data,
                                      const torch::Device& device) {
  if (data.size(Split::Val) == 0) return "{}";
  const auto index = std::clamp<std::int64_t>(data.probe_index(), 0, data.size(Split::Val) - 1);
  const auto batch = to_device(data.batch(Split::Val, {index}), device);
  // The token inspector's code path, plus which example this is and its gold label.
  auto doc = trace_pair(model, batch, data.tokens_text(Split::Val, index), data.label_names()).to_json();
  const auto label = batch.label[0].item<std::int64_t>();
  doc["index"] = index;
  doc["label"] = label;
  doc["label_name"] = data.label_names().at(static_cast<std::size_t>(label));
  return doc.dump();
}

void EpochTally::add(double loss, std::int64_t correct, std::int64_t examples) {
  loss_sum_ += loss * static_cast<double>(examples);
  correct_ += correct;
  examples_ += examples;
}

void EpochTally::restore(const std::vector<std::pair<std::int64_t, double>>& losses,
                         const std::vector<std::pair<std::int64_t, double>>& accuracies,
                         const EpochSchedule& schedule, std::int64_t step) {
  clear();
  if (step == 0 || schedule.ends_epoch(step)) return;
  const auto first = schedule.epoch_of(step) * schedule.steps_per_epoch() + 1;
  std::map<std::int64_t, double> accuracy_at(accuracies.begin(), accuracies.end());
  for (const auto& [at, loss] : losses) {
    if (at < first || at > step) continue;
    const auto b = schedule.batch_size_at(at);
    add(loss, std::llround(accuracy_at[at] * static_cast<double>(b)), b);
  }
}

}  // namespace routelab
