// Key/value caches for incremental decoding: one KVCache per attention that keeps state across decode calls (a
// layer's self-attention, DRR's memory attentions, Radial Networks' unified store), gathered in a DecodeState.
// Layout: a padded buffer (B, Hkv, capacity, hd) per tensor plus a host-side length per sequence, because
// sequences of one batch route differently and so hold different numbers of entries. Each entry carries its
// token position (and, for Radial Networks, its routing step), so one attention rule serves every cache: a query
// at position t (step s) reads the entries of its own sequence with position <= t (and step <= s).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace routelab {

struct LayerTrace;

/// One attention's cache. Capacity grows by doubling (or to what reserve() asked for).
class KVCache {
 public:
  /// `per_token`: most entries one token can add per sequence (1; Radial's unified store: its steps; DRR's short
  /// memory: its window); `fixed`: entries per sequence that do not grow with the length (DRR's summaries). Both
  /// only feed the memory estimate.
  KVCache(std::string name, int layer, std::int64_t batch, std::int64_t kv_heads, std::int64_t head_dim,
          std::int64_t per_token = 1, std::int64_t fixed = 0);

  /// Appends entries: k, v (B, Hkv, n, hd); position (n) or (B, n) int64. With `keep` (B, n) bool only the kept
  /// rows of each sequence are appended, in order. `step` tags the entries (Radial). `hidden` (B, n) bool marks
  /// entries that are stored but invisible to every query (D-LLM's prefill keeps skipped tokens' slots masked, as
  /// its official code does). Returns the number of entries appended per sequence.
  std::vector<std::int64_t> append(const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& position,
                                   const torch::Tensor& keep = {}, std::int64_t step = 0,
                                   const torch::Tensor& hidden = {});

  /// Attention of q (B, H, n, hd) at q_position (n) or (B, n) over this sequence's visible entries with
  /// position <= q_position (and step <= q_step (B, n) when given). H is a multiple of Hkv (query head h reads KV
  /// head h / (H / Hkv), as repeat_kv). A query that sees no entry gets zeros. Softmax in fp32. -> (B, H, n, hd)
  torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& q_position, const torch::Tensor& q_step = {}) const;

  /// Grows the buffers to hold at least `entries` per sequence.
  void reserve(std::int64_t entries);

  const std::string& name() const { return name_; }
  int layer() const { return layer_; }
  std::int64_t batch() const { return batch_; }
  std::int64_t length(std::int64_t b) const { return lengths_[static_cast<std::size_t>(b)]; }
  const std::vector<std::int64_t>& lengths() const { return lengths_; }
  std::int64_t max_length() const;
  std::int64_t entries() const;            ///< sum over sequences of the entries held
  std::int64_t capacity() const { return capacity_; }
  std::int64_t entry_bytes() const;        ///< bytes of one entry's key and value (2 Hkv hd element size)
  std::int64_t live_bytes() const;         ///< keys and values of the entries held: entries() * entry_bytes()
  std::int64_t allocated_bytes() const;    ///< numel x element size of the key and value buffers (capacity, padding)
  std::int64_t index_bytes() const;        ///< the position / step / visibility tags of the allocation
  std::int64_t per_token() const { return per_token_; }
  std::int64_t fixed() const { return fixed_; }

 private:
  void ensure(std::int64_t needed, const torch::Tensor& like);

  std::string name_;
  int layer_ = 0;
  std::int64_t batch_ = 0, kv_heads_ = 0, head_dim_ = 0, per_token_ = 1, fixed_ = 0;
  std::int64_t capacity_ = 0, reserved_ = 0;
  std::vector<std::int64_t> lengths_;
  bool tagged_steps_ = false, has_hidden_ = false;
  /// Entries of every sequence in non-decreasing position order (true unless a step-major store interleaves):
  /// a query chunk then reads only the prefix of entries at or before its last position (causal half skipped).
  bool sorted_ = true;
  std::vector<std::int64_t> last_position_;
  torch::Tensor keys_, values_;  // (B, Hkv, capacity, hd)
  torch::Tensor position_;       // (B, capacity) int64
  torch::Tensor step_;           // (B, capacity) int64, once a step other than 0 was appended
  torch::Tensor visible_;        // (B, capacity) bool, once a hidden entry was appended
};

/// Per-layer routing of the tokens of one decode call (what `score` reports), under the inference rules.
struct DecodeTrace {
  /// One entry per layer: kind, routed, gate (B, n) and decision (B, n) of the new tokens (undefined when dense).
  std::vector<LayerTrace> layers;
  /// Per-token extras, (B, n, ...): early exit's "exit_layer", Radial's "depth".
  std::map<std::string, torch::Tensor> token_data;
};

/// Everything an architecture keeps between decode calls: its caches and any small extra state.
class DecodeState {
 public:
  DecodeState(std::string arch, std::int64_t batch, std::int64_t context_limit);

  const std::string& arch() const { return arch_; }
  std::int64_t batch() const { return batch_; }
  /// Tokens consumed per sequence so far = the absolute position of the next token.
  std::int64_t length() const { return length_; }
  /// The longest sequence the model accepts (its max_seq_len).
  std::int64_t context_limit() const { return context_limit_; }
  /// Throws ConfigError when `n` more tokens would exceed the context limit.
  void check_room(std::int64_t n) const;
  /// Called by the model at the end of a decode call.
  void advance(std::int64_t n) { length_ += n; }

  /// Adds a cache and returns its index in caches().
  std::size_t add_cache(KVCache cache);
  std::vector<KVCache>& caches() { return caches_; }
  const std::vector<KVCache>& caches() const { return caches_; }
  KVCache& cache(std::size_t i) { return caches_[i]; }

  /// Architecture-specific tensors kept between calls (DRR's running summary sums).
  std::map<std::string, torch::Tensor> tensors;

  std::int64_t live_bytes() const;
  std::int64_t allocated_bytes() const;
  std::int64_t entries() const;
  /// Upper bound of the key/value bytes once `length` tokens per sequence are cached (every routed token kept).
  std::int64_t estimate_bytes(std::int64_t length) const;
  /// Reserves every cache for `length` tokens per sequence.
  void reserve(std::int64_t length);

 private:
  std::string arch_;
  std::int64_t batch_ = 0, length_ = 0, context_limit_ = 0;
  std::vector<KVCache> caches_;
};

/// The cache entries per layer (summed over the batch) that decoding a full forward's input token by token leaves,
/// as the forward's trace (eval mode, traced) states them: LayerTrace::tokens_processed["kv"] where the layer
/// reports it (early exit: every token, exited ones keep serving keys; DRR: every token plus its memory entries),
/// else its "attn" count (dense and TSA every token, DTRNet / MoD / D-LLM the tokens on the attention path, Radial
/// the (token, step) executions), else every token. Times the entry bytes: the analytic KV count.
std::vector<std::int64_t> analytic_kv_entries(const std::vector<LayerTrace>& trace, std::int64_t batch,
                                              std::int64_t seq);

}  // namespace routelab
