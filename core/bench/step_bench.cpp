// bench step: the trainer's own step functions (train_step, classification_train_step) on the config's own data, the
// batches drawn as training draws them (a language model's windows by (seed, step), a classifier's epoch order), so
// what is timed is what `train` runs but for the bookkeeping around it (logging, evaluations, checkpoints).
#include "core/bench/step_bench.h"

#include <iomanip>
#include <sstream>

#include <torch/torch.h>

#include "core/bench/bench_timing.h"
#include "core/bench/call_profile.h"
#include "core/data/classification.h"
#include "core/data/dataset.h"
#include "core/models/registry.h"
#include "core/train/classification_step.h"
#include "core/train/evaluation.h"
#include "core/train/optimizer.h"
#include "core/train/step.h"
#include "core/util/device.h"
#include "core/util/errors.h"

namespace routelab {

StepBenchResult run_step_bench(const ExperimentConfig& config, const std::string& origin,
                               const StepBenchOptions& o) {
  const auto& train = config.train();
  if (const auto teacher = train.at("distill_from").get<std::int64_t>(); teacher > 0)
    throw ConfigError("bench step: train.distill_from " + std::to_string(teacher) +
                      ": a distilled step's teacher is a stored run; bench the student's step with --set "
                      "train.distill_from=0");
  if (train.at("cuda_graph").get<bool>())
    throw ConfigError("bench step: train.cuda_graph: `bench forward --train --cuda-graph` times replayed steps");
  const torch::Device device = resolve_device(config.run().at("device").get<std::string>());
  if (device.is_cuda()) configure_cuda_math(train.at("tf32").get<bool>(), train.at("deterministic").get<bool>());
  StepBenchResult r;
  r.origin = origin;
  r.arch = config.arch();
  r.device = device.str();
  r.precision = train.at("precision").get<std::string>();
  r.threads = configure_threads(static_cast<int>(config.run().at("threads").get<std::int64_t>()));
  r.batch = train.at("batch_size").get<std::int64_t>() * train.at("grad_accum").get<std::int64_t>();
  r.micro_batches = train.at("grad_accum").get<std::int64_t>();
  r.top = o.top;
  r.kernel_breakdowns = kernel_breakdowns(device);
  const bool bf16 = r.precision == "bf16";
  const double grad_clip = train.at("grad_clip").get<double>();
  const auto seed = static_cast<std::uint64_t>(config.run().at("seed").get<std::int64_t>());
  r.classifier = architecture(r.arch).task == Task::Classification;

  // One step of the run: `step` numbers the batch (1, 2, ...); returns the step's tokens.
  std::function<double(std::int64_t)> step;
  std::unique_ptr<LmDataset> lm_data;
  std::unique_ptr<ClassificationDataset> class_data;
  std::unique_ptr<EpochSchedule> schedule;
  std::shared_ptr<LanguageModel> model;
  std::shared_ptr<SequenceClassifier> classifier;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (r.classifier) {
    class_data = make_classification_dataset(config.data());
    torch::manual_seed(seed);
    classifier = create_classifier(config.model(),
                                   {class_data->vocab_size(), class_data->max_length(), class_data->num_classes()});
    classifier->to(device);
    classifier->train();
    optimizer = make_optimizer(*classifier, train);
    schedule = std::make_unique<EpochSchedule>(class_data->size(Split::Train), r.batch, seed);
    r.description = classifier->describe();
    step = [&](std::int64_t s) {
      const auto host = trim_padding(class_data->batch(Split::Train, schedule->indices(s)));
      classification_train_step(*classifier, *optimizer, to_device(host, device), grad_clip, bf16, false,
                                r.micro_batches);
      return host.mask.sum().item<double>();
    };
  } else {
    lm_data = make_dataset(config.data());
    torch::manual_seed(seed);
    model = create_model(config.model(), {lm_data->tokenizer().vocab_size(), lm_data->context()});
    model->to(device);
    model->train();
    model->set_progress(o.progress);
    optimizer = make_optimizer(*model, train);
    r.description = model->describe();
    const auto tokens = static_cast<double>(r.batch * lm_data->context());
    step = [&, tokens](std::int64_t s) {
      const auto host = lm_data->sample(Split::Train, r.batch, mix_seed(seed, kTrainStream, s));
      train_step(*model, *optimizer, to_device(host, device), grad_clip, bf16, false, r.micro_batches);
      return tokens;
    };
  }

  std::int64_t next = 1;
  const int warmup = device.is_cuda() ? std::max(1, o.warmup) : o.warmup;  // a GPU's first step sets it up
  for (int w = 0; w < warmup; ++w) step(next++);
  double tokens = 0;
  for (int i = 0; i < o.steps; ++i) {
    double t = 0;
    r.step_ms.push_back(time_ms([&] { t = step(next++); }, device));
    tokens += t;
  }
  r.median_ms = median(r.step_ms);
  r.tokens_per_step = o.steps > 0 ? tokens / o.steps : 0.0;
  if (o.profiled > 0) r.profile = profile_calls([&] { step(next++); }, device, o.profiled, o.top);
  return r;
}

std::string StepBenchResult::to_table() const {
  std::ostringstream s;
  s << std::fixed << std::setprecision(2);
  s << "bench step: " << origin << " (" << arch << "), " << device << ", " << threads << " threads, " << precision
    << "; " << batch << (classifier ? " examples" : " sequences") << " a step"
    << (micro_batches > 1 ? " in " + std::to_string(micro_batches) + " micro-batches" : std::string()) << "\n"
    << "  " << description << "\n"
    << "  " << step_ms.size() << " timed steps: median " << median_ms << " ms/step, " << std::setprecision(0)
    << tokens_per_s() << (classifier ? " real tokens/s" : " tokens/s") << std::setprecision(2) << " (steps";
  for (const double ms : step_ms) s << " " << std::setprecision(1) << ms;
  s << " ms)\n" << std::setprecision(2);
  if (profile.parts_ms.empty()) return s.str();
  double total = 0;
  for (const auto& [part, t] : profile.parts_ms) total += t.total();
  s << "  ms by part of the model and step (" << (kernel_breakdowns ? "kernel time" : "top-level ops' host time")
    << ", median of the profiled steps; the backward by the part of its forward op; " << total << " ms in all, "
    << std::setprecision(0) << profile.launches << (kernel_breakdowns ? " kernels" : " top-level ops")
    << " a step):\n"
    << std::setprecision(2) << parts_table(profile.parts_ms, 1.0);
  if (top > 0 && !profile.part_pieces.empty())
    s << "  what each part runs, its " << top << " longest " << (kernel_breakdowns ? "kernels" : "top-level ops")
      << " (ms forward / backward, calls; the last profiled step):\n"
      << part_pieces_table(profile, top, nullptr, {}, 4);
  return s.str();
}

nlohmann::json StepBenchResult::to_json() const {
  nlohmann::json parts = nlohmann::json::object();
  for (const auto& [name, t] : profile.parts_ms)
    parts[name] = {{"forward_ms", t.forward_ms}, {"backward_ms", t.backward_ms}, {"calls", t.calls()}};
  nlohmann::json pieces = nlohmann::json::object();
  for (const auto& [part, list] : profile.part_pieces)
    for (std::size_t i = 0; i < list.size() && i < static_cast<std::size_t>(std::max(0, top)); ++i)
      pieces[part].push_back({{"name", list[i].name},
                              {"forward_ms", list[i].forward_ms},
                              {"backward_ms", list[i].backward_ms},
                              {"calls", list[i].calls}});
  return {{"origin", origin},
          {"arch", arch},
          {"description", description},
          {"device", device},
          {"threads", threads},
          {"precision", precision},
          {"batch", batch},
          {"micro_batches", micro_batches},
          {"step_ms", step_ms},
          {"median_ms", median_ms},
          {"tokens_per_step", tokens_per_step},
          {"tokens_per_s", tokens_per_s()},
          {"kernel_breakdowns", kernel_breakdowns},
          {"launches", profile.launches},
          {"parts", parts},
          {"part_pieces", pieces}};
}

}  // namespace routelab
