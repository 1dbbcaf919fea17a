// Causal multi-head self-attention with optional grouped-query heads and RoPE, as a module whose pieces
// (projections, core attention, output projection, the value-only path) routed layers reuse.
#pragma once
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <torch/torch.h>

#include "core/models/blocks/rope.h"
#include "core/util/thread_flag.h"

namespace routelab {

class KVCache;  // core/inference/kv_cache.h

struct AttentionOptions {
  AttentionOptions(std::int64_t n_embd, std::int64_t n_head) : n_embd_(n_embd), n_head_(n_head) {}
  TORCH_ARG(std::int64_t, n_embd);
  TORCH_ARG(std::int64_t, n_head);
  /// key/value heads (grouped-query attention when < n_head); 0 means n_head
  TORCH_ARG(std::int64_t, n_kv_head) = 0;
  /// biases on the projections (GPT-2 style); false by default
  TORCH_ARG(bool, bias) = false;
  /// rotary positions (Llama style); true by default
  TORCH_ARG(bool, rope) = true;
  /// RoPE table size; 2048 by default
  TORCH_ARG(std::int64_t, max_positions) = 2048;
  /// RoPE base; 1e4 by default
  TORCH_ARG(double, rope_theta) = 10000.0;
  /// none: plain RoPE; linear or yarn: context extension by rope_factor over rope_original_context positions
  TORCH_ARG(RopeScaling, rope_scaling) = RopeScaling::None;
  /// 1.0: the context-extension factor s (evaluation beyond the training length)
  TORCH_ARG(double, rope_factor) = 1.0;
  /// 0: the training context YaRN's ramp is measured against
  TORCH_ARG(std::int64_t, rope_original_context) = 0;
  /// attention-probability dropout in training; 0 by default
  TORCH_ARG(double, dropout) = 0.0;
};

/// The profiler event (at::RecordFunction) of the custom CPU attention kernel; its one input is the kernel's
/// multiply-adds, which the FLOP counter reads since the kernel's products bypass ATen's matmul ops.
inline constexpr const char* kCpuAttentionEvent = "routelab::cpu_attention";
/// The profiler event of that kernel's backward (no inputs: nothing counts the backward's multiply-adds).
inline constexpr const char* kCpuAttentionBackwardEvent = "routelab::cpu_attention_backward";

/// at::parallel_for with the calling thread's thread-local state (grad mode, dispatch keys, the profiler) on every
/// worker, so the ATen ops a CPU kernel runs inside its loop behave as on the caller (inside an autograd Function's
/// forward, grad mode is off there; on a fresh OpenMP worker it is on). The loop is parallel only in a translation
/// unit compiled with OpenMP (at::parallel_for is a header template around `#pragma omp parallel`; core/CMakeLists.txt).
template <class F>
void parallel_for_as_caller(std::int64_t begin, std::int64_t end, std::int64_t grain, const F& f) {
  const at::ThreadLocalState state;
  at::parallel_for(begin, end, grain, [&](std::int64_t from, std::int64_t to) {
    const at::ThreadLocalStateGuard guard(state);
    f(from, to);
  });
}

/// The threads the CPU attention kernel's parallel loop runs on, at most at::get_num_threads(): 1 where its
/// translation unit was built without OpenMP (the build's mistake this guards against).
int cpu_attention_loop_threads();

/// What RouteLab's CPU attention kernel holds between a call and its backward. A call that needs no gradient holds
/// nothing: each thread softmaxes one block of query rows at a time (memory linear in T). One that does keeps every
/// block's probabilities (B H T^2 / 2 floats) while they fit in ROUTELAB_CPU_ATTENTION_KEEP_MB (default 256 MiB a
/// call; read once), and beyond that keeps each row's log-sum-exp instead (B H T floats), the backward recomputing
/// the probabilities block by block from Q K^T as flash attention's does: one more product per block.
/// D-LLM's CPU kernel (evicting_attention_cpu) keeps or recomputes its own probabilities by the same limit. While a
/// RecomputeCpuAttention is alive on a thread, both kernels' calls recompute whatever their size (tests, comparisons).
using RecomputeCpuAttention = ScopedThreadFlag<struct RecomputeCpuAttentionTag>;

/// Scaled dot-product attention of q (B, H, Tq, hd) over k, v (B, Hkv, Tk, hd), causal with the queries
/// aligned to the last Tq keys; Hkv divides H (key/value head h/(H/Hkv) serves query head h). -> (B, H, Tq, hd)
/// With `lengths` (one per sequence, Tq == Tk) sequence b holds lengths[b] real tokens followed by padding:
/// its attention costs lengths[b]^2 on CPU (RouteLab's fp32 kernel, which half-precision inputs reach up-cast) and on
/// a GPU in half precision (varlen_attention_active; B Tq Tk elsewhere: the kernels run the padded rectangle), and
/// the output rows of the padding are zero. `pairs`, when given, receives the (query, key) pairs per head the
/// kernel computed: what a trace prices (attention_core_flops).
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               double dropout = 0.0, bool training = false,
                               const std::vector<std::int64_t>& lengths = {}, double* pairs = nullptr);

/// Whether compacted sequences with queries on `device` of `type` and width `head_dim` are attended without their
/// padding on a GPU: flash attention over cumulative sequence lengths (LibTorch 2.x's at::_flash_attention_forward),
/// taken for bf16/fp16 on CUDA with head widths a multiple of 8 up to 256. ROUTELAB_VARLEN_ATTENTION=0 keeps them
/// padded (for comparisons); a GPU whose LibTorch lacks the kernel falls back to padded after the first failed call,
/// with a warning.
bool varlen_attention_active(const torch::Device& device, torch::ScalarType type, std::int64_t head_dim);

/// Causal attention within packed sequences: q (total, H, hd), k and v (total, Hkv, hd) with last dimensions
/// contiguous, sequence b holding lengths[b] consecutive rows (no padding). -> (total, H, hd). On a GPU in half
/// precision, flash attention reads the rows where they are (cumulative lengths, grouped heads natively); elsewhere
/// the rows are padded to the longest sequence for causal_attention and packed back. `pairs` as there.
torch::Tensor packed_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const std::vector<std::int64_t>& lengths, double dropout = 0.0,
                                      bool training = false, double* pairs = nullptr);

/// packed_causal_attention over runs listed on the device: `starts` (runs + 1) int32 cumulative lengths from 0 to
/// q's rows, no run longer than `longest`, empty runs allowed. Nothing waits for the device where flash attention
/// takes the runs as they are (a GPU in half precision); elsewhere the lengths are read back first.
torch::Tensor packed_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& starts, std::int64_t longest, double dropout = 0.0,
                                      bool training = false);

/// Whether a routed layer should keep its compacted rows packed (gathered without padding, projected, attended by
/// packed_causal_attention, put back) for projections reading `x` on its device and heads of `head_dim`: where the
/// attention takes them packed (varlen_attention_active for the type the projections write under autocast), while
/// a ForcePackedRows is alive on this thread, or everywhere with ROUTELAB_PACKED_ROWS=1 in the environment (a
/// diagnostic: on the CPU the packed path's attention pads internally).
bool packed_rows_active(const torch::Tensor& x, std::int64_t head_dim);

/// While alive, packed_rows_active is true on this thread: tests run the packed path on the CPU, where its attention
/// pads internally.
using ForcePackedRows = ScopedThreadFlag<struct ForcePackedRowsTag>;

/// y = x W^T + b through at::linear (one addmm for contiguous 2-D/3-D input), not the C++ frontend's
/// functional linear (matmul followed by a separate bias add in LibTorch 1.13).
torch::Tensor linear(const torch::Tensor& x, const torch::nn::Linear& layer);

/// Repeats key/value heads for grouped-query attention exactly as Llama's repeat_kv: (B, Hkv, T, hd) -> (B, H, T, hd).
torch::Tensor repeat_kv(const torch::Tensor& x, std::int64_t n_rep);

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(AttentionOptions options);
  void reset();

  /// x: (B, T, C), positions: (T) or (B, T) absolute positions -> (B, T, C). With `lengths`, x holds compacted
  /// sequences (lengths[b] real tokens, then padding; see causal_attention, which also fills `pairs`).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& positions,
                        const std::vector<std::int64_t>& lengths = {}, double* pairs = nullptr);

  struct QKV {
    torch::Tensor q;  // (B, H, T, hd), rotated
    torch::Tensor k;  // (B, Hkv, T, hd), rotated
    torch::Tensor v;  // (B, Hkv, T, hd)
  };
  QKV project(const torch::Tensor& x, const torch::Tensor& positions);
  /// (B, H, T, hd) -> (B, T, C) through W_O.
  torch::Tensor output(const torch::Tensor& heads);
  /// Heads laid out as rows (..., C) through W_O, priced to the attention part as output() (a routed model's
  /// gathered rows).
  torch::Tensor output_rows(const torch::Tensor& rows);
  /// Incremental step: projects the new rows x (B, n, C) at their absolute `positions` (n) or (B, n), appends
  /// their keys and values to `cache` (only the `keep` (B, n) rows when given; `hidden` rows stored but masked),
  /// and attends each query to the cached entries at positions <= its own. -> (B, n, C) after W_O.
  torch::Tensor forward_cached(const torch::Tensor& x, const torch::Tensor& positions, KVCache& cache,
                               const torch::Tensor& keep = {}, const torch::Tensor& hidden = {});
  /// forward_cached() before W_O: the attended heads (B, H, n, hd).
  torch::Tensor cached_heads(const torch::Tensor& x, const torch::Tensor& positions, KVCache& cache,
                             const torch::Tensor& keep = {}, const torch::Tensor& hidden = {});
  /// forward() of routed rows packed one sequence after another: x (N, C) at absolute `positions` (N), attended in the
  /// runs `starts` lists on the device (packed_causal_attention; a sized compaction's: compact_sized) -> (N, C).
  torch::Tensor forward_packed(const torch::Tensor& x, const torch::Tensor& positions, const torch::Tensor& starts,
                               std::int64_t longest);
  /// W_O(repeat_kv(W_V x)): the update a token gets when it attends only to itself (DTRNet's bypass path).
  torch::Tensor value_only(const torch::Tensor& x);

  std::int64_t head_dim() const { return options.n_embd() / options.n_head(); }
  std::int64_t kv_heads() const { return options.n_kv_head() > 0 ? options.n_kv_head() : options.n_head(); }

  AttentionOptions options;
  torch::nn::Linear qkv{nullptr};   // C -> (H + 2 Hkv) hd
  torch::nn::Linear proj{nullptr};  // C -> C (W_O)
  Rope rope;
};
TORCH_MODULE(CausalSelfAttention);

}  // namespace routelab
