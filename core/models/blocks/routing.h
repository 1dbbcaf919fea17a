// Machinery shared by routed layers: readable layer patterns, compaction of routed tokens (gather -> compute on
// compacted sequences -> scatter), expert-choice top-k, the dense-masked attention oracle, and the causal
// predictor that replaces a non-causal top-k at inference (MoD; DTRNet's expert-choice variant).
#pragma once
#include <string>
#include <vector>

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include "core/models/blocks/part_scope.h"
#include "core/util/thread_flag.h"

namespace routelab {

/// Which layers route. `spec` is one of
///  - a name: "bilayer" (T-D-T-D-...-T), "trilayer" (T-D-D-T-D-D-...-T), "laterhalf" (second half routed),
///    "6-transformer" (first two, middle two and last two dense), all four with the first and last layer dense
///    (DTRNet App. A2); "alternate" (odd layers, MoD's T-M-T-M); "after-2" (every layer from the third on,
///    D-LLM); "all"; "none"; "dtrnet-code" (the reference code's list [2, 4, ..., L-2] read as it reads it:
///    those dense, every other layer routed; architectures.md 1.5);
///  - one letter per layer, optionally dash-separated: T = dense, any of D/M/R = routed ("T-D-T-D");
///  - routed layer indices: "1,3,5" or "[1, 3, 5]".
/// Throws ConfigError naming `key` for anything else, for a wrong length or an index out of range.
std::vector<bool> parse_layer_pattern(const std::string& spec, std::int64_t n_layer, const std::string& key);
/// "T-D-T-D" form of a pattern.
std::string pattern_string(const std::vector<bool>& routed);

/// While alive, bf16 autocast leaves this thread's ops alone: a router computes in fp32 from an fp32 copy of its input
/// (`x.to(torch::kFloat)`), so a decision near a tie, or a benchmark's forced threshold, is not made by bf16 rounding
/// (a bias of 3 moves by 0.01 in bf16, more than the spread of an untrained router's logits). D-LLM's official
/// router computes in fp32 (x.float()); Switch Transformer's "selective precision" does the same for its router.
/// Its ops are the part "router" of the profiles (part_scope.h).
class Fp32Router {
  PartScope part_{ROUTELAB_PART_PREFIX "router"};
  c10::impl::ExcludeDispatchKeyGuard no_autocast_{c10::autocast_dispatch_keyset};
};

/// The routed tokens of a batch, compacted per sequence in their original (causal) order.
struct Compaction {
  torch::Tensor index;                ///< (B, K) int64: positions of routed tokens ascending, then padding
  torch::Tensor valid;                ///< (B, K) bool: false on padding
  torch::Tensor flat;                 ///< (B K) int64: b T + index, each row's place among the B T rows
  torch::Tensor real_flat;            ///< (total) int64: `flat` of the real rows only (padding left out)
  torch::Tensor real;                 ///< (total) int64: the real rows' places among the B K; undefined without padding
  std::vector<std::int64_t> lengths;  ///< routed tokens per sequence (host)
  std::int64_t max_len = 0;           ///< K = max length
  std::int64_t total = 0;             ///< sum of lengths
  double sum_sq = 0;                  ///< sum of lengths^2 (attention cost)
  std::int64_t seq_len = 0;           ///< T of the uncompacted sequences
  /// The sized form (compact_sized): > 0, the rows real_flat holds, the routed ones first and unrouted rows after them
  /// as padding; lengths, max_len, total and sum_sq stay unknown on the host (counts holds them on the device).
  std::int64_t capacity = 0;
  /// The padded sized form (compact_sized_padded): true, max_len is a capacity per sequence fixed on the host, and
  /// lengths, total and sum_sq stay unknown on the host (counts holds them on the device; valid marks the rows).
  bool padded_sized = false;
  torch::Tensor counts;     ///< sized forms: (B) int64 routed tokens per sequence, on the device
  torch::Tensor starts;     ///< sized form: (B + 1 + kPaddingRuns) int32 cumulative lengths (see compact_sized)
  torch::Tensor row_valid;  ///< sized form: (capacity, 1) bool, true on the routed rows that fit
  std::int64_t longest = 0;  ///< sized form: no run of `starts` is longer

  /// B K: the rows a product over the compacted sequences runs, padding included (what a trace prices).
  double padded_rows() const {
    return static_cast<double>(index.defined() ? index.size(0) : static_cast<std::int64_t>(lengths.size())) *
           static_cast<double>(max_len);
  }
};

/// The padded length K of compacted sequences is rounded up to a multiple of this on a GPU (capped at T), so
/// successive steps see a few recurring shapes: kernel plans (cuDNN attention builds one per new sequence length)
/// and allocator blocks are reused instead of rebuilt every step. 1 (no rounding) elsewhere.
constexpr std::int64_t kCudaCompactionBucket = 64;

/// decision: (B, T) bool. One host sync (the per-sequence counts). `bucket` > 0 rounds K up to its multiple (the extra
/// rows are padding: valid false, after every real row); 0 picks kCudaCompactionBucket on CUDA and 1 elsewhere.
/// Without `with_valid` the mask `valid` is left undefined (two launches fewer after the wait, for callers that read
/// the lengths instead).
Compaction compact(const torch::Tensor& decision, std::int64_t bucket = 0, bool with_valid = true);
/// compact() for the packed forms alone (gather_packed, scatter_packed, packed_positions): real_flat, the lengths
/// and their sums, no (B, K) index, padding or valid mask. One stable sort of the flattened batch lists the routed
/// rows first, in order, and the counts are read back once: a handful of launches, none after the wait but a view,
/// and no index built on the host and staged to the device.
Compaction compact_packed(const torch::Tensor& decision);
/// The padding rows of a sized compaction are attended as this many runs of their own (so every row of the packed
/// batch is attended and finite, at a cost of (padding / runs)^2 per run, while the count of runs stays fixed).
constexpr std::int64_t kPaddingRuns = 16;
/// What a sized compaction (compact_sized) of `capacity` rows needs on the device, built once a capacity (a caller
/// keeps it while the capacity stays): the padding runs' fixed bounds ceil(capacity p / kPaddingRuns), p = 0..R
/// (int32), and the rows' places (capacity, 1).
struct SizedRows {
  std::int64_t capacity = 0;
  torch::Tensor bounds, places;
};
/// SizedRows for `capacity` rows (clamped to [1, tokens]) on `device`; `reuse` is returned as it is when it fits.
SizedRows sized_rows(std::int64_t capacity, std::int64_t tokens, const torch::Device& device,
                     const SizedRows& reuse = {});
/// compact_packed for `rows.capacity` packed rows fixed on the host, without reading anything back: the first
/// `capacity` rows of the same stable sort, so the routed rows come first, sequence after sequence, and unrouted rows
/// fill the rest as padding (each put back unchanged by scatter_packed). `starts` lists the sequences' cumulative
/// lengths (clamped to the capacity), then kPaddingRuns runs over the padding rows: run p ends at
/// max(N, ceil(capacity p / kPaddingRuns)), N the routed rows that fit; runs may be empty. More routed rows than the
/// capacity overflow it: those past it are left out, and the caller, reading `counts` later, must not use the result
/// (sized_overflow).
/// Without `with_runs` only the rows, `row_valid` and `counts` are built (for rows that attend nothing: no `starts`).
Compaction compact_sized(const torch::Tensor& decision, const SizedRows& rows, bool with_runs = true);
/// compact() for `len` rows a sequence fixed on the host (clamped to [1, T]), without reading anything back: the
/// (B, len) index of compact()'s order (each sequence's routed positions ascending, then unrouted ones as padding),
/// `valid` on the routed rows that fit, `counts` on the device. scatter_rows and add_rows leave the padding rows'
/// tokens unchanged; the attention runs the padded rows whole (causal: a real row never reads a padding row). A
/// sequence that routed more than `len` tokens overflows (sized_overflow_per_sequence): its rows past `len` are left
/// out.
Compaction compact_sized_padded(const torch::Tensor& decision, std::int64_t len);
/// Whether a sized compaction's sequences, read back as `lengths`, overflowed its capacity.
bool sized_overflow(const std::vector<std::int64_t>& lengths, std::int64_t capacity);
/// Whether a padded sized compaction's sequences, read back as `lengths`, overflowed its `len` rows a sequence.
bool sized_overflow_per_sequence(const std::vector<std::int64_t>& lengths, std::int64_t len);
/// A model's read of a layer's padded sized compaction (`len` rows a sequence; counts read back as `lengths`): false
/// when a sequence overflowed them; else the layer's next `capacity` a sequence is sized from its longest sequence
/// (resize_capacity, `below` the layer's count) and
/// `trace` (when given) receives the routed share of the batch's `tokens` and the attention and MLP token counts.
bool settle_padded_sized(const std::vector<std::int64_t>& lengths, std::int64_t len, std::int64_t& capacity,
                         int& below, struct LayerTrace* trace, std::int64_t tokens);
/// settle_padded_sized for a packed sized compaction (compact_sized) of `rows` packed rows: false when the batch
/// routed more than them; else `capacity` is sized from the routed total (resize_capacity) and `trace` (when given)
/// receives the routed share, the attention and MLP token counts, and the block of `shape` over the rows and runs it
/// ran (block_flops, sized_runs) added to its price.
bool settle_packed_sized(const std::vector<std::int64_t>& lengths, std::int64_t rows, std::int64_t& capacity,
                         int& below, struct LayerTrace* trace, std::int64_t tokens, const struct LayerShape& shape);
/// The (B) count tensors of sized compactions read back together, one wait for the device: the lengths of each.
std::vector<std::vector<std::int64_t>> read_counts(const std::vector<torch::Tensor>& counts);
/// A model's routed layers' counts after its last layer, one a layer (undefined where the layer counted exactly, or is
/// not routed), the defined ones read back together (read_counts): each sized layer's index and lengths, in order.
std::vector<std::pair<std::size_t, std::vector<std::int64_t>>> read_sized_counts(
    const std::vector<torch::Tensor>& counts);
/// The runs a sized compaction of `capacity` rows attends for routed `lengths` that fit: the lengths, then the
/// padding runs (starts' differences).
std::vector<std::int64_t> sized_runs(const std::vector<std::int64_t>& lengths, std::int64_t capacity);
/// The capacity to size the next compaction of `tokens` rows by after `routed` of them were routed with `capacity`
/// (0: none yet): routed plus a margin of 1/16 and 32 rows, to a multiple of 64, at most `tokens`. It grows whenever
/// the routed rows come near it and shrinks only when they fall well below it, so that shapes recur from step to step.
std::int64_t next_capacity(std::int64_t routed, std::int64_t capacity, std::int64_t tokens);
/// Forwards in a row whose routing must want a smaller capacity before resize_capacity shrinks it.
constexpr int kShrinkAfterForwards = 16;
/// What a layer sizes its next forward by (every sized form: DTRNet's packed rows, MoD's and D-LLM's padded rows):
/// next_capacity's capacity, grown at once, but shrunk only after kShrinkAfterForwards forwards in a row wanted less
/// (`below`, the layer's, counts them). A routing that swings from step to step would otherwise shrink a capacity
/// just before outgrowing it again, and each new capacity costs an eager forward that overflows a rerun, a step
/// captured as a CUDA graph a capture.
std::int64_t resize_capacity(std::int64_t routed, std::int64_t capacity, std::int64_t tokens, int& below);
/// Sizes a layer's next forward of `batch_tokens` tokens from the `routed` rows (at most `limit`) of this one:
/// resize_capacity of its `capacity` where that was sized for this batch size (`tokens`), else afresh; `tokens`
/// becomes the batch size. Every sized form's layers keep their (capacity, tokens, below) and call this.
void size_next_forward(std::int64_t routed, std::int64_t limit, std::int64_t batch_tokens, std::int64_t& capacity,
                       std::int64_t& tokens, int& below);
/// While alive, routed layers on this thread count their routed tokens exactly (one wait for the device each) instead
/// of sizing compactions from earlier forwards: tests compare the two forms.
using ExactRoutedCounts = ScopedThreadFlag<struct ExactRoutedCountsTag>;
/// Whether a routed layer may size its packed compaction from earlier forwards (compact_sized): unless an
/// ExactRoutedCounts is alive, deterministic algorithms are on (train.deterministic), a residual or layer-state probe
/// collects on this thread, or ROUTELAB_SIZED_COMPACTION=0 (read once).
bool sized_compaction_active();
/// While alive, padded_sized_active is true on this thread: tests run the padded sized form on the CPU.
using ForcePaddedSized = ScopedThreadFlag<struct ForcePaddedSizedTag>;
/// Whether a routed block over compacted rows of `x` with heads of `head_dim` may take a padded sized compaction
/// (compact_sized_padded) from earlier forwards: where its attention runs the padded rows anyway (a GPU without the
/// packed path: fp32, or varlen attention off) or while a ForcePaddedSized is alive, and sized_compaction_active.
/// Not on the CPU otherwise: there the counts cost no wait, and the exact lengths let the CPU kernel skip padding.
bool padded_sized_active(const torch::Tensor& x, std::int64_t head_dim);
/// An eval-mode routed layer's sizing of its compaction (MoD's predictor, D-LLM's execute rule): what it is sized by
/// for batches of `tokens` tokens, set from exact counts and from the model's one read of the sized ones.
struct EvalSizing {
  std::int64_t capacity = 0, tokens = 0;  ///< 0, or another batch size: counted exactly
  int below = 0;                          ///< forwards in a row that wanted a smaller capacity (resize_capacity)
  /// The last forward's sized compaction: its (B) counts on the device, and its rows a sequence (padded) or the
  /// batch's packed rows; undefined and 0 when it counted exactly.
  torch::Tensor counts;
  std::int64_t len = 0, packed = 0;
  SizedRows rows;  ///< the packed capacity's device constants (compact_sized)

  /// The compaction of `decision` (B, T) for rows of `x` attended with heads of `head_dim`, sized from earlier
  /// forwards where it can be (nothing read back): the batch's packed rows (compact_sized) where the attention takes
  /// packed rows (packed_rows_active) and sized_compaction_active, rows a sequence (compact_sized_padded) where
  /// padded_sized_active; else counted exactly (compact), which sizes the next forward of this batch size
  /// (size_next_forward): packed rows by their total, padded ones by the longest sequence.
  Compaction compact(const torch::Tensor& decision, const torch::Tensor& x, std::int64_t head_dim);
  /// Forgets the last forward's sized compaction (a forward that compacted otherwise: nothing to read for it).
  void clear_read();
  /// After the model's read of `counts` (`lengths`): settle_packed_sized or settle_padded_sized of the compaction
  /// that compact() made, the block of `shape` priced for packed rows. False when it overflowed.
  bool settle(const std::vector<std::int64_t>& lengths, struct LayerTrace* trace, std::int64_t tokens,
              const struct LayerShape& shape);
  /// The sized compaction that compact() made, settled after the forward (defer_settling): overflowed where a
  /// sequence routed more than its padded rows, or the batch more than its packed rows. Undefined counts where it
  /// counted exactly.
  struct DeferredSizing defer(std::int64_t tokens);
};
/// Whether a routed layer whose rows attend nothing (TSA's sparse FFN, one row a token) may gather a capacity of rows
/// sized from earlier forwards (compact_sized) instead of reading its count back: on a GPU, or while a
/// ForcePaddedSized is alive, and sized_compaction_active.
bool sized_ffn_rows_active(const torch::Tensor& x);
/// Only the counts of a Compaction (lengths, max_len, total, sum_sq): one host sync, no index built.
Compaction count_routed(const torch::Tensor& decision);
/// The original positions (B, K) of the compacted tokens, from positions (T) or (B, T).
torch::Tensor compacted_positions(const torch::Tensor& positions, const Compaction& c);
/// (B, T, C) -> (B, K, C): the routed rows (padding rows repeat unrouted tokens; callers ignore them). One row
/// gather over the flattened (B T, C) rows.
torch::Tensor gather_rows(const torch::Tensor& x, const Compaction& c);
/// base (B, T, C) with its routed rows replaced by rows (B, K, C); padding rows of `rows` are dropped. One copy of
/// base with the real rows written into it (its backward: one copy of the gradient with those rows zeroed). A padded
/// sized compaction writes its padding rows' tokens back unchanged.
torch::Tensor scatter_rows(const torch::Tensor& base, const Compaction& c, const torch::Tensor& rows);
/// base (B, T, C) with the update rows (B, K, C) added to its routed rows (padding rows dropped): a residual update
/// of the routed tokens. One copy of base with the rows added (bit for bit scatter_rows(base, c, gathered + rows));
/// its backward passes base's gradient through unchanged (no zeroed copy) and gathers the rows'. A padded sized
/// compaction adds nothing to its padding rows' tokens; a packed sized one (compact_sized) takes rows (capacity, C)
/// and adds nothing for its padding rows either.
torch::Tensor add_rows(const torch::Tensor& base, const Compaction& c, const torch::Tensor& rows);

/// (B, T, C) -> (total, C): the routed rows packed one sequence after another, without padding (one row gather).
torch::Tensor gather_packed(const torch::Tensor& x, const Compaction& c);
/// base (B, T, C) with its routed rows replaced by the packed rows (total, C): one copy of base with them written. A
/// sized compaction's padding rows keep base's values (rows there are ignored).
torch::Tensor scatter_packed(const torch::Tensor& base, const Compaction& c, const torch::Tensor& rows);
/// The original positions (total) of the packed rows, from positions (T) or (B, T).
torch::Tensor packed_positions(const torch::Tensor& positions, const Compaction& c);

/// (B, T) bool: the k highest scores of each sequence (expert choice), k clamped to [0, T].
torch::Tensor topk_decision(const torch::Tensor& scores, std::int64_t k);

/// Expert-choice top-k as a decision and its compaction at once. Every sequence routes exactly k tokens, so the
/// compacted length is known on the host and nothing waits for the device (compact() reads the counts back, which
/// stalls a GPU's queue once per routed layer). The index is the one compact(topk_decision(scores, k), 1) builds;
/// no bucket rounding: K = k is the same every step.
struct TopKRouting {
  torch::Tensor decision;  ///< (B, T) bool
  Compaction compaction;
};
TopKRouting topk_routing(const torch::Tensor& scores, std::int64_t k);

/// Forcing a routed share (ArchitectureEntry::force_routed_share): the threshold that puts exactly `k` of `scores`
/// strictly above it (midway between neighbours; k clamped to [0, n]).
double threshold_for_top(const torch::Tensor& scores, std::int64_t k);
/// The logit of gate probabilities, in double (probabilities clamped away from 0 and 1).
torch::Tensor gate_logit(const torch::Tensor& p);
/// round(fraction x n), clamped to [0, n].
std::int64_t share_count(double fraction, std::int64_t n);
/// Forcing a two-way softmax router (output bias (2), `gate` = the probability of output `path` from one forward with
/// the current bias): sets bias[path] so that exactly `k` of the gated tokens take `path`.
void force_two_way_bias(const torch::Tensor& bias, std::int64_t path, const torch::Tensor& gate, std::int64_t k);

/// Reference attention with an explicit mask: q (B, H, T, hd), k, v (B, Hkv, T, hd), allowed (B, T, T) bool
/// (query, key). Dense T x T cost: the test oracle for the compacted paths.
torch::Tensor masked_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& allowed);

/// The small classifier that predicts, from the past only, whether a token would be in its sequence's top-k
/// (Raposo et al. 2024 option b; DTRNet reproduces it "with a linear layer"). It reads the residual stream
/// with stop-gradient, so its BCE loss does not touch the language model.
class CausalPredictorImpl : public torch::nn::Module {
 public:
  explicit CausalPredictorImpl(std::int64_t n_embd);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T) logits, on x.detach()
  /// Mean binary cross-entropy of the logits against the top-k membership `target` (B, T) bool.
  static torch::Tensor loss(const torch::Tensor& logits, const torch::Tensor& target);
  /// Fraction of tokens where (logit > 0) equals target.
  static double agreement(const torch::Tensor& logits, const torch::Tensor& target);
  /// agreement() as a 0-dim fp32 tensor on the logits' device (no wait for the device).
  static torch::Tensor agreement_on_device(const torch::Tensor& logits, const torch::Tensor& target);

  torch::nn::Linear linear{nullptr};
};
TORCH_MODULE(CausalPredictor);

}  // namespace routelab
