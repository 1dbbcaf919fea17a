// bench step: the trainer's own run setup (RunSetup) and step functions (train_step, classification_train_step) on the
// config's own data, the batches drawn as training draws them (a language model's windows by (seed, step), a
// classifier's epoch order), so what is timed is what `train` runs but for the bookkeeping around it (logging,
// evaluations, checkpoints).
#include "core/bench/step_bench.h"

#include <iomanip>
#include <sstream>

#include <torch/torch.h>

#include "core/bench/bench_timing.h"
#include "core/bench/call_profile.h"
#include "core/train/classification_step.h"
#include "core/train/evaluation.h"
#include "core/train/run_setup.h"
#include "core/train/step.h"
#include "core/util/device.h"
#include "core/util/errors.h"

namespace routelab {

namespace {

/// One config's training run, ready to take steps as `train` takes them (RunSetup: its data, its model from its seed,
/// a distilled run's teacher, its optimizer); `result` holds what describes it.
class StepRun {
 public:
  StepRun(const ExperimentConfig& config, const std::string& origin, const StepBenchOptions& o) {
    const auto& train = config.train();
    if (train.at("cuda_graph").get<bool>())
      throw ConfigError("bench step: " + origin +
                        ": train.cuda_graph: `bench forward --train --cuda-graph` times replayed steps");
    setup_ = RunSetup(config, resolve_device(config.run().at("device").get<std::string>()), o.db);
    auto& r = result;
    r.origin = origin;
    r.arch = config.arch();
    r.device = setup_.device.str();
    r.precision = train.at("precision").get<std::string>();
    r.batch = setup_.step_rows();
    r.micro_batches = setup_.grad_accum;
    r.top = o.top;
    r.kernel_breakdowns = kernel_breakdowns(setup_.device);
    r.classifier = setup_.classification;
    grad_clip_ = train.at("grad_clip").get<double>();
    setup_.module().train();
    if (r.classifier) {
      r.description = setup_.classifier->describe();
      return;
    }
    setup_.model->set_progress(o.progress);
    r.description = setup_.model->describe();
    if (setup_.teacher) r.description += "; " + setup_.distillation();
  }

  const torch::Device& device() const { return setup_.device; }

  /// The run's next step (its batch numbered from 1, as training numbers them); returns the step's tokens.
  double step() {
    const auto s = next_++;
    if (setup_.classification) {
      const auto host = setup_.class_batch(s);
      classification_train_step(*setup_.classifier, *setup_.optimizer, to_device(host, setup_.device), grad_clip_,
                                setup_.bf16, false, setup_.grad_accum);
      return host.mask.sum().item<double>();
    }
    const auto host = setup_.lm_batch(s);
    train_step(*setup_.model, *setup_.optimizer, to_device(host, setup_.device), grad_clip_, setup_.bf16, false,
               setup_.grad_accum, setup_.teacher_or_null());
    return static_cast<double>(setup_.step_rows() * setup_.dataset->context());
  }

  /// One timed step into `result`.
  void timed_step() {
    double tokens = 0;
    result.step_ms.push_back(time_ms([&] { tokens = step(); }, setup_.device));
    tokens_ += tokens;
  }

  /// The medians of the timed steps, then `o.profiled` profiled steps.
  void finish(const StepBenchOptions& o) {
    result.median_ms = median(result.step_ms);
    result.tokens_per_step = result.step_ms.empty() ? 0.0 : tokens_ / static_cast<double>(result.step_ms.size());
    if (o.profiled > 0) result.profile = profile_calls([&] { step(); }, setup_.device, o.profiled, o.top);
  }

  StepBenchResult result;

 private:
  RunSetup setup_;
  double grad_clip_ = 1.0, tokens_ = 0;
  std::int64_t next_ = 1;
};

}  // namespace

StepBenchResult run_step_bench(const ExperimentConfig& config, const std::string& origin, const StepBenchOptions& o,
                               const ExperimentConfig* against, const std::string& against_origin) {
  const int threads = configure_threads(static_cast<int>(config.run().at("threads").get<std::int64_t>()));
  StepRun run(config, origin, o);
  std::unique_ptr<StepRun> other;
  if (against) {
    other = std::make_unique<StepRun>(*against, against_origin, o);
    if (other->device() != run.device())
      throw ConfigError("bench step: " + against_origin + " runs on " + other->result.device + ", " + origin +
                        " on " + run.result.device + ": give both one --device");
  }
  // A GPU's first step sets it up: never timed.
  const int warmup = run.device().is_cuda() ? std::max(1, o.warmup) : o.warmup;
  for (int w = 0; w < warmup; ++w) {
    run.step();
    if (other) other->step();
  }
  for (int i = 0; i < o.steps; ++i) {  // interleaved, each one first every other time
    if (other && i % 2 == 1) other->timed_step();
    run.timed_step();
    if (other && i % 2 == 0) other->timed_step();
  }
  run.finish(o);
  auto result = std::move(run.result);
  result.threads = threads;
  if (other) {
    other->finish(o);
    other->result.threads = threads;
    result.against = std::make_shared<StepBenchResult>(std::move(other->result));
  }
  return result;
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
  if (against) {
    const auto& a = *against;
    s << "  against " << a.origin << " (" << a.arch << "; " << a.batch << (a.classifier ? " examples" : " sequences")
      << " a step), its steps interleaved with these: " << a.description << "\n"
      << "  " << a.step_ms.size() << " timed steps: median " << a.median_ms << " ms/step, " << std::setprecision(0)
      << a.tokens_per_s() << (a.classifier ? " real tokens/s" : " tokens/s") << std::setprecision(2) << " (steps";
    for (const double ms : a.step_ms) s << " " << std::setprecision(1) << ms;
    s << " ms)\n" << std::setprecision(3) << "  time ratio " << arch << " / " << a.arch << ": " << time_ratio()
      << " a step, " << (a.tokens_per_s() > 0 ? tokens_per_s() / a.tokens_per_s() : 0.0) << " in tokens/s\n"
      << std::setprecision(2);
  }
  if (profile.parts_ms.empty()) return s.str();
  const auto* other = against && !against->profile.parts_ms.empty() ? against.get() : nullptr;
  double total = 0;
  for (const auto& [part, t] : profile.parts_ms) total += t.total();
  s << "  ms by part of the model and step (" << (kernel_breakdowns ? "kernel time" : "top-level ops' host time")
    << ", median of the profiled steps; the backward by the part of its forward op; " << total << " ms in all, "
    << std::setprecision(0) << profile.launches << (kernel_breakdowns ? " kernels" : " top-level ops")
    << " a step):\n"
    << std::setprecision(2)
    << parts_table(profile.parts_ms, 1.0, other ? &other->profile.parts_ms : nullptr, other ? other->arch : "");
  if (top > 0 && !profile.part_pieces.empty())
    s << "  what each part runs, its " << top << " longest " << (kernel_breakdowns ? "kernels" : "top-level ops")
      << " (ms forward / backward, calls; the last profiled step"
      << (other ? "; beside them " + other->arch + "'s time and calls for the same name in the same part" : "")
      << "):\n"
      << part_pieces_table(profile, top, other ? &other->profile : nullptr, other ? other->arch : "", 4);
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
  nlohmann::json out = {{"origin", origin},
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
  if (against) {
    out["against"] = against->to_json();
    out["time_ratio"] = time_ratio();
  }
  return out;
}

}  // namespace routelab
