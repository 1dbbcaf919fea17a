// A training run's part in data-parallel training (core/dist): which rows of each step's batch this rank trains on,
// the gradient sum, the step's numbers made global, and the one writer (rank 0).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/data/dataset.h"
#include "core/dist/collective.h"
#include "core/dist/grad_sync.h"
#include "core/store/run_store.h"
#include "core/train/classification_step.h"
#include "core/train/evaluation.h"
#include "core/train/step.h"

namespace routelab {

struct ExperimentConfig;

/// Refuses, naming the setting, a config that cannot train over `ranks` data-parallel ranks: a captured step
/// (train.cuda_graph), or a language model's step whose sequences the ranks do not divide. The trainer calls it, and
/// `--nproc` before any rank starts, so the error is printed once rather than by every rank.
void check_data_parallel(const ExperimentConfig& config, int ranks);

class DataParallel {
 public:
  /// A step's `global_rows` sequences (train.batch_size x train.grad_accum) split over the ranks: each takes an
  /// equal, disjoint block of rows, run as micro-batches of at most `batch_size` rows. A ConfigError naming
  /// train.batch_size and train.grad_accum when the ranks do not divide the step.
  DataParallel(std::shared_ptr<Collective> collective, std::int64_t global_rows, std::int64_t batch_size);
  /// A classifier's steps of up to `global_examples` examples (train.batch_size x train.grad_accum; an epoch's last
  /// step may hold fewer): each step's examples split over the ranks as evenly as they go (example_block), so the
  /// ranks need not divide them.
  static DataParallel for_examples(std::shared_ptr<Collective> collective, std::int64_t global_examples,
                                   std::int64_t batch_size);

  Collective& collective() { return *collective_; }
  int rank() const { return collective_->rank(); }
  bool writes() const { return collective_->rank() == 0; }
  std::int64_t local_rows() const { return local_rows_; }
  std::int64_t micro_batches() const { return micro_batches_; }
  /// "2 ranks (gloo), 16 sequences each as 2 micro-batches of 8"; a classifier's "2 ranks (gloo), up to 16 examples
  /// each as 2 micro-batches of 8".
  std::string describe() const;

  /// Before the first step: checks that every rank runs the same `fingerprint` (config, versions), makes every rank
  /// start from rank 0's weights, and prepares the gradient sum over `model`'s trainable parameters.
  void start(torch::nn::Module& model, const std::string& fingerprint, double bucket_mb, bool overlap);
  /// This rank's rows of the step's whole `batch`, and how they weigh in it (StepShare::sync included).
  Batch local_part(const Batch& batch) const;
  StepShare share_of(const Batch& batch) const;
  /// After the step: loss and aux loss summed over the ranks, the trace made global at log steps. Returns how many
  /// ranks asked to stop (`stop` on this one), a 0-dim tensor read when the step is settled: every rank settles at
  /// the same steps, so every rank stops after the same step.
  torch::Tensor finish_step(StepResult& result, bool traced, bool stop);
  /// Every rank's share of an evaluation (evaluate_split's shard rank() of world_size()) merged in rank order, so
  /// the sums are the same every time: on rank 0; nothing on the other ranks. Every rank must call it.
  std::optional<EvalPass> merge_eval(const EvalPass& own);
  /// Seconds the last step waited for the gradient sum after its backward pass.
  double last_wait_s() const { return sync_ ? sync_->last_wait_s() : 0.0; }

  /// This rank's examples of a classifier's step of `examples`: a block as even as the split goes (ranks before the
  /// remainder's take one more), run as the fewest micro-batches of at most batch_size. A rank left without examples
  /// runs the step's first as a stand-in (StepShare::stand_in).
  struct Block {
    std::int64_t start = 0, count = 0, micro_batches = 1;
    bool stand_in = false;
  };
  Block example_block(std::int64_t examples) const;
  /// How this rank's block weighs in a step of `examples` (StepShare::sync included).
  StepShare example_share(std::int64_t examples, const Block& block) const;
  /// After a classifier's step: loss, aux loss and correct answers summed over the ranks, the trace made global at
  /// log steps (each rank's weighing by its examples). Returns the stop requests as finish_step does.
  torch::Tensor finish_example_step(ClassStepResult& result, bool traced, bool stop);
  /// Every rank's sums of a classifier's evaluation (evaluate_classifier_sums's shard rank() of world_size()), merged:
  /// on rank 0; nothing on the other ranks. Every rank must call it.
  std::optional<ClassEvalSums> merge_class_eval(const ClassEvalSums& own);

 private:
  /// A classifier's (for_examples): no split fixed up front.
  DataParallel(std::shared_ptr<Collective> collective, std::int64_t batch_size);
  /// Every rank's `text` in rank order, on every rank. Every rank must call it.
  std::vector<std::string> texts_of_every_rank(const std::string& text);

  std::shared_ptr<Collective> collective_;
  std::int64_t global_rows_ = 0, local_rows_ = 0, micro_batches_ = 1, batch_size_ = 0;
  bool examples_ = false;  ///< a classifier's steps (for_examples)
  std::unique_ptr<GradientSync> sync_;
};

/// The run's store writer, on rank 0; on the other ranks of a data-parallel run the same calls write nothing (only
/// rank 0 writes the run store and the checkpoints).
class RankWriter {
 public:
  void open(const std::string& db_path, std::int64_t run_id, const std::string& lease_token) {
    writer_ = std::make_unique<StoreWriter>(db_path, run_id, lease_token);
  }
  void reset() { writer_.reset(); }
  bool writes() const { return writer_ != nullptr; }
  RankWriter* operator->() { return this; }
  void add_metric(const MetricRow& row) { if (writer_) writer_->add_metric(row); }
  void add_routing(const RoutingRow& row) { if (writer_) writer_->add_routing(row); }
  void add_eval(const EvalRow& row) { if (writer_) writer_->add_eval(row); }
  void add_checkpoint(const CheckpointRow& row) { if (writer_) writer_->add_checkpoint(row); }
  void retire_checkpoint(std::int64_t step) { if (writer_) writer_->retire_checkpoint(step); }
  void add_probe(const ProbeRow& row) { if (writer_) writer_->add_probe(row); }
  void flush() { if (writer_) writer_->flush(); }
  void check() { if (writer_) writer_->check(); }
  void set_status(RunStatus status, const std::string& message = "") {
    if (writer_) writer_->set_status(status, message);
  }

 private:
  std::unique_ptr<StoreWriter> writer_;
};

}  // namespace routelab
