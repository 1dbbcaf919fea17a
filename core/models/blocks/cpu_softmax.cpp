// The causal row softmax of the CPU attention kernels: AVX-512 row loops, functions compiled for AVX-512 alone and
// called only where the CPU has it (elsewhere the kernels keep ATen's softmax).
#include "core/models/blocks/cpu_softmax.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <stdexcept>

#if defined(__x86_64__)
#include <immintrin.h>
#define ROUTELAB_AVX512_SOFTMAX 1
#endif

#include "core/util/process.h"

namespace routelab::cpu_attention {
namespace {

std::atomic<int> aten_softmax_scopes{0};

bool cpu_has_avx512f() {
#if defined(ROUTELAB_AVX512_SOFTMAX)
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
#else
  return false;
#endif
}

void require_avx512f() {
  if (!cpu_has_avx512f())
    throw std::logic_error("the CPU attention's row softmax needs AVX-512 (called without fused_softmax_active())");
}

#if defined(ROUTELAB_AVX512_SOFTMAX)
#define ROUTELAB_AVX512 __attribute__((target("avx512f")))

/// exp of 16 floats: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by its Taylor polynomial to r^6 (relative error about
/// 2e-7), times 2^n by scalef; below -104 the result is 0 (float's smallest subnormal is e^-103.3), NaN stays NaN.
ROUTELAB_AVX512 inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);  // the second operand where either is NaN: NaN passes
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);  // ln2 in two parts: r exact to a float
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

/// The sum and the maximum of 16 floats (GCC 12's _mm512_reduce_* warn of their undefined operands).
ROUTELAB_AVX512 inline float sum16(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float sum = 0;
  for (const float x : lanes) sum += x;
  return sum;
}

ROUTELAB_AVX512 inline float max16(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  return *std::max_element(lanes, lanes + 16);
}

ROUTELAB_AVX512 inline __mmask16 tail_mask(std::int64_t left) { return static_cast<__mmask16>((1u << left) - 1u); }

ROUTELAB_AVX512 void zero_tail(float* p, std::int64_t n, std::int64_t cols) {
  const __m512 zero = _mm512_setzero_ps();
  std::int64_t j = n;
  for (; j + 16 <= cols; j += 16) _mm512_storeu_ps(p + j, zero);
  if (j < cols) _mm512_mask_storeu_ps(p + j, tail_mask(cols - j), zero);
}

ROUTELAB_AVX512 void softmax_row(const float* x, float* p, std::int64_t n, std::int64_t cols, float* lse) {
  if (n == 0) {  // a row that sees nothing
    zero_tail(p, 0, cols);
    if (lse) *lse = -std::numeric_limits<float>::infinity();
    return;
  }
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m = neg_inf;
  __mmask16 nan = 0;
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 v = _mm512_loadu_ps(x + j);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    m = _mm512_max_ps(m, v);
  }
  if (j < n) {
    const __m512 v = _mm512_mask_loadu_ps(neg_inf, tail_mask(n - j), x + j);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    m = _mm512_max_ps(m, v);
  }
  // A NaN score makes its row NaN, as ATen's softmax does (max alone would pass it over).
  const float row_max = nan ? std::numeric_limits<float>::quiet_NaN() : max16(m);
  const __m512 mv = _mm512_set1_ps(row_max);
  __m512 sum = _mm512_setzero_ps();
  for (j = 0; j + 16 <= n; j += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), mv));
    _mm512_storeu_ps(p + j, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (j < n) {
    const __mmask16 k = tail_mask(n - j);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), mv));
    _mm512_mask_storeu_ps(p + j, k, e);
    sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(k, e));
  }
  const float total = sum16(sum);
  const __m512 inv = _mm512_set1_ps(1.0f / total);
  for (j = 0; j + 16 <= n; j += 16) _mm512_storeu_ps(p + j, _mm512_mul_ps(_mm512_loadu_ps(p + j), inv));
  if (j < n) {
    const __mmask16 k = tail_mask(n - j);
    _mm512_mask_storeu_ps(p + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + j), inv));
  }
  zero_tail(p, n, cols);
  if (lse) *lse = row_max + std::log(total);
}

ROUTELAB_AVX512 void exp_row(const float* x, float* p, std::int64_t n, std::int64_t cols, float lse) {
  const __m512 l = _mm512_set1_ps(lse);
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(p + j, exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), l)));
  if (j < n) {
    const __mmask16 k = tail_mask(n - j);
    _mm512_mask_storeu_ps(p + j, k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), l)));
  }
  zero_tail(p, n, cols);
}

ROUTELAB_AVX512 void backward_row(const float* dp, const float* p, float* ds, std::int64_t n, std::int64_t cols) {
  __m512 dot = _mm512_setzero_ps();
  std::int64_t j = 0;
  for (; j + 16 <= n; j += 16) dot = _mm512_fmadd_ps(_mm512_loadu_ps(dp + j), _mm512_loadu_ps(p + j), dot);
  if (j < n) {
    const __mmask16 k = tail_mask(n - j);
    dot = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, dp + j), _mm512_maskz_loadu_ps(k, p + j), dot);
  }
  const __m512 d = _mm512_set1_ps(sum16(dot));
  for (j = 0; j + 16 <= n; j += 16)
    _mm512_storeu_ps(ds + j, _mm512_mul_ps(_mm512_loadu_ps(p + j), _mm512_sub_ps(_mm512_loadu_ps(dp + j), d)));
  if (j < n) {
    const __mmask16 k = tail_mask(n - j);
    _mm512_mask_storeu_ps(
        ds + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + j), _mm512_sub_ps(_mm512_maskz_loadu_ps(k, dp + j), d)));
  }
  zero_tail(ds, n, cols);
}
#endif

}  // namespace

bool fused_softmax_active() {
  static const bool off = switched_off_in_environment("ROUTELAB_CPU_FUSED_SOFTMAX");
  return !off && cpu_has_avx512f() && aten_softmax_scopes.load() == 0;
}

AtenCpuSoftmax::AtenCpuSoftmax() { aten_softmax_scopes.fetch_add(1); }
AtenCpuSoftmax::~AtenCpuSoftmax() { aten_softmax_scopes.fetch_sub(1); }

void causal_softmax(const float* scores, float* probs, std::int64_t rows, std::int64_t cols, std::int64_t start,
                    float* lse, std::int64_t lse_stride) {
  require_avx512f();
#if defined(ROUTELAB_AVX512_SOFTMAX)
  for (std::int64_t a = 0; a < rows; ++a)
    softmax_row(scores + a * cols, probs + a * cols, visible_keys(start, a, cols), cols,
                lse ? lse + a * lse_stride : nullptr);
#endif
}

void causal_exp(const float* scores, float* probs, std::int64_t rows, std::int64_t cols, std::int64_t start,
                const float* lse, std::int64_t lse_stride) {
  require_avx512f();
#if defined(ROUTELAB_AVX512_SOFTMAX)
  for (std::int64_t a = 0; a < rows; ++a)
    exp_row(scores + a * cols, probs + a * cols, visible_keys(start, a, cols), cols, lse[a * lse_stride]);
#endif
}

void causal_softmax_backward(const float* d_probs, const float* probs, float* d_scores, std::int64_t rows,
                             std::int64_t cols, std::int64_t start) {
  require_avx512f();
#if defined(ROUTELAB_AVX512_SOFTMAX)
  for (std::int64_t a = 0; a < rows; ++a)
    backward_row(d_probs + a * cols, probs + a * cols, d_scores + a * cols, visible_keys(start, a, cols), cols);
#endif
}

void softmax_visible(const float* scores, float* probs, std::int64_t rows, std::int64_t cols,
                     const std::int64_t* visible) {
  require_avx512f();
#if defined(ROUTELAB_AVX512_SOFTMAX)
  for (std::int64_t a = 0; a < rows; ++a)
    softmax_row(scores + a * cols, probs + a * cols, std::clamp<std::int64_t>(visible[a], 0, cols), cols, nullptr);
#endif
}

void softmax_backward_visible(const float* d_probs, const float* probs, float* d_scores, std::int64_t rows,
                              std::int64_t cols, const std::int64_t* visible) {
  require_avx512f();
#if defined(ROUTELAB_AVX512_SOFTMAX)
  for (std::int64_t a = 0; a < rows; ++a)
    backward_row(d_probs + a * cols, probs + a * cols, d_scores + a * cols,
                 std::clamp<std::int64_t>(visible[a], 0, cols), cols);
#endif
}

}  // namespace routelab::cpu_attention
