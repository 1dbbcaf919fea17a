// Machinery shared by routed layers: readable layer patterns, compaction of routed tokens (gather -> compute on
// compacted sequences -> scatter), expert-choice top-k, the dense-masked attention oracle, and the causal
// predictor that replaces a non-causal top-k at inference (MoD; DTRNet's expert-choice variant).
#pragma once
#include <string>
#include <vector>

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

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
class Fp32Router {
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

  /// B K: the rows a product over the compacted sequences runs, padding included (what a trace prices).
  double padded_rows() const { return static_cast<double>(lengths.size()) * static_cast<double>(max_len); }
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
/// Only the counts of a Compaction (lengths, max_len, total, sum_sq): one host sync, no index built.
Compaction count_routed(const torch::Tensor& decision);
/// The original positions (B, K) of the compacted tokens, from positions (T) or (B, T).
torch::Tensor compacted_positions(const torch::Tensor& positions, const Compaction& c);
/// (B, T, C) -> (B, K, C): the routed rows (padding rows repeat unrouted tokens; callers ignore them). One row
/// gather over the flattened (B T, C) rows.
torch::Tensor gather_rows(const torch::Tensor& x, const Compaction& c);
/// base (B, T, C) with its routed rows replaced by rows (B, K, C); padding rows of `rows` are dropped. One copy of
/// base with the real rows written into it (its backward: one copy of the gradient with those rows zeroed).
torch::Tensor scatter_rows(const torch::Tensor& base, const Compaction& c, const torch::Tensor& rows);
/// base (B, T, C) with the update rows (B, K, C) added to its routed rows (padding rows dropped): a residual update
/// of the routed tokens. One copy of base with the rows added (bit for bit scatter_rows(base, c, gathered + rows));
/// its backward passes base's gradient through unchanged (no zeroed copy) and gathers the rows'.
torch::Tensor add_rows(const torch::Tensor& base, const Compaction& c, const torch::Tensor& rows);

/// (B, T, C) -> (total, C): the routed rows packed one sequence after another, without padding (one row gather).
torch::Tensor gather_packed(const torch::Tensor& x, const Compaction& c);
/// base (B, T, C) with its routed rows replaced by the packed rows (total, C): one copy of base with them written.
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
