// Scalar reference of GEMM with MX weights (see gemm_mx_ref.h).
#include "src/ref/gemm_mx_ref.h"

#include <cmath>
#include <limits>

#include "src/ref/gemm_ref.h"
#include "src/ref/mx_ref.h"

namespace qj::ref {

int64_t mx_ref_block(qj_dtype t) { return t == QJ_BDR_MX9 || t == QJ_BDR_MX6 || t == QJ_BDR_MX4 ? 16 : 32; }

bool gemm_mx(const qj_gemm_desc& d, const MxWeights& w, int64_t m, const void* a, int64_t lda,
             std::vector<double>* y, std::vector<double>* mag) {
  const int64_t blk = mx_ref_block(w.type);
  const int64_t k = w.k, n = w.n, groups = k / blk;
  const bool dynamic = d.a_type == QJ_F32 || d.a_type == QJ_BF16;
  std::vector<int32_t> qa;
  std::vector<float> sc;  // per (row, group) scale of A
  if (dynamic && d.a_granularity == QJ_GRAN_GROUP) {
    if (!dynamic_quantize_groups(d, m, k, blk, a, lda, &qa, &sc)) return false;
  } else if (dynamic) {
    std::vector<float> rs;
    if (!dynamic_quantize_rows(d, m, k, a, lda, &qa, &rs)) return false;
    sc.resize(m * groups);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t g = 0; g < groups; ++g) sc[i * groups + g] = rs[i];
  } else {
    qa.resize(m * k);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < k; ++j)
        qa[i * k + j] = (d.a_type == QJ_U8 ? static_cast<const uint8_t*>(a)[i * lda + j]
                                           : static_cast<const int8_t*>(a)[i * lda + j]) -
                        d.a_zero_point;
    sc.assign(m * groups, d.a_scale);
  }
  // Dequantized weights (exact in double).
  std::vector<double> wv(n * k);
  if (blk == 16) {
    std::vector<float> col(k);
    const int64_t bb = static_cast<int64_t>(w.bdr.size()) / (n * groups);  // bytes per block
    for (int64_t c = 0; c < n; ++c) {
      bdr_dequantize(w.type, &w.bdr[c * groups * bb], k, col.data());  // exact values (or NaN)
      for (int64_t j = 0; j < k; ++j) wv[c * k + j] = col[j];
    }
  }
  for (int64_t c = 0; c < n && blk == 32; ++c)
    for (int64_t j = 0; j < k; ++j) {
      const uint8_t b = w.scales[c * groups + j / 32];
      wv[c * k + j] = b == 0xFF ? std::numeric_limits<double>::quiet_NaN()
                                : mx_elem_value(w.type, w.codes[c * k + j]) * std::ldexp(1.0, b - 127);
    }
  y->assign(m * n, 0.0);
  mag->assign(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < n; ++c) {
      double acc = 0, abs = 0;
      for (int64_t g = 0; g < groups; ++g) {
        double s = 0;  // exact: blk products of an integer and value * 2^e share a power-of-two grid
        for (int64_t j = g * blk; j < g * blk + blk; ++j) s += qa[i * k + j] * wv[c * k + j];
        const double t = s * sc[i * groups + g];
        acc += t;
        abs += std::fabs(t);
      }
      const double bias = d.bias ? d.bias[c] : 0.0;
      (*y)[i * n + c] = acc + bias;
      (*mag)[i * n + c] = abs + std::fabs(bias);
    }
  return true;
}

}  // namespace qj::ref
