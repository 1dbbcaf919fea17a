// Causal attention. On CPU a fused autograd function parallelises over (batch, head) itself and calls one
// single-threaded BLAS GEMM per head product on strided rows (no permute copies, no BLAS fork/join per tiny GEMM,
// no ATen dispatch per head), and the causal softmax in its own AVX-512 row loops over each row's visible keys
// (cpu_softmax.h; elsewhere one ATen softmax call per block for all its heads); in fp32, which bf16 and fp16 inputs
// reach up-cast. Elsewhere (and with attention dropout) LibTorch 2.x's
// scaled_dot_product_attention, or baddbmm into a cached additive mask on 1.13.
#include "core/models/blocks/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <torch/version.h>

#include "core/inference/kv_cache.h"
#include "core/models/blocks/cpu_attention_kernel.h"
#include "core/models/blocks/cpu_softmax.h"
#include "core/models/blocks/part_scope.h"
#include "core/models/blocks/varlen_packing.h"
#include "core/util/device.h"
#include "core/util/optional_kernel.h"
#include "core/util/process.h"

namespace routelab {
namespace {

/// (Tq, Tk) additive mask: 0 where key j <= query i + (Tk - Tq), -inf elsewhere; cached per shape/device/dtype.
torch::Tensor causal_bias(std::int64_t tq, std::int64_t tk, const torch::TensorOptions& opts) {
  static std::mutex mutex;
  static std::map<std::tuple<std::int64_t, std::int64_t, int, int, int>, torch::Tensor> cache;
  const auto key = std::make_tuple(tq, tk, static_cast<int>(opts.device().type()), opts.device().index(),
                                   static_cast<int>(c10::typeMetaToScalarType(opts.dtype())));
  std::lock_guard lock(mutex);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  auto mask = torch::full({tq, tk}, -std::numeric_limits<float>::infinity(), opts).triu(tk - tq + 1);
  if (cache.size() > 64) cache.clear();
  cache.emplace(key, mask);
  return mask;
}

#ifdef ROUTELAB_DIRECT_BLAS
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc);
#endif

}  // namespace

namespace cpu_attention {

Mat head(const torch::Tensor& t, std::int64_t b, std::int64_t h, std::int64_t n) {
  return {t.data_ptr<float>() + b * t.stride(0) + h * t.stride(1), n, t.size(3), t.stride(2)};
}

void gemm(bool ta, bool tb, const Mat& A, const Mat& B, Mat C, float alpha, float beta) {
#ifdef ROUTELAB_DIRECT_BLAS
  const auto k = ta ? A.rows : A.cols;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a row-major matrix is its column-major
  // transpose: pass B first, the transposition flags as they are.
  const char a_flag = tb ? 'T' : 'N', b_flag = ta ? 'T' : 'N';
  const int m = static_cast<int>(C.cols), n = static_cast<int>(C.rows), kk = static_cast<int>(k);
  const int lda = static_cast<int>(B.ld), ldb = static_cast<int>(A.ld), ldc = static_cast<int>(C.ld);
  sgemm_(&a_flag, &b_flag, &m, &n, &kk, &alpha, B.data, &lda, A.data, &ldb, &beta, C.data, &ldc);
#else
  const auto opts = torch::TensorOptions().dtype(torch::kFloat);
  const auto view = [&](const Mat& M) { return torch::from_blob(M.data, {M.rows, M.cols}, {M.ld, 1}, opts); };
  auto c = view(C);
  at::addmm_out(c, c, ta ? view(A).t() : view(A), tb ? view(B).t() : view(B), beta, alpha);
#endif
}

Mat rows(const torch::Tensor& t, std::int64_t b, std::int64_t h, std::int64_t start, std::int64_t count) {
  auto m = head(t, b, h, count);
  m.data += start * t.stride(2);
  return m;
}

bool upcast_enabled() {
  static const bool off = switched_off_in_environment("ROUTELAB_CPU_ATTENTION_UPCAST");
  return !off;
}

bool causal_blocks_enabled() {
  static const bool off = switched_off_in_environment("ROUTELAB_CAUSAL_BLOCKS");
  return !off;
}

void mask_causal(const Mat& m, std::int64_t start) {
  const float inf = -std::numeric_limits<float>::infinity();
  for (std::int64_t a = 0; a < m.rows && start + a + 1 < m.cols; ++a)
    std::fill(m.data + a * m.ld + start + a + 1, m.data + a * m.ld + m.cols, inf);
}

std::int64_t softmax_group(std::int64_t H, std::int64_t T) {
  return H * T * T <= (std::int64_t{1} << 22) ? H : 1;
}

void block_scores(const torch::Tensor& q, const torch::Tensor& k, std::int64_t b, std::int64_t h0, std::int64_t G,
                  std::int64_t s, std::int64_t e, float scale, const torch::Tensor& scores, bool mask) {
  const auto r = e - s;
  for (std::int64_t g = 0; g < G; ++g) {
    const Mat sc{scores.data_ptr<float>() + g * r * e, r, e, e};
    gemm(false, true, rows(q, b, h0 + g, s, r), head(k, b, h0 + g, e), sc, scale);  // S = scale Q K^T
    if (mask) mask_causal(sc, s);
  }
}

void block_softmax(const torch::Tensor& q, const torch::Tensor& k, std::int64_t b, std::int64_t h0, std::int64_t G,
                   std::int64_t s, std::int64_t e, float scale, const torch::Tensor& scores, torch::Tensor probs,
                   bool fused) {
  const auto r = e - s;
  block_scores(q, k, b, h0, G, s, e, scale, scores, /*mask=*/!fused);
  if (!fused) {
    at::_softmax_out(probs, scores.narrow(0, 0, G * r * e).view({G, r, e}), -1, false);
    return;
  }
  for (std::int64_t g = 0; g < G; ++g)
    causal_softmax(scores.data_ptr<float>() + g * r * e, probs.data_ptr<float>() + g * r * e, r, e, s);
}

std::int64_t kept_probabilities_limit() {
  static const std::int64_t bytes = [] {
    const char* text = std::getenv("ROUTELAB_CPU_ATTENTION_KEEP_MB");
    if (text == nullptr || *text == '\0') return std::int64_t{256} << 20;
    try {
      return std::int64_t{std::stoll(text)} << 20;
    } catch (const std::exception&) {
      throw std::invalid_argument(std::string("ROUTELAB_CPU_ATTENTION_KEEP_MB: not a number of MiB: '") + text + "'");
    }
  }();
  return bytes;
}

double kept_probabilities_bytes(std::int64_t B, std::int64_t H, std::int64_t T) {
  return static_cast<double>(B * H) * static_cast<double>(CausalBlocks(T, T).packed()) * sizeof(float);
}

bool recompute_probabilities(double kept_bytes) {
  return RecomputeCpuAttention::active() || kept_bytes > static_cast<double>(kept_probabilities_limit());
}

void probabilities_from_lse(const torch::Tensor& q, const torch::Tensor& k, std::int64_t b, std::int64_t h0,
                            std::int64_t G, std::int64_t s, std::int64_t e, float scale, const torch::Tensor& scores,
                            const torch::Tensor& lse, bool fill, torch::Tensor probs, bool fused) {
  const auto r = e - s;
  block_scores(q, k, b, h0, G, s, e, scale, scores, /*mask=*/!fused);
  if (!fused) {
    const auto sc = scores.narrow(0, 0, G * r * e).view({G, r, e});
    if (fill) lse.copy_(at::logsumexp(sc, {-1}));
    at::sub_out(probs, sc, lse.unsqueeze(-1));
    probs.exp_();  // exp(-inf) = 0 on the future keys
    return;
  }
  for (std::int64_t g = 0; g < G; ++g) {
    const auto* sc = scores.data_ptr<float>() + g * r * e;
    auto* p = probs.data_ptr<float>() + g * r * e;
    auto* l = lse.data_ptr<float>() + g * lse.stride(0);
    if (fill)
      causal_softmax(sc, p, r, e, s, l, lse.stride(1));
    else
      causal_exp(sc, p, r, e, s, l, lse.stride(1));
  }
}

void block_softmax_backward(const torch::Tensor& d_probs, const torch::Tensor& probs, torch::Tensor d_scores,
                            std::int64_t s, bool fused) {
  if (!fused) {
    at::_softmax_backward_data_out(d_scores, d_probs, probs, -1, probs.scalar_type());  // dS = P (dP - rowsum(dP P))
    return;
  }
  const auto G = probs.size(0), r = probs.size(1), e = probs.size(2);
  for (std::int64_t g = 0; g < G; ++g)
    causal_softmax_backward(d_probs.data_ptr<float>() + g * r * e, probs.data_ptr<float>() + g * r * e,
                            d_scores.data_ptr<float>() + g * r * e, r, e, s);
}

}  // namespace cpu_attention

namespace {

using namespace cpu_attention;

/// sum_b lengths[b]^2, each length T where `lengths` is empty (B sequences): the pairs an unpadded kernel computes.
double squared_lengths(const std::vector<std::int64_t>& lengths, std::int64_t B, std::int64_t T) {
  if (lengths.empty()) return static_cast<double>(B) * static_cast<double>(T) * static_cast<double>(T);
  double pairs = 0;
  for (const auto n : lengths) pairs += static_cast<double>(n) * static_cast<double>(n);
  return pairs;
}

/// What a CPU attention call holds for its backward (RecomputeCpuAttention in attention.h).
enum class Held {
  nothing,        ///< no backward: each thread's probabilities one block at a time
  probabilities,  ///< every block's, (B H P) floats laid out as CausalBlocks::offset
  log_sum_exp,    ///< each row's, (B, H, T): the backward recomputes the probabilities
};

struct CpuAttentionForward {
  torch::Tensor out;   ///< (B, H, T, hd) over a (B, T, H, hd) buffer
  torch::Tensor held;  ///< the probabilities or the log-sum-exps, as `Held` says; undefined for nothing
};

/// The forward of causal attention on CPU (CpuCausalAttention below), holding `held` for a backward.
CpuAttentionForward cpu_attention_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                          const std::vector<std::int64_t>& lengths, Held held) {
  const auto B = q.size(0), H = q.size(1), T = q.size(2), hd = q.size(3);
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  const bool varlen = !lengths.empty();
  // The products bypass ATen's matmul ops, so the kernel is one profiler event carrying its multiply-adds (Q K^T
  // and P V, n^2 hd each per head: the priced square) for whoever counts work (core/cost/flop_counter.h reads
  // kCpuAttentionEvent); the ATen ops it runs inside are nested in it.
  const double sum_sq = squared_lengths(lengths, B, T);
  const std::vector<c10::IValue> work = {c10::IValue(2.0 * static_cast<double>(H * hd) * sum_sq)};
  RECORD_FUNCTION(kCpuAttentionEvent, work);
  // Head group (b, h0)'s probabilities start at (b H + h0) P: block i of its G heads is (G, rows, end(i)) at
  // G offset(i) from there (the layout the per-block softmax reads).
  const auto P = CausalBlocks(T, T).packed();
  CpuAttentionForward f;
  if (held == Held::probabilities) f.held = torch::empty({B * H * P}, q.options());
  if (held == Held::log_sum_exp) f.held = torch::empty({B, H, T}, q.options());
  f.out = (varlen ? torch::zeros({B, T, H, hd}, q.options()) : torch::empty({B, T, H, hd}, q.options()))
              .transpose(1, 2);  // (B, H, T, hd) over a (B, T, H, hd) buffer
  const auto G = softmax_group(H, T);
  const bool fused = fused_softmax_active();
  parallel_for_as_caller(0, B * (H / G), 1, [&](std::int64_t begin, std::int64_t end) {
    const auto room = G * CausalBlocks(T, T).block * T;  // one block's, all G heads
    auto scores = torch::empty({room}, q.options());
    const auto block_probs = held == Held::probabilities ? torch::Tensor() : torch::empty({room}, q.options());
    for (std::int64_t i = begin; i < end; ++i) {
      const auto b = i / (H / G), h0 = (i % (H / G)) * G;
      const CausalBlocks blocks(varlen ? lengths[b] : T, T);
      const auto group = (b * H + h0) * P;
      for (std::int64_t x = 0; x < blocks.count(); ++x) {
        const auto s = blocks.start(x), e = blocks.end(x), r = e - s;
        auto p = held == Held::probabilities ? f.held.narrow(0, group + G * blocks.offset(x), G * r * e)
                                             : block_probs.narrow(0, 0, G * r * e);
        p = p.view({G, r, e});
        if (held == Held::log_sum_exp)
          probabilities_from_lse(q, k, b, h0, G, s, e, scale, scores, f.held[b].narrow(0, h0, G).narrow(1, s, r),
                                 /*fill=*/true, p, fused);
        else
          block_softmax(q, k, b, h0, G, s, e, scale, scores, p, fused);
        for (std::int64_t g = 0; g < G; ++g)  // O = P V, written into the (B, T, H, hd) buffer
          gemm(false, false, {p.data_ptr<float>() + g * r * e, r, e, e}, head(v, b, h0 + g, e),
               rows(f.out, b, h0 + g, s, r), 1.0f);
      }
    }
  });
  return f;
}

/// Causal attention on CPU for q, k, v of shape (B, H, T, hd) with any strides (inner stride 1). Sequence b
/// uses only its first lengths[b] positions (all T when `lengths` is empty): a (len, len) problem per head, so
/// compacted routed sequences cost sum_b len_b^2, and rows past len_b are zero. Query blocks (CausalBlocks) leave
/// out the keys past each block's last row, as flash attention's causal kernels do; the work is priced, as theirs
/// is, at the full square. The output is laid out (B, T, H, hd) so the output projection reads it without a copy;
/// the backward gets the computed blocks' probabilities, or recomputes them from each row's log-sum-exp
/// (RecomputeCpuAttention in attention.h says when).
class CpuCausalAttention : public torch::autograd::Function<CpuCausalAttention> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, std::vector<std::int64_t> lengths) {
    const bool recompute = recompute_probabilities(kept_probabilities_bytes(q.size(0), q.size(1), q.size(2)));
    auto f = cpu_attention_forward(q, k, v, lengths, recompute ? Held::log_sum_exp : Held::probabilities);
    ctx->save_for_backward({q, k, v, f.held});
    ctx->saved_data["lengths"] = lengths;
    ctx->saved_data["recompute"] = recompute;
    return f.out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &held = saved[3];
    const auto lengths = ctx->saved_data["lengths"].toIntVector();
    const bool recompute = ctx->saved_data["recompute"].toBool();
    const bool varlen = !lengths.empty();
    const auto d_out = grads[0].stride(3) == 1 ? grads[0] : grads[0].contiguous();  // (B, H, T, hd)
    const auto B = q.size(0), H = q.size(1), T = q.size(2), hd = q.size(3);
    const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
    RECORD_FUNCTION(kCpuAttentionBackwardEvent, std::vector<c10::IValue>{});  // its ATen ops nest inside
    // Gradients in (B, T, H, hd) buffers: the backward of the head split reads them without a transpose copy.
    const auto make = [&] {
      return (varlen ? torch::zeros({B, T, H, hd}, q.options()) : torch::empty({B, T, H, hd}, q.options()))
          .transpose(1, 2);
    };
    auto dq = make(), dk = make(), dv = make();
    const auto P = CausalBlocks(T, T).packed();
    const auto G = softmax_group(H, T);
    const bool fused = fused_softmax_active();
    parallel_for_as_caller(0, B * (H / G), 1, [&](std::int64_t begin, std::int64_t end) {
      const auto scratch = G * CausalBlocks(T, T).block * T;
      auto d_probs = torch::empty({scratch}, q.options());
      auto d_scores = torch::empty({scratch}, q.options());
      const auto block_probs = recompute ? torch::empty({scratch}, q.options()) : torch::Tensor();
      for (std::int64_t i = begin; i < end; ++i) {
        const auto b = i / (H / G), h0 = (i % (H / G)) * G;
        const CausalBlocks blocks(varlen ? lengths[b] : T, T);
        const auto group = (b * H + h0) * P;
        // The last block first: it reaches every key, so its dK and dV products write rows [0, n) and the earlier
        // blocks add to the rows they reach.
        for (auto x = blocks.count() - 1; x >= 0; --x) {
          const auto s = blocks.start(x), e = blocks.end(x), r = e - s;
          const float accumulate = x == blocks.count() - 1 ? 0.0f : 1.0f;
          auto p = recompute ? block_probs.narrow(0, 0, G * r * e).view({G, r, e})
                             : held.narrow(0, group + G * blocks.offset(x), G * r * e).view({G, r, e});
          if (recompute)  // the forward's probabilities again; d_scores is free until dS below
            probabilities_from_lse(q, k, b, h0, G, s, e, scale, d_scores, held[b].narrow(0, h0, G).narrow(1, s, r),
                                   /*fill=*/false, p, fused);
          for (std::int64_t g = 0; g < G; ++g) {
            const Mat pg{p.data_ptr<float>() + g * r * e, r, e, e};
            const auto gi = rows(d_out, b, h0 + g, s, r);
            gemm(true, false, pg, gi, head(dv, b, h0 + g, e), 1.0f, accumulate);                  // dV += P^T dO
            gemm(false, true, gi, head(v, b, h0 + g, e), {d_probs.data_ptr<float>() + g * r * e, r, e, e}, 1.0f);  // dP = dO V^T
          }
          auto ds = d_scores.narrow(0, 0, G * r * e).view({G, r, e});
          block_softmax_backward(d_probs.narrow(0, 0, G * r * e).view({G, r, e}), p, ds, s, fused);
          for (std::int64_t g = 0; g < G; ++g) {
            const Mat dsg{ds.data_ptr<float>() + g * r * e, r, e, e};
            gemm(false, false, dsg, head(k, b, h0 + g, e), rows(dq, b, h0 + g, s, r), scale);       // dQ = scale dS K
            gemm(true, false, dsg, rows(q, b, h0 + g, s, r), head(dk, b, h0 + g, e), scale, accumulate);  // dK += scale dS^T Q
          }
        }
      }
    });
    return {dq, dk, dv, torch::Tensor()};
  }
};

}  // namespace

int cpu_attention_loop_threads() {
  std::atomic<int> seen{1};
  const auto n = std::int64_t{4} * at::get_num_threads();
  parallel_for_as_caller(0, n, 1, [&](std::int64_t, std::int64_t) {
    int current = seen.load();
    const int mine = at::get_thread_num() + 1;
    while (mine > current && !seen.compare_exchange_weak(current, mine)) {
    }
  });
  return seen.load();
}

torch::Tensor linear(const torch::Tensor& x, const torch::nn::Linear& layer) {
  return at::linear(x, layer->weight, layer->bias.defined() ? c10::optional<at::Tensor>(layer->bias) : c10::nullopt);
}

torch::Tensor repeat_kv(const torch::Tensor& x, std::int64_t n_rep) {
  if (n_rep == 1) return x;
  const auto B = x.size(0), Hkv = x.size(1), T = x.size(2), hd = x.size(3);
  return x.unsqueeze(2).expand({B, Hkv, n_rep, T, hd}).reshape({B, Hkv * n_rep, T, hd});
}

namespace {

/// Zeroes rows t >= lengths[b] of a (B, H, T, hd) attention output (padding of compacted sequences).
torch::Tensor zero_padding(const torch::Tensor& out, const std::vector<std::int64_t>& lengths) {
  const auto B = out.size(0), T = out.size(2);
  // Staged through pinned memory: a plain copy to a GPU would wait for every kernel queued before it.
  const auto len =
      copy_to_device(torch::tensor(lengths, torch::TensorOptions().dtype(torch::kLong)), out.device()).view({B, 1, 1, 1});
  const auto keep = torch::arange(T, len.options()).view({1, 1, T, 1}) < len;  // (B, 1, T, 1)
  return out * keep.to(out.scalar_type());
}

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
/// While one is alive, scaled_dot_product_attention leaves cuDNN's attention out (flash or memory-efficient
/// attention run instead): cuDNN builds an execution plan per new sequence length (127 ms a call on an H100), and
/// compacted routed sequences change length from step to step. The backward follows the forward's choice.
/// LibTorch's switch is process-wide, so the guards of every thread share one count: the first turns cuDNN off, the
/// last restores the user's setting, and no compacted call sees it turned back on by another thread's guard. A
/// dense call on another thread meanwhile runs flash or memory-efficient attention too (the same result, to rounding).
class WithoutCuDnnAttention {
 public:
  explicit WithoutCuDnnAttention(bool active) : active_(active) {
    if (!active_) return;
    auto& shared = holders();
    std::lock_guard lock(shared.mutex);
    if (shared.count++ == 0) {
      shared.restore = at::globalContext().userEnabledCuDNNSDP();
      if (shared.restore) at::globalContext().setSDPUseCuDNN(false);
    }
  }
  ~WithoutCuDnnAttention() {
    if (!active_) return;
    auto& shared = holders();
    std::lock_guard lock(shared.mutex);
    if (--shared.count == 0 && shared.restore) at::globalContext().setSDPUseCuDNN(true);
  }
  WithoutCuDnnAttention(const WithoutCuDnnAttention&) = delete;
  WithoutCuDnnAttention& operator=(const WithoutCuDnnAttention&) = delete;

 private:
  struct Holders {
    std::mutex mutex;
    int count = 0;         ///< guards alive, every thread
    bool restore = false;  ///< cuDNN attention was on when the first of them started
  };
  static Holders& holders() {
    static Holders shared;
    return shared;
  }
  bool active_;
};

/// Compacted sequences attended without their padding (varlen_packing.h): flash attention over the cumulative
/// lengths of their real rows, grouped key/value heads served natively (without repeat_kv's copies). -> (B, H, K, hd)
torch::Tensor flash_varlen_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const std::vector<std::int64_t>& lengths, double dropout) {
  const auto packing = varlen_packing(lengths, q.size(2), q.device());
  const auto packed = std::get<0>(at::_flash_attention_forward(
      pack_rows(q, packing), pack_rows(k, packing), pack_rows(v, packing), packing.starts, packing.starts,
      packing.longest, packing.longest, dropout, /*is_causal=*/true, /*return_debug_mask=*/false));  // (total, H, hd)
  return unpack_rows(packed, packing);
}

/// Given up after a failed call (a GPU without flash attention's kernels): compacted sequences run padded then.
OptionalKernel& varlen_kernel() {
  static OptionalKernel kernel("ROUTELAB_VARLEN_ATTENTION", "variable-length flash attention",
                               "compacted sequences run padded");
  return kernel;
}

#endif

}  // namespace

bool varlen_attention_active(const torch::Device& device, torch::ScalarType type, std::int64_t head_dim) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  return device.is_cuda() && varlen_kernel().usable() &&
         (type == torch::kBFloat16 || type == torch::kHalf) && head_dim % 8 == 0 && head_dim <= 256;
#else
  return false;
#endif
}

bool packed_rows_active(const torch::Tensor& x, std::int64_t head_dim) {
  static const bool forced = switched_on_in_environment("ROUTELAB_PACKED_ROWS");  // the packed path everywhere
  if (forced || ForcePackedRows::active()) return true;
  auto type = x.scalar_type();
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  if (x.is_cuda() && at::autocast::is_autocast_enabled(at::kCUDA)) type = at::autocast::get_autocast_dtype(at::kCUDA);
#endif
  return varlen_attention_active(x.device(), type, head_dim);
}

torch::Tensor packed_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const std::vector<std::int64_t>& lengths, double dropout, bool training,
                                      double* pairs) {
  ROUTELAB_PART("attention");
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  if (varlen_attention_active(q.device(), q.scalar_type(), q.size(2))) {
    const bool dropping = training && dropout > 0;
    const auto attend = [&] {
      const auto packing = varlen_packing(lengths, 0, q.device(), /*with_rows=*/false);
      return std::get<0>(at::_flash_attention_forward(q, k, v, packing.starts, packing.starts, packing.longest,
                                                      packing.longest, dropping ? dropout : 0.0, /*is_causal=*/true,
                                                      /*return_debug_mask=*/false));
    };
    if (auto out = varlen_kernel().attempt(attend)) {
      if (pairs) *pairs = squared_lengths(lengths, static_cast<std::int64_t>(lengths.size()), 0);
      return *out;
    }
  }
#endif
  // Elsewhere: padded to the longest sequence (the padding after every real row), attended, packed back.
  const auto K = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  const auto packing = varlen_packing(lengths, K, q.device());
  const auto padded = [&](const torch::Tensor& x) { return unpack_rows(x, packing); };  // (B, heads, K, hd)
  return pack_rows(causal_attention(padded(q), padded(k), padded(v), dropout, training, lengths, pairs),
                   packing);  // (total, H, hd)
}

torch::Tensor packed_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& starts, std::int64_t longest, double dropout,
                                      bool training) {
  ROUTELAB_PART("attention");
  TORCH_CHECK(starts.dim() == 1 && starts.size(0) >= 2 && starts.scalar_type() == torch::kInt,
              "packed_causal_attention: starts must be (runs + 1) int32 cumulative lengths");
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  if (varlen_attention_active(q.device(), q.scalar_type(), q.size(2))) {
    const bool dropping = training && dropout > 0;
    const auto attend = [&] {
      return std::get<0>(at::_flash_attention_forward(q, k, v, starts, starts, longest, longest,
                                                      dropping ? dropout : 0.0, /*is_causal=*/true,
                                                      /*return_debug_mask=*/false));
    };
    if (auto out = varlen_kernel().attempt(attend)) return *out;
  }
#endif
  // Elsewhere the runs are read back and attended as lengths: on the CPU, where the copy waits for nothing (a GPU takes
  // packed rows only where its varlen kernel runs: packed_rows_active), so not a to_host read.
  const auto ends = starts.to(torch::kCPU, torch::kLong).contiguous();
  const auto* e = ends.data_ptr<std::int64_t>();
  std::vector<std::int64_t> lengths;
  for (std::int64_t i = 1; i < ends.size(0); ++i) lengths.push_back(e[i] - e[i - 1]);
  TORCH_CHECK(e[ends.size(0) - 1] == q.size(0), "packed_causal_attention: the runs cover ", e[ends.size(0) - 1],
              " rows of ", q.size(0));
  return packed_causal_attention(q, k, v, lengths, dropout, training);
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               double dropout, bool training, const std::vector<std::int64_t>& lengths,
                               double* pairs) {
  ROUTELAB_PART("attention");
  const auto B = q.size(0), H = q.size(1), Tq = q.size(2), hd = q.size(3), Tk = k.size(2);
  const auto kf = repeat_kv(k, H / k.size(1));
  const auto vf = repeat_kv(v, H / v.size(1));
  const bool dropping = training && dropout > 0;
  const auto type = q.scalar_type();
  // Compacted sequences that all fill the padded length (MoD's top-k in training) have no padding to skip or zero:
  // they take the plain fused path, with cuDNN's attention where LibTorch picks it (one length, one plan).
  const bool ragged =
      !lengths.empty() && std::any_of(lengths.begin(), lengths.end(), [&](std::int64_t n) { return n != Tq; });
  if (q.device().is_cpu() && Tq == Tk && !dropping && q.stride(3) == 1 && kf.stride(3) == 1 && vf.stride(3) == 1 &&
      kf.scalar_type() == type && vf.scalar_type() == type &&
      (type == torch::kFloat || ((type == torch::kBFloat16 || type == torch::kHalf) && upcast_enabled()))) {
    if (pairs) *pairs = squared_lengths(lengths, B, Tq);
    // Half-precision inputs go through the fp32 kernel, up-cast (exact) and the result rounded back: what the fused
    // kernels do inside (fp32 scores, softmax and accumulation). On CPUs without AMX a bf16 GEMM of head size runs
    // slower than an fp32 one, and LibTorch 2.11's CPU flash attention backward took 10x its forward (B 64, T 128).
    const auto fp32 = [](const torch::Tensor& t) { return t.to(torch::kFloat); };
    const bool backward =
        torch::GradMode::is_enabled() && (q.requires_grad() || kf.requires_grad() || vf.requires_grad());
    const auto out = backward ? CpuCausalAttention::apply(fp32(q), fp32(kf), fp32(vf), lengths)
                              : cpu_attention_forward(fp32(q), fp32(kf), fp32(vf), lengths, Held::nothing).out;
    return out.to(type);
  }
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  if (ragged && Tq == Tk && varlen_attention_active(q.device(), q.scalar_type(), hd)) {
    const auto attend = [&] { return flash_varlen_attention(q, k, v, lengths, dropping ? dropout : 0.0); };
    if (auto out = varlen_kernel().attempt(attend)) {
      if (pairs) *pairs = squared_lengths(lengths, B, Tq);
      return *out;
    }
  }
#endif
  if (pairs) *pairs = static_cast<double>(B) * static_cast<double>(Tq) * static_cast<double>(Tk);
  // Elsewhere compacted sequences run padded to the longest one: padding sits after every real token, so the
  // causal mask already hides it from real queries, and the padded rows are zeroed.
  torch::Tensor out;
#if TORCH_VERSION_MAJOR >= 2
  if (Tq == Tk) {
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 3
    const WithoutCuDnnAttention backend(q.is_cuda() && ragged);
#endif
    out = at::scaled_dot_product_attention(q, kf, vf, {}, dropping ? dropout : 0.0, /*is_causal=*/true);
  }
#endif
  if (!out.defined()) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    const auto q3 = q.reshape({B * H, Tq, hd});
    const auto k3 = kf.reshape({B * H, Tk, hd});
    const auto v3 = vf.reshape({B * H, Tk, hd});
    // scores = mask + scale * q k^T in one kernel: (B*H, Tq, Tk)
    auto scores =
        torch::baddbmm(causal_bias(Tq, Tk, q.options()), q3, k3.transpose(1, 2), /*beta=*/1.0, /*alpha=*/scale);
    auto probs = torch::softmax(scores, -1);
    if (dropping) probs = torch::dropout(probs, dropout, true);
    out = torch::bmm(probs, v3).view({B, H, Tq, hd});
  }
  return ragged ? zero_padding(out, lengths) : out;
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(AttentionOptions options_) : options(std::move(options_)) {
  reset();
}

void CausalSelfAttentionImpl::reset() {
  const auto C = options.n_embd(), hd = head_dim();
  qkv = register_module("qkv", torch::nn::Linear(
                                   torch::nn::LinearOptions(C, (options.n_head() + 2 * kv_heads()) * hd).bias(options.bias())));
  proj = register_module("proj", torch::nn::Linear(torch::nn::LinearOptions(C, C).bias(options.bias())));
  if (options.rope())
    rope = Rope(hd, options.max_positions(), options.rope_theta(), options.rope_scaling(), options.rope_factor(),
                options.rope_original_context());
}

CausalSelfAttentionImpl::QKV CausalSelfAttentionImpl::project(const torch::Tensor& x, const torch::Tensor& positions) {
  ROUTELAB_PART("attention");
  const auto B = x.size(0), T = x.size(1), H = options.n_head(), Hkv = kv_heads(), hd = head_dim();
  // split (not narrow): its backward writes the three gradients into one buffer instead of three zero-filled ones.
  const auto parts = linear(x, qkv).split_with_sizes({H * hd, Hkv * hd, Hkv * hd}, -1);  // (B, T, (H + 2Hkv) hd)
  auto q = parts[0].view({B, T, H, hd}).transpose(1, 2);    // (B, H, T, hd)
  auto k = parts[1].view({B, T, Hkv, hd}).transpose(1, 2);  // (B, Hkv, T, hd)
  auto v = parts[2].view({B, T, Hkv, hd}).transpose(1, 2);
  if (rope.defined()) std::tie(q, k) = rope.apply(q, k, positions);
  return {q, k, v};
}

torch::Tensor CausalSelfAttentionImpl::output(const torch::Tensor& heads) {
  const auto B = heads.size(0), T = heads.size(2);
  return output_rows(heads.transpose(1, 2).reshape({B, T, options.n_embd()}));  // (B, T, C)
}

torch::Tensor CausalSelfAttentionImpl::output_rows(const torch::Tensor& rows) {
  ROUTELAB_PART("attention");
  return linear(rows, proj);
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& positions,
                                              const std::vector<std::int64_t>& lengths, double* pairs) {
  ROUTELAB_PART("attention");
  const auto [q, k, v] = project(x, positions);
  return output(causal_attention(q, k, v, options.dropout(), is_training(), lengths, pairs));
}

torch::Tensor CausalSelfAttentionImpl::forward_packed(const torch::Tensor& x, const torch::Tensor& positions,
                                                     const torch::Tensor& starts, std::int64_t longest) {
  ROUTELAB_PART("attention");
  const auto N = x.size(0), H = options.n_head(), Hkv = kv_heads(), hd = head_dim();
  const auto parts = linear(x, qkv).split_with_sizes({H * hd, Hkv * hd, Hkv * hd}, -1);  // (N, (H + 2Hkv) hd)
  // Each row a sequence of one token to the rotary embedding ((N, heads, 1, hd) at positions (N, 1)), whose
  // contiguous output is the (N, heads, hd) layout of packed attention.
  auto q = parts[0].view({N, H, 1, hd});
  auto k = parts[1].view({N, Hkv, 1, hd});
  if (rope.defined()) std::tie(q, k) = rope.apply(q, k, positions.view({N, 1}));
  const auto heads = packed_causal_attention(q.view({N, H, hd}), k.view({N, Hkv, hd}), parts[2].view({N, Hkv, hd}),
                                             starts, longest, options.dropout(), is_training());
  return linear(heads.reshape({N, H * hd}), proj);  // (N, C)
}

torch::Tensor CausalSelfAttentionImpl::cached_heads(const torch::Tensor& x, const torch::Tensor& positions,
                                                   KVCache& cache, const torch::Tensor& keep,
                                                   const torch::Tensor& hidden) {
  ROUTELAB_PART("attention");
  const auto [q, k, v] = project(x, positions);  // rotated at the absolute positions
  cache.append(k, v, positions, keep, 0, hidden);
  return cache.attend(q, positions);  // (B, H, n, hd)
}

torch::Tensor CausalSelfAttentionImpl::forward_cached(const torch::Tensor& x, const torch::Tensor& positions,
                                                     KVCache& cache, const torch::Tensor& keep,
                                                     const torch::Tensor& hidden) {
  return output(cached_heads(x, positions, cache, keep, hidden));  // (B, n, C)
}

torch::Tensor CausalSelfAttentionImpl::value_only(const torch::Tensor& x) {
  ROUTELAB_PART("attention");
  const auto B = x.size(0), T = x.size(1), H = options.n_head(), Hkv = kv_heads(), hd = head_dim();
  const auto w_v = qkv->weight.narrow(0, (H + Hkv) * hd, Hkv * hd);                     // (Hkv hd, C)
  const auto b_v = qkv->bias.defined() ? qkv->bias.narrow(0, (H + Hkv) * hd, Hkv * hd) : torch::Tensor();
  const auto v = torch::nn::functional::linear(x, w_v, b_v).view({B, T, Hkv, hd}).transpose(1, 2);
  return output(repeat_kv(v, H / Hkv));
}

}  // namespace routelab
