// The training loop. Reads top to bottom: build (data, model, optimizer, run row) -> for each step: lr from the
// step, batch from (seed, step), train_step, record, evaluate, checkpoint -> terminal status on every exit path.
#include "core/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include <torch/cuda.h>
#include <torch/torch.h>

#include "core/config/run_name.h"
#include "core/data/classification.h"
#include "core/data/dataset.h"
#include "core/models/classifier.h"
#include "core/models/language_model.h"
#include "core/models/registry.h"
#include "core/run/run_config.h"
#include "core/train/checkpoint.h"
#include "core/train/classification_step.h"
#include "core/train/cuda_graph_step.h"
#include "core/train/data_parallel.h"
#include "core/train/distillation.h"
#include "core/train/eval_records.h"
#include "core/train/evaluation.h"
#include "core/train/optimizer.h"
#include "core/train/resumable_run.h"
#include "core/train/run_checkpoints.h"
#include "core/train/run_setup.h"
#include "core/train/step.h"
#include "core/train/token_probe.h"
#include "core/util/device.h"
#include "core/util/errors.h"
#include "core/util/logging.h"
#include "core/util/paths.h"
#include "core/util/process.h"
#include "core/util/version.h"

namespace fs = std::filesystem;

namespace routelab {
namespace {

/// What one training step reports, whichever the task. The scalars stay on the device until the step is settled.
struct StepRecord {
  torch::Tensor loss_t, aux_loss_t, grad_norm_t;  ///< 0-dim, on the model's device
  torch::Tensor stops_t;  ///< data parallel: 0-dim, how many ranks asked to stop after this step
  double loss = 0;                                ///< filled when settled
  double aux_loss = 0;
  double grad_norm = 0;
  std::int64_t tokens = 0;
  std::vector<LayerTrace> trace;         ///< at log steps
  std::map<std::string, double> stats;   ///< at log steps
  std::optional<double> accuracy;        ///< classification
  std::int64_t correct = 0, examples = 0;
};

/// A step whose scalars have not been read back yet.
struct PendingStep {
  std::int64_t step = 0;
  double wall = 0, lr = 0;
  bool log_step = false;
  StepRecord record;
};

/// run.device; on a data-parallel rank (`dist`) with CUDA, the GPU of its local_rank on its node.
torch::Device run_device(const ExperimentConfig& config, const DistEnv* dist) {
  auto device = resolve_device(config.run().at("device").get<std::string>());
  if (dist && device.is_cuda()) device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(dist->local_rank));
  return device;
}

/// On a GPU the loop reads the step's loss and gradient norm back only every this many steps (and at every log,
/// evaluation, checkpoint and stop), so the host keeps queueing work instead of waiting for each step to finish.
/// train.sync_every overrides it.
constexpr std::int64_t kGpuSyncEvery = 32;

/// Everything one run needs while it trains.
class Session {
 public:
  /// `stored_tokenizer`: the tokenizer a resumed run trained with (null for a new run). `collective`: the process
  /// group of a data-parallel run (null for a run on one process).
  Session(ExperimentConfig config, std::string db_path, TrainObserver* observer, const std::atomic<bool>* cancel,
          const nlohmann::json& stored_tokenizer = nullptr, std::shared_ptr<Collective> collective = nullptr)
      : config_(std::move(config)), db_path_(std::move(db_path)), observer_(observer), cancel_(cancel),
        log_(logger("train")), collective_(std::move(collective)) {
    const auto& train = config_.train();
    total_steps_ = train.at("steps").get<std::int64_t>();
    const auto target = run_device(config_, collective_ ? &collective_->env() : nullptr);
    threads_.emplace(thread_count());
    cuda_graph_ = train.at("cuda_graph").get<bool>();
    checkpoints_ = RunCheckpoints(train.at("checkpoint_async").get<bool>(),
                                  train.at("keep_checkpoints").get<std::int64_t>());
    if (cuda_graph_) check_cuda_graph(target);
    if (collective_) check_data_parallel(config_, collective_->world_size());
    setup_ = RunSetup(config_, target, db_path_, stored_tokenizer);
    const auto rows = setup_.step_rows();
    if (setup_.classification) {
      if (const auto epochs = train.at("epochs").get<std::int64_t>(); epochs > 0)
        total_steps_ = epochs * setup_.schedule->steps_per_epoch();
      if (collective_) dp_.emplace(DataParallel::for_examples(collective_, rows, setup_.batch_size));
      return;
    }
    if (setup_.teacher) {
      threads_.emplace(thread_count());  // opening it set its own
      log_->info("{}: its weights copied", setup_.distillation());
    }
    if (collective_) dp_.emplace(collective_, rows, setup_.batch_size);
    // Language modelling draws random windows, so an epoch is a budget: as many tokens as the training split holds.
    if (const auto epochs = train.at("epochs").get<std::int64_t>(); epochs > 0) {
      const auto per_step = rows * setup_.dataset->context();
      total_steps_ =
          epochs * std::max<std::int64_t>(1, (setup_.dataset->split_tokens(Split::Train) + per_step - 1) / per_step);
    }
  }

  /// The run's device (run.device; on a data-parallel rank with CUDA, its node's GPU local_rank).
  const torch::Device& device() const { return setup_.device; }

  /// run.threads; "every core" (0) on a node shared by several ranks is each rank's share of its cores.
  int thread_count() const {
    const auto threads = static_cast<int>(config_.run().at("threads").get<std::int64_t>());
    if (threads > 0 || !collective_ || collective_->env().local_world_size <= 1) return threads;
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return std::max(1, cores / collective_->env().local_world_size);
  }

  /// Whether this process writes the run (rank 0 of a data-parallel run, or the only process).
  bool writes() const { return !dp_ || dp_->writes(); }

  /// "batch 32", with accumulation "batch 32 (4 micro-batches of 8)": sequences or examples a step.
  std::string batch_text() const {
    std::ostringstream out;
    out << "batch " << setup_.step_rows();
    if (setup_.grad_accum > 1) out << " (" << setup_.grad_accum << " micro-batches of " << setup_.batch_size << ")";
    return out.str();
  }

  /// "batch 32 x 128 = 4096 tokens a step"; with accumulation "batch 32 (4 micro-batches of 8) x 128 = ...".
  std::string global_batch_text() const {
    std::ostringstream out;
    const auto context = setup_.dataset->context();
    out << batch_text() << " x " << context << " = " << setup_.step_rows() * context << " tokens a step";
    if (dp_) out << " over " << dp_->describe();
    return out.str();
  }

  /// train.cuda_graph: refused, naming the setting, where the step cannot be captured (before the run is created).
  void check_cuda_graph(const torch::Device& target) const {
    const auto& entry = architecture(config_.arch());
    if (auto why = why_no_cuda_graph(entry, config_.model(), config_.train()); !why.empty()) {
      if (!entry.cuda_graph_step)
        why += "; architectures that can: " +
               architectures_with([](const ArchitectureEntry& e) { return e.cuda_graph_step; });
      throw ConfigError("train.cuda_graph: " + why);
    }
    if (config_.train().at("distill_from").get<std::int64_t>() > 0)
      throw ConfigError("train.cuda_graph: train.distill_from is set; the captured step runs no teacher (distil with "
                        "eager steps)");
    if (!target.is_cuda())
      throw ConfigError("train.cuda_graph: run.device is " + target.str() +
                        "; CUDA graphs need a GPU (run.device=cuda)");
    if (!cuda_graphs_available())
      throw ConfigError("train.cuda_graph: this build's LibTorch has no CUDA (packaging/build.sh --torch pip)");
  }

  std::string description() const {
    std::ostringstream out;
    if (setup_.classification)
      out << setup_.classifier->describe() << "; " << setup_.class_data->describe() << "; " << batch_text()
          << " examples, " << setup_.schedule->steps_per_epoch() << " steps per epoch"
          << (dp_ ? " over " + dp_->describe() : "");
    else
      out << setup_.model->describe() << "; " << setup_.dataset->describe() << "; " << global_batch_text();
    out << "; " << device().str() << " x" << threads_->threads() << " threads (OpenMP waiting: " << openmp_wait_policy()
        << (device().is_cpu() ? blas_kernels_note() : std::string()) << "); "
        << (setup_.bf16 ? "bf16 autocast" : "fp32") << (cuda_graph_ ? "; step replayed as a CUDA graph" : "");
    return out.str();
  }

  std::int64_t create_run(const std::string& name, const std::string& qt_version) {
    RunStore store(db_path_);
    NewRun row;
    row.name = !name.empty() ? name
               : !config_.run().at("name").get<std::string>().empty() ? config_.run().at("name").get<std::string>()
                                                                      : default_run_name(config_);
    row.arch = config_.arch();
    row.preset = config_.origin;
    row.config_json = config_.doc.dump();
    row.config_hash = config_.hash();
    row.seed = setup_.seed;
    row.device = device().str();
    row.routelab_version = ROUTELAB_VERSION;
    row.torch_version = torch_version_string();
    row.qt_version = qt_version;
    row.total_steps = total_steps_;
    if (collective_) {
      row.world_size = collective_->world_size();
      row.backend = collective_->backend();
    }
    row.lease_token = lease_token_ = new_lease_token();
    if (setup_.teacher) row.parent_run_id = setup_.teacher->run_id;  // a distilled run's lineage is its teacher
    if (!setup_.classification) row.tokenizer_json = setup_.dataset->tokenizer().to_json().dump();
    config_hash_ = row.config_hash;
    run_id_ = store.create_run(row);
    auto notes = config_.run().at("notes").get<std::string>();
    if (setup_.teacher)
      notes = "distilled from run " + std::to_string(setup_.teacher->run_id) + " (" + setup_.teacher->name + ", " +
              setup_.teacher->arch + ")" + (notes.empty() ? "" : "; " + notes);
    if (!notes.empty()) {
      RunPatch patch;
      patch.notes = notes;
      store.patch_run(run_id_, patch);
    }
    return run_id_;
  }

  /// Loads the newest intact checkpoint of `run_id` (this process holds the run's lease `lease_token`) and rewinds
  /// the store to its step. A checkpoint that is damaged, of another run or config, or of another step than its
  /// row says, is passed over for the one before it, and the run's message says so.
  void restore(const RunRecord& record, const std::string& lease_token) {
    run_id_ = record.id;
    lease_token_ = lease_token;
    config_hash_ = record.config_hash;
    resumed_ = true;
    RunStore store(db_path_, /*mark_crashed=*/false);
    const auto point = load_newest_intact(store.checkpoints(run_id_), run_id_, config_hash_, setup_.module(),
                                          setup_.optimizer.get(), device());
    const auto& meta = point.meta;
    const auto& passed_over = point.passed_over;
    resumed_from_ = point.path;
    start_step_ = meta.step;
    tokens_seen_ = meta.tokens_seen;
    elapsed_before_ = meta.elapsed_s;
    rewind_run(store, run_id_, meta.step, *log_);
    if (setup_.classification) {  // the epoch's sums so far, from the stored per-step loss and accuracy
      const auto points = [&](const char* key) {
        std::vector<std::pair<std::int64_t, double>> out;
        for (const auto& p : store.metric(run_id_, key)) out.emplace_back(p.step, p.value);
        return out;
      };
      epoch_.restore(points("train/loss"), points("train/accuracy"), *setup_.schedule, start_step_);
    }
    if (!passed_over.empty())
      resume_note_ = "resumed from step " + std::to_string(meta.step) + ", passing over " +
                std::to_string(passed_over.size()) + " unusable checkpoint" + (passed_over.size() == 1 ? "" : "s") +
                " (" + passed_over.front() + (passed_over.size() > 1 ? "; ..." : "") + ")";
    RunPatch patch;
    patch.resumed_from_step = meta.step;
    patch.backend = collective_ ? collective_->backend() : "";
    if (const int ranks = collective_ ? collective_->world_size() : 1; ranks != record.world_size) {
      patch.world_size = ranks;
      resume_note_ += std::string(resume_note_.empty() ? "" : "; ") + "continued on " + std::to_string(ranks) +
                      " rank" + (ranks == 1 ? "" : "s") + " after " + std::to_string(record.world_size) +
                      " (the same " + std::to_string(setup_.step_rows()) + " sequences a step)";
    }
    store.set_status(run_id_, RunStatus::Running, resume_note_, lease_token_);
    store.patch_run(run_id_, patch);
    log_->info("run {}: resumed from {} at step {}", run_id_, point.path, meta.step);
  }

  TrainOutcome run() {
    TrainOutcome outcome;
    outcome.run_id = run_id_;
    outcome.db_path = db_path_;
    outcome.last_step = start_step_;
    if (writes()) writer_.open(db_path_, run_id_, lease_token_);
    if (writes()) checkpoints_.open(db_path_, run_id_, writer_, log_);
    const std::string desc = description();
    if (observer_) observer_->on_started(run_id_, desc, total_steps_);
    log_->info("run {}: {}", run_id_, desc);
    if (writes())  // rank 0 of a data-parallel run: every rank has the same config
      for (const auto& unread : unread_config_keys(config_, dp_.has_value())) log_->warn("run {}: {}", run_id_, unread);
    try {
      if (dp_) join_ranks(outcome);
      loop(outcome);
      checkpoints_.finish();  // a run ends once its last checkpoint is on the disk and recorded
    } catch (const std::exception& e) {
      // The steps that ran before the error but were not read back yet are still recorded, where the device allows,
      // and so is a checkpoint still being written, once it is.
      TrainOutcome settled = outcome;
      try {
        settle(settled);
        outcome.last_step = settled.last_step;
      } catch (const std::exception&) {
      }
      try {
        checkpoints_.finish();
      } catch (const std::exception& ce) {
        log_->error("run {}: {}", run_id_, ce.what());
      }
      outcome.status = RunStatus::Failed;
      outcome.message = e.what();
      log_->error("run {}: failed at step {}: {}", run_id_, outcome.last_step, e.what());
    }
    try {
      writer_->set_status(outcome.status, outcome.message);
    } catch (const std::exception& e) {
      log_->error("run {}: could not record status {}: {}", run_id_, to_string(outcome.status), e.what());
    }
    writer_.reset();
    RunStore::forget_lease(lease_token_);  // whether or not the status reached the store, no writer here holds it
    if (observer_) observer_->on_finished(outcome);
    return outcome;
  }

 private:
  /// Data parallel, before the first step: rank 0 tells the other ranks the run and the checkpoint it resumed from
  /// (they load it too), then every rank checks that it runs the same config and build and takes rank 0's weights.
  void join_ranks(TrainOutcome& outcome) {
    const auto from = dp_->collective().broadcast_string(std::to_string(run_id_) + "\n" + resumed_from_);
    const auto newline = from.find('\n');
    run_id_ = std::stoll(from.substr(0, newline));
    outcome.run_id = run_id_;
    if (const auto checkpoint = from.substr(newline + 1); !writes() && !checkpoint.empty()) {
      const auto meta = load_checkpoint(checkpoint, setup_.module(), setup_.optimizer.get(), device(), nullptr);
      start_step_ = outcome.last_step = meta.step;
      tokens_seen_ = meta.tokens_seen;
      elapsed_before_ = meta.elapsed_s;
      resumed_ = true;
    }
    const auto& run = config_.run();
    dp_->start(setup_.module(), config_.hash() + ", RouteLab " + ROUTELAB_VERSION + ", " + torch_version_string(),
               run.at("dist_bucket_mb").get<double>(), run.at("dist_overlap").get<bool>());
    log_->info("run {}: {}", run_id_, collective_->describe());
  }

  /// The user's stop; in a data-parallel run any rank's, seen by every rank when it settles the step (every step on
  /// the CPU; on a GPU at the next settling, which all ranks reach at the same step).
  bool stop_requested() const { return dp_ ? ranks_stop_ : cancel_ && cancel_->load(); }

  void loop(TrainOutcome& outcome) {
    const auto& train = config_.train();
    const auto warmup = train.at("warmup_steps").get<std::int64_t>();
    const double lr = train.at("lr").get<double>(), min_lr = train.at("min_lr").get<double>();
    const double grad_clip = train.at("grad_clip").get<double>();
    const auto log_every = train.at("log_every").get<std::int64_t>();
    const auto eval_every = train.at("eval_every").get<std::int64_t>();
    const auto ckpt_every = train.at("checkpoint_every").get<std::int64_t>();
    const auto sync_setting = train.at("sync_every").get<std::int64_t>();
    const std::int64_t sync_every = sync_setting > 0 ? sync_setting : device().is_cuda() ? kGpuSyncEvery : 1;

    if (start_step_ == 0 && !resumed_) {
      // The untrained model's validation loss: every curve starts from a measured point, not from step 1.
      const auto eval = evaluate(0);
      if (writes()) {
        outcome.first_val_loss = eval.val_loss;
        outcome.first_val_accuracy = eval.val_accuracy;
        if (observer_) observer_->on_eval(eval);
      }
    }
    setup_.module().train();
    t_start_ = std::chrono::steady_clock::now();
    t_window_ = t_start_;
    window_tokens_ = 0;
    tokens_per_s_ = 0;
    pending_.clear();

    for (std::int64_t step = start_step_ + 1; step <= total_steps_; ++step) {
      if (stop_requested()) {
        if (!settle(outcome)) return;
        checkpoint(step - 1, t_start_);
        outcome.status = RunStatus::Stopped;
        outcome.message = "stopped by the user at step " + std::to_string(step - 1);
        log_->info("run {}: {}", run_id_, outcome.message);
        return;
      }
      if (threads_->update()) log_->info("run {}: {}", run_id_, threads_->note());
      const double lr_now = lr_at(step - 1, total_steps_, warmup, lr, min_lr);
      set_learning_rate(*setup_.optimizer, lr_now);
      const bool log_step = step % log_every == 0 || step == total_steps_ || step == start_step_ + 1;
      auto result = setup_.classification ? classification_step(step, grad_clip, log_step)
                                          : lm_step(step, grad_clip, log_step);
      pending_.push_back({step, record_wall_s(), lr_now, log_step, std::move(result)});

      // Classification validates after every epoch, and every eval_every steps when that is more often.
      const auto& schedule = setup_.schedule;
      const bool eval_step =
          setup_.classification
              ? schedule->ends_epoch(step) || (eval_every < schedule->steps_per_epoch() && step % eval_every == 0)
              : step % eval_every == 0;
      const bool checkpoint_step = step % ckpt_every == 0 || step == total_steps_;
      const bool settle_now = log_step || eval_step || checkpoint_step ||
                              static_cast<std::int64_t>(pending_.size()) >= sync_every;
      if (settle_now && !settle(outcome)) return;
      checkpoints_.poll();

      if (eval_step || step == total_steps_) {  // data parallel: every rank evaluates its share, rank 0 records
        const auto eval = evaluate(step);
        if (writes()) {
          if (!outcome.first_val_loss) outcome.first_val_loss = eval.val_loss;
          outcome.last_val_loss = eval.val_loss;
          if (!outcome.first_val_accuracy) outcome.first_val_accuracy = eval.val_accuracy;
          outcome.last_val_accuracy = eval.val_accuracy;
          if (observer_) observer_->on_eval(eval);
        }
      }
      if (checkpoint_step) checkpoint(step, t_start_);
      if (eval_step || checkpoint_step) restart_throughput_window();
    }
    outcome.status = RunStatus::Finished;
    outcome.message = "finished " + std::to_string(outcome.last_step) + " steps";
    if (!resume_note_.empty()) outcome.message += "; " + resume_note_;
    log_->info("run {}: {}", run_id_, outcome.message);
  }

  /// Reads the pending steps' scalars back in one transfer and records them in order: metrics, the non-finite
  /// check, throughput, routing rows, the observer. False (with the outcome set to failed) on a non-finite loss.
  bool settle(TrainOutcome& outcome) {
    if (pending_.empty()) return true;
    std::vector<torch::Tensor> scalars;
    for (const auto& p : pending_)
      for (const auto* t : {&p.record.loss_t, &p.record.aux_loss_t, &p.record.grad_norm_t, &p.record.stops_t})
        scalars.push_back(t->defined() ? t->detach().to(device(), torch::kFloat).reshape({})
                                       : torch::zeros({}, device()));
    const auto host = torch::stack(scalars).to(torch::kCPU, torch::kDouble);  // waits for the device
    const auto* values = host.data_ptr<double>();
    auto steps = std::move(pending_);
    pending_.clear();
    note_throughput(steps);
    for (std::size_t i = 0; i < steps.size(); ++i) {
      auto& p = steps[i];
      auto& result = p.record;
      result.loss = values[4 * i];
      result.aux_loss = values[4 * i + 1];
      result.grad_norm = values[4 * i + 2];
      ranks_stop_ = ranks_stop_ || values[4 * i + 3] > 0;
      if (!record_step(p, outcome)) return false;
    }
    return true;
  }

  /// Throughput over the steps settled since the last reading: their tokens over the wall time until the device
  /// finished them (the settling transfer waits for it), read at least every 0.5 s and at every log step. Steps
  /// settled together share one reading: timing each of them on the host would measure when it was queued.
  void note_throughput(const std::vector<PendingStep>& steps) {
    bool log_step = false;
    for (const auto& p : steps) {
      window_tokens_ += p.record.tokens;
      log_step = log_step || p.log_step;
    }
    const auto now = std::chrono::steady_clock::now();
    const double window_s = std::chrono::duration<double>(now - t_window_).count();
    if (window_s >= 0.5 || log_step) {
      tokens_per_s_ = static_cast<double>(window_tokens_) / std::max(window_s, 1e-9);
      t_window_ = now;
      window_tokens_ = 0;
    }
  }

  /// Training time only: evaluations and checkpoints are left out of the throughput window.
  void restart_throughput_window() {
    t_window_ = std::chrono::steady_clock::now();
    window_tokens_ = 0;
  }

  /// Everything stored and reported about one settled step.
  bool record_step(PendingStep& p, TrainOutcome& outcome) {
    writer_->check();  // a store that lost rows for good (or the run's lease) ends the run here
    const auto step = p.step;
    const double wall = p.wall, lr_now = p.lr, loss = p.record.loss;
    auto& result = p.record;
    tokens_seen_ += result.tokens;
    outcome.last_step = step;

    writer_->add_metric({"train/loss", step, wall, loss});
    writer_->add_metric({"train/lr", step, wall, lr_now});
    writer_->add_metric({"train/grad_norm", step, wall, result.grad_norm});
    if (result.accuracy) writer_->add_metric({"train/accuracy", step, wall, *result.accuracy});
    if (!std::isfinite(loss)) {
      outcome.status = RunStatus::Failed;
      outcome.message = "loss became " + std::string(std::isnan(loss) ? "NaN" : "infinite") + " at step " +
                        std::to_string(step) + " (lr " + std::to_string(lr_now) + ")";
      log_->error("run {}: {}", run_id_, outcome.message);
      return false;
    }

    const auto now = std::chrono::steady_clock::now();
    StepMetrics m;
    m.step = step;
    m.total_steps = total_steps_;
    m.loss = loss;
    m.aux_loss = result.aux_loss;
    m.accuracy = result.accuracy;
    m.lr = lr_now;
    m.grad_norm = result.grad_norm;
    m.tokens_per_s = tokens_per_s_;
    m.elapsed_s = elapsed_before_ + std::chrono::duration<double>(now - t_start_).count();
    const double per_step = std::chrono::duration<double>(now - t_start_).count() / double(step - start_step_);
    m.eta_s = per_step * double(total_steps_ - step);
    m.tokens_seen = tokens_seen_;
    if (p.log_step) {
      writer_->add_metric({"train/tokens_per_s", step, wall, tokens_per_s_});
      writer_->add_metric({"train/aux_loss", step, wall, m.aux_loss});
      record_train_routing(writer_, step, result.trace, result.stats, m);
    }
    if (setup_.classification) add_to_epoch(step, result, wall);
    if (observer_) observer_->on_step(m);
    return true;
  }

  /// One language-modelling step on the batch of (seed, step).
  StepRecord lm_step(std::int64_t step, double grad_clip, bool log_step) {
    // The step's whole batch: grad_accum micro-batches of batch_size, drawn as one, so a run with accumulation sees
    // the batches of a run with one batch of that size.
    const auto host = setup_.lm_batch(step);
    setup_.model->set_progress(static_cast<double>(step - 1) / static_cast<double>(total_steps_));
    // Made at the first step, after a resume has loaded the optimizer's state.
    if (cuda_graph_ && !graph_step_)
      graph_step_ =
          std::make_unique<CudaGraphStep>(*setup_.model, *setup_.optimizer, grad_clip, setup_.bf16, setup_.grad_accum);
    StepResult result;
    torch::Tensor stops;
    if (dp_) {  // this rank's rows of the step; gradients, losses and the trace summed over the ranks
      auto share = dp_->share_of(host);  // the loss mask counted over every rank's rows, on the host
      if (share.global_counted.defined()) share.global_counted = copy_to_device(share.global_counted, device());
      result = train_step(*setup_.model, *setup_.optimizer, to_device(dp_->local_part(host), device()), grad_clip,
                          setup_.bf16, log_step, dp_->micro_batches(), setup_.teacher_or_null(), &share);
      stops = dp_->finish_step(result, log_step, cancel_ && cancel_->load());
      if (log_step) result.output.stats["dist_wait_ms"] = dp_->last_wait_s() * 1000.0;
    } else {
      const auto batch = to_device(host, device());
      result = graph_step_ ? graph_step_->run(batch, /*trace=*/log_step)
                           : train_step(*setup_.model, *setup_.optimizer, batch, grad_clip, setup_.bf16,
                                        /*trace=*/log_step, setup_.grad_accum, setup_.teacher_or_null());
    }
    StepRecord r;
    r.loss_t = result.loss;
    r.aux_loss_t = result.aux_loss;
    r.grad_norm_t = result.grad_norm;
    r.stops_t = stops;
    r.tokens = setup_.step_rows() * setup_.dataset->context();
    r.trace = std::move(result.output.trace);
    r.stats = std::move(result.output.stats);
    return r;
  }

  /// One classification step on the step's slice of its epoch's shuffled order (data parallel: this rank's block of
  /// it; the step's numbers summed over the ranks).
  StepRecord classification_step(std::int64_t step, double grad_clip, bool log_step) {
    const auto host = setup_.class_batch(step);
    const auto examples = host.label.size(0);
    ClassStepResult result;
    torch::Tensor stops;
    if (dp_) {
      const auto block = dp_->example_block(examples);
      const auto share = dp_->example_share(examples, block);
      result = classification_train_step(*setup_.classifier, *setup_.optimizer,
                                         to_device(class_batch_rows(host, block.start, block.count), device()),
                                         grad_clip, setup_.bf16, log_step, block.micro_batches, &share);
      stops = dp_->finish_example_step(result, log_step, cancel_ && cancel_->load());
      result.examples = examples;
    } else {
      result = classification_train_step(*setup_.classifier, *setup_.optimizer, to_device(host, device()), grad_clip,
                                         setup_.bf16, /*trace=*/log_step, setup_.grad_accum);
    }
    StepRecord r;
    r.loss_t = result.loss;
    r.aux_loss_t = result.aux_loss;
    r.grad_norm_t = result.grad_norm;
    r.stops_t = stops;
    r.tokens = host.mask.sum().item<std::int64_t>();  // real tokens: padding is neither computed nor counted
    r.trace = std::move(result.output.trace);
    r.stats = std::move(result.output.stats);
    r.correct = result.correct;
    r.examples = result.examples;
    r.accuracy = static_cast<double>(result.correct) / static_cast<double>(std::max<std::int64_t>(1, result.examples));
    return r;
  }

  /// Accumulates the epoch's example-weighted training loss and accuracy; stores them when the epoch ends.
  void add_to_epoch(std::int64_t step, const StepRecord& r, double wall) {
    epoch_.add(r.loss, r.correct, r.examples);
    if (!setup_.schedule->ends_epoch(step)) return;
    writer_->add_metric({"train/epoch_loss", step, wall, epoch_.loss()});
    writer_->add_metric({"train/epoch_accuracy", step, wall, epoch_.accuracy()});
    epoch_.clear();
  }

  EvalMetrics evaluate(std::int64_t step) {
    return setup_.classification ? evaluate_classification(step) : evaluate_lm(step);
  }

  /// The whole validation split: loss, accuracy, macro-F1, routing stats, and the probe example. Data parallel: each
  /// rank runs every world_size-th batch, and rank 0 merges the ranks' sums.
  EvalMetrics evaluate_classification(std::int64_t step) {
    auto sums =
        evaluate_classifier_sums(*setup_.classifier, *setup_.class_data, Split::Val, setup_.batch_size, device(),
                                 setup_.bf16, dp_ ? dp_->rank() : 0, dp_ ? dp_->collective().world_size() : 1);
    if (dp_) {
      auto merged = dp_->merge_class_eval(sums);
      if (!merged) return {};
      sums = std::move(*merged);
    }
    auto pass = finish_classifier_eval(sums, setup_.class_data->num_classes(), previous_assignments_);
    previous_assignments_ = std::move(pass.assignments);
    auto e = record_classification_eval(writer_, step, pass, setup_.schedule->steps_per_epoch(),
                                        setup_.class_data->label_names());
    {
      torch::NoGradGuard no_grad;
      const EvalMode eval_mode(*setup_.classifier);  // the probe shows inference-mode routing, as the evaluation
      writer_->add_probe({step, classification_probe_json(*setup_.classifier, *setup_.class_data, device())});
    }
    log_->info("run {}: step {} (epoch {:.2f}) val loss {:.4f} accuracy {:.4f} macro-F1 {:.4f}", run_id_, step,
               static_cast<double>(step) / setup_.schedule->steps_per_epoch(), e.val_loss, *e.val_accuracy,
               *e.val_macro_f1);
    return e;
  }

  EvalMetrics evaluate_lm(std::int64_t step) {
    const auto n_batches = config_.train().at("eval_batches").get<std::int64_t>();
    // The same validation batches at every evaluation, so successive values are comparable. Data parallel: each rank
    // runs every world_size-th batch, and rank 0 merges the ranks' passes.
    const auto shard = dp_ ? dp_->rank() : 0, shards = dp_ ? dp_->collective().world_size() : 1;
    const auto t0 = std::chrono::steady_clock::now();
    auto pass = evaluate_split(*setup_.model, *setup_.dataset, Split::Val, n_batches, setup_.batch_size,
                               static_cast<std::uint64_t>(setup_.seed), device(), setup_.bf16, shard, shards);
    log_->debug("run {}: step {} evaluation: {} of {} batches on this rank in {:.3f} s", run_id_, step, pass.batches,
                n_batches, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (dp_) {
      auto merged = dp_->merge_eval(pass);
      if (!merged) return {};
      pass = std::move(*merged);
    }
    const auto e = record_lm_eval(writer_, step, pass, setup_.dataset->chars_per_token(Split::Val));
    {
      torch::NoGradGuard no_grad;
      const EvalMode eval_mode(*setup_.model);  // the probe shows inference-mode routing, as the evaluation
      writer_->add_probe({step, probe_json()});
    }
    log_->info("run {}: step {} val loss {:.4f} ppl {:.2f} bpc {:.3f}", run_id_, step, e.val_loss, e.val_ppl, e.val_bpc);
    return e;
  }

  /// Per-token routing of the fixed probe text and the model's log-probability of each next token: the model
  /// reads the first `context` tokens and each position's next token is known. The token inspector's code path.
  std::string probe_json() {
    const auto ids = setup_.dataset->probe_tokens();
    if (ids.size() < 2) return "{}";
    const auto n = std::min<std::int64_t>(static_cast<std::int64_t>(ids.size()), setup_.dataset->context() + 1);
    const std::vector<std::int64_t> input(ids.begin(), ids.begin() + (n - 1));
    return trace_ids(*setup_.model, setup_.dataset->tokenizer(), input, ids[static_cast<std::size_t>(n - 1)],
                     /*top_k=*/0, setup_.dataset->context(), device())
        .to_json()
        .dump();
  }

  void checkpoint(std::int64_t step, std::chrono::steady_clock::time_point t_start) {
    // Step 0 too: a run stopped before its first step can be resumed. Data parallel: rank 0's is the run's.
    if (step < 0 || !writes()) return;
    CheckpointMeta meta;
    meta.step = step;
    meta.tokens_seen = tokens_seen_;
    meta.elapsed_s = elapsed_before_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    meta.config_json = config_.doc.dump();
    meta.tokenizer_json = setup_.classification ? setup_.class_data->tokenizer_json().dump()
                                                : setup_.dataset->tokenizer().to_json().dump();
    meta.run_id = run_id_;
    meta.config_hash = config_hash_;
    checkpoints_.write(setup_.module(), *setup_.optimizer, meta);
  }

  ExperimentConfig config_;
  std::string db_path_;
  TrainObserver* observer_;
  const std::atomic<bool>* cancel_;
  std::shared_ptr<spdlog::logger> log_;
  std::int64_t total_steps_ = 0;
  std::optional<ThreadGovernor> threads_;  ///< Torch threads; a run on "every core" follows the load
  RunSetup setup_;                         ///< data, model or classifier, teacher, optimizer, device
  torch::Tensor previous_assignments_;  ///< the last validation pass's expert choices (routing_change)
  EpochTally epoch_;  ///< classification: the epoch's training loss and accuracy so far
  bool cuda_graph_ = false;                     ///< train.cuda_graph
  RunCheckpoints checkpoints_{true, 0};         ///< train.checkpoint_async, train.keep_checkpoints
  std::unique_ptr<CudaGraphStep> graph_step_;  ///< made at the first step when cuda_graph_
  RankWriter writer_;  ///< rank 0's (or the only process's) writer of the run
  std::shared_ptr<Collective> collective_;  ///< data parallel: the process group (null: one process)
  std::optional<DataParallel> dp_;
  bool ranks_stop_ = false;  ///< data parallel: a rank asked to stop at a settled step
  std::string resumed_from_;  ///< the checkpoint restore() loaded
  std::vector<PendingStep> pending_;  ///< steps run but not yet read back (GPU)
  std::chrono::steady_clock::time_point t_start_, t_window_;
  std::int64_t window_tokens_ = 0;
  double tokens_per_s_ = 0;
  std::int64_t run_id_ = 0, start_step_ = 0, tokens_seen_ = 0;
  std::string lease_token_;  ///< this process's lease on the run: every store write names it
  std::string config_hash_;  ///< the run row's (written into checkpoints, checked on resume)
  std::string resume_note_;  ///< which checkpoints a resume passed over, and why (kept in the run's messages)
  bool resumed_ = false;
  double elapsed_before_ = 0;
};

std::string resolve_db(const std::string& db_path) { return db_path.empty() ? default_db_path() : db_path; }

/// The process group of a data-parallel rank (null for a process alone), joined before anything is stored.
std::shared_ptr<Collective> join_group(const DistEnv* dist, const ExperimentConfig& config) {
  if (!dist) return nullptr;
  const auto& run = config.run();
  return Collective::join(*dist, run_device(config, dist), run.at("backend").get<std::string>(),
                          run.at("dist_timeout_s").get<double>());
}

}  // namespace

TrainOutcome train(const TrainRequest& request, TrainObserver* observer, const std::atomic<bool>* cancel,
                   const DistEnv* dist) {
  ensure_logging();
  auto group = join_group(dist, request.config);
  Session session(request.config, resolve_db(request.db_path), observer, cancel, nullptr, std::move(group));
  if (session.writes()) session.create_run(request.name, request.qt_version);
  return session.run();
}

TrainOutcome resume(const std::string& db_path, std::int64_t run_id, TrainObserver* observer,
                    const std::atomic<bool>* cancel, int threads, double takeover_after_s, const DistEnv* dist) {
  ensure_logging();
  const auto db = resolve_db(db_path);
  const bool follower = dist && dist->rank != 0;  // a data-parallel rank other than 0 only reads the store
  auto run = resumable_run(db, run_id, /*mark_crashed=*/!follower, threads);
  auto group = join_group(dist, run.config);
  const auto where = db + ": run " + std::to_string(run_id);
  const auto stored_tokenizer = parse_stored_tokenizer(run.tokenizer, where);
  // The session's data is the stored run's (its corpus, shards or stored tokenizer): their errors name the run.
  const auto data_of_run = [&where](const DataError& e) { return DataError(where + ": " + e.what()); };
  if (follower) {
    try {
      Session session(run.config, db, observer, cancel, stored_tokenizer, std::move(group));
      return session.run();
    } catch (const DataError& e) {
      throw data_of_run(e);
    }
  }
  // From here this process is the run's one writer, or nothing happens: a second resume is refused here.
  const auto lease = RunStore(db).acquire_lease(run_id, takeover_after_s);
  try {
    try {
      Session session(run.config, db, observer, cancel, stored_tokenizer, std::move(group));
      session.restore(run.record, lease);
      return session.run();
    } catch (const DataError& e) {
      throw data_of_run(e);
    }
  } catch (...) {
    // Nothing was trained: the run is as it was, and free for the next resume.
    try {
      RunStore(db, /*mark_crashed=*/false).release_lease(run_id, lease);
    } catch (const std::exception& e) {
      logger("train")->error("run {}: could not give its lease back: {}", run_id, e.what());
    }
    throw;
  }
}

}  // namespace routelab
