// Scalar reference of the integer-weight GEMM (INT8 now; INT4 weights use the same definition
// with q in the nibble range). Obviously correct and slow: int64 accumulation, one element at a
// time. It fixes the exact arithmetic the generated kernels must reproduce bit for bit; see
// docs/kernel-contract.md for the same definition in prose.
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>
#include <vector>

namespace qj::ref {

// Unpacked integer weights: q[k*n_ld + n] holds the quantized value of B(k, n).
struct IntWeights {
  int64_t k = 0, n = 0;
  std::vector<int32_t> q;          // K x N, row-major
  qj_granularity gran = QJ_GRAN_TENSOR;
  int64_t group_size = 0;          // for QJ_GRAN_GROUP
  std::vector<float> scales;       // 1, N or (K/G)*N
  std::vector<int32_t> zero_points;// same count as scales, or empty (all zero)

  float scale(int64_t g, int64_t col) const;
  int32_t zp(int64_t g, int64_t col) const;
  int64_t groups() const { return gran == QJ_GRAN_GROUP ? k / group_size : 1; }
};

// Per-row dynamic quantization of fp32 / bf16 A: q = clamp(rne(a * (127 / amax)), -127, 127),
// row scale amax / 127 (1 when amax == 0). When 127 / amax overflows fp32, a and amax are scaled
// by 2^100 first: q = clamp(rne((a * 2^100) * (127 / (amax * 2^100)))). Returns false if a value
// is not finite.
bool dynamic_quantize_rows(const qj_gemm_desc& d, int64_t m, int64_t k, const void* a, int64_t lda,
                           std::vector<int32_t>* q, std::vector<float>* row_scale);

// Per (row, group of gk along K) dynamic quantization (a_granularity = QJ_GRAN_GROUP with grouped
// weights): the same rule over each group, scale[i * (k / gk) + g] = amax / 127 of the group.
bool dynamic_quantize_groups(const qj_gemm_desc& d, int64_t m, int64_t k, int64_t gk, const void* a,
                             int64_t lda, std::vector<int32_t>* q, std::vector<float>* scale);

// C = output_stage(A * B) for one whole problem. Grouped weights: per group g,
//   facc = fma(float(int32 group sum) [* a_scale(i, g) with per-group A], w_scale(g, n), facc),
// in group order; then [* row scale of dynamic A per row / tensor], then the output stage.
void gemm_int(const qj_gemm_desc& d, const IntWeights& w, int64_t m, const void* a, int64_t lda,
              void* c, int64_t ldc);

// gemm_int for A given as integers qa[i * k + j] with one scale per (row, weight group),
// ags[i * groups + g] (MX activations decoded to their integer form; grouped weights only):
//   facc = fma(float(int32 group sum) * ags(i, g), w_scale(g, n), facc), then the output stage.
void gemm_int_group_a(const qj_gemm_desc& d, const IntWeights& w, int64_t m, const int32_t* qa,
                      const float* ags, void* c, int64_t ldc);

// Output stage helpers shared by every reference GEMM (integer and float weights).
// Column multiplier and bias as the plan precomputes them (double math, rounded to fp32 once).
float out_multiplier(const qj_gemm_desc& d, double a_scale, double b_scale);
float out_bias(const qj_gemm_desc& d, int64_t col);
// Applies relu / beta / conversion and stores element (row, col) of C. `y` is the fp32 value
// before the activation (already scaled and biased).
void store_output(const qj_gemm_desc& d, float y, void* c, int64_t ldc, int64_t row, int64_t col);

}  // namespace qj::ref
