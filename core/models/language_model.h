// The one interface the trainer talks to: a language model that returns logits, its auxiliary (routing)
// loss and a per-layer routing trace. Every architecture (dense or routed) implements it.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "core/util/thread_flag.h"

namespace routelab {

class DecodeState;   // core/inference/kv_cache.h
struct DecodeTrace;  // core/inference/kv_cache.h

/// What one layer did with the tokens of a forward pass.
struct LayerTrace {
  int layer = 0;
  std::string kind = "dense";     ///< "dense" or the routed layer's kind ("dtrnet", "mod", ...)
  bool routed = false;            ///< whether this layer makes routing decisions
  torch::Tensor gate;             ///< (B, T) float: probability of the routed (expensive) path; undefined if dense
  torch::Tensor decision;         ///< (B, T) bool: hard decision (true = routed path); undefined if dense
  double routed_fraction = 1.0;   ///< fraction of tokens that took the routed path
  double aux_loss = 0.0;          ///< this layer's auxiliary-loss term (before the global coefficient)
  /// sub-layer -> tokens, e.g. {"attn": 812, "mlp": 4096}; "kv", where present: the cache entries decoding this
  /// input token by token leaves in the layer when that is not the "attn" count (analytic_kv_entries)
  std::map<std::string, std::int64_t> tokens_processed;
  double flops = 0;               ///< forward FLOPs of this layer on this batch, from its real decisions (cost/flops.h)
  double dense_flops = 0;         ///< forward FLOPs a dense layer of the same shape spends on the same batch
  std::map<std::string, double> stats;  ///< layer-specific extras, e.g. {"predictor_agreement": 0.97}
  /// Values still on the device (0-dim tensors), read back together by resolve_on_device: "aux_loss",
  /// "routed_fraction" and "flops" become those fields, "tokens_processed.<sub>" tokens_processed[sub], any other key
  /// stats[key]. Empty once resolved.
  std::map<std::string, torch::Tensor> on_device;
};

/// Moves every layer's on_device values into its aux_loss and stats with one copy to the host (one wait for the
/// device instead of one per value) - unless a DeferredTraceReadback is alive on this thread, when they stay.
void resolve_on_device(std::vector<LayerTrace>& trace);

/// While alive, resolve_on_device leaves the values on the device: a step being captured as a CUDA graph must not
/// wait for it (core/train/cuda_graph_step.h resolves the trace after each replay instead).
using DeferredTraceReadback = ScopedThreadFlag<struct DeferredTraceReadbackTag>;

/// What a forward whose routed shapes were fixed before it ran (ModelOutput::check_shapes) finds once it has run.
struct ShapeCheck {
  bool overflowed = false;  ///< the batch's routing did not fit the shapes: the forward's result is not to be used
  bool resized = false;     ///< the shapes for the next forward changed (grown after an overflow, or shrunk)
};

struct ModelOutput {
  torch::Tensor logits;           ///< (B, T, V)
  torch::Tensor aux_loss;         ///< scalar, already multiplied by its coefficient(s); 0 for dense
  std::vector<LayerTrace> trace;  ///< one entry per layer when tracing was asked for
  /// Further predictions of the same next tokens, (B, T, V) each (early-exit heads): in training the LM loss
  /// is the mean of the cross-entropies of these and `logits`. Empty for single-head models.
  std::vector<torch::Tensor> exit_logits;
  /// Model-level statistics of this forward pass when tracing was asked for (e.g. TSA's {"alpha",
  /// "tlops_saved"}): the trainer stores them as train/<key> at log steps and val/<key> (mean over the
  /// evaluation batches) at evaluations.
  std::map<std::string, double> stats;
  /// Model-level statistics still on the device (0-dim tensors), read back into `stats` together with the trace's
  /// values by resolve_on_device(ModelOutput&); empty once resolved.
  std::map<std::string, torch::Tensor> stats_on_device;
  /// Per-token routing data that does not fit one layer's trace, when tracing was asked for: (B, T, ...) tensors
  /// by name, e.g. Radial Networks' {"depth": (B, T) int64, "path": (B, T, S) int64 layer per step, -1 after the
  /// exit}. The trainer's probe records sequence 0 of each.
  std::map<std::string, torch::Tensor> token_data;
  /// Set by a forward that read nothing back to size its routed work (DTRNet's sized rows under
  /// DeferredTraceReadback, as in a step captured as a CUDA graph): `overflow` a 0-dim float on the device, 1 where
  /// this batch routed more than the shapes held (its result must not be used: train_step skips the update on it,
  /// MultiTensorAdamW::skip_next_step_if); `check_shapes`, called once the forward has run (after each replay of a
  /// captured step; one wait for the device), reads the routing back and sizes the next forward's shapes from it.
  torch::Tensor overflow;
  std::function<ShapeCheck()> check_shapes;
};

/// One routed layer of a forward whose compaction was sized from earlier forwards, settled after the forward has run
/// (defer_settling) rather than by the forward's own read of its counts: a forward captured as a CUDA graph must not
/// wait for the device.
struct DeferredSizing {
  torch::Tensor counts;             ///< (B) the routed tokens of each sequence, on the device
  torch::Tensor overflow;           ///< 0-dim bool on the device: the counts did not fit the layer's rows
  std::vector<torch::Tensor> keep;  ///< what the compaction read (a captured graph reads them at every replay)
  const std::int64_t* capacity = nullptr;  ///< the layer's capacity for its next forward (settle may change it)
  /// With the counts read: false where they overflowed; else sizes the layer's next forward from them.
  std::function<bool(const std::vector<std::int64_t>& lengths)> settle;
};

/// Under DeferredTraceReadback, an untraced forward's sized layers: sets `out.overflow` (any layer's counts did not
/// fit) and `out.check_shapes`, which reads every layer's counts in one wait and settles the layers in order
/// (overflowed where one did not fit: the forward's result is not to be used; resized where a capacity changed).
/// Nothing is set when `layers` is empty.
void defer_settling(std::vector<DeferredSizing> layers, ModelOutput& out);

/// One batch's forward output from those of its equal-sized micro-batches, in order (gradient accumulation, logged
/// as one step): per layer, gates and decisions concatenated along the batch, token counts and FLOPs summed, routed
/// fractions, auxiliary terms and stats averaged; model-level stats averaged, token data concatenated, the auxiliary
/// loss averaged. Logits and exit logits are not merged (left empty). The averages weigh part i by weights[i] (its
/// examples, where a classifier's micro-batches differ in size); equally without weights.
ModelOutput merge_micro_batches(std::vector<ModelOutput> parts, std::vector<double> weights = {});

/// resolve_on_device for a whole output: its trace's values and its stats_on_device in the one copy to the host.
void resolve_on_device(ModelOutput& out);

class LanguageModel : public torch::nn::Module {
 public:
  /// tokens: (B, T) int64. With `trace` the per-layer routing trace is filled (cheap: no host syncs
  /// are added beyond what routing itself needs).
  virtual ModelOutput forward(const torch::Tensor& tokens, bool trace = false) = 0;
  virtual std::string arch_id() const = 0;
  virtual std::int64_t num_layers() const = 0;
  virtual std::int64_t vocab_size() const = 0;
  /// Whether AdamW weight decay applies to the named parameter (default: matrices of linear layers only;
  /// never norms, biases or embeddings).
  virtual bool decays(const std::string& name, const torch::Tensor& parameter) const;
  /// Training progress in [0, 1], set by the trainer before every step (for schedules inside the model,
  /// e.g. D-LLM's sine-ramped rate-loss weight). Ignored by default.
  virtual void set_progress(double /*fraction*/) {}
  /// Incremental decoding with KV caches (core/inference/kv_cache.h): a fresh state for `batch` sequences, then
  /// decode() calls that feed tokens (B, n) (n > 1 for a prefill, 1 per generated token) and return their logits
  /// (B, n, V), equal to those of an eval-mode forward over everything fed so far. Routing follows the inference
  /// rules and uses only the past. `trace` (when not null) receives the per-layer routing of the new tokens. The
  /// defaults throw ConfigError naming the architecture.
  virtual std::unique_ptr<DecodeState> begin_decode(std::int64_t batch);
  virtual torch::Tensor decode(DecodeState& state, const torch::Tensor& tokens, DecodeTrace* trace = nullptr);
  /// A short description with the parameter count.
  virtual std::string describe() const;
  std::int64_t parameter_count() const;
};

/// Copies every parameter and buffer of `student` from the one of `teacher` with the same name after `renames`
/// (teacher prefix -> student prefix, e.g. {"blocks.", "layers."}) and the same shape; names starting with one of
/// `own` (the student's own parts, e.g. "router.") are left as they are. ConfigError listing the student's tensors
/// that found no counterpart. Returns how many tensors were copied.
std::int64_t copy_matching_weights(torch::nn::Module& student, const torch::nn::Module& teacher,
                                   const std::vector<std::pair<std::string, std::string>>& renames,
                                   const std::vector<std::string>& own);

}  // namespace routelab
