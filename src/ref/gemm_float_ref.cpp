#include "src/ref/gemm_float_ref.h"

#include <cmath>

#include "src/formats/half.h"
#include "src/ref/gemm_ref.h"

namespace qj::ref {

namespace {

float load_a(const qj_gemm_desc& d, const void* a, int64_t idx) {
  if (d.a_type == QJ_BF16) return bf16_to_f32(static_cast<const uint16_t*>(a)[idx]);
  return static_cast<const float*>(a)[idx];
}

}  // namespace

void gemm_float(const qj_gemm_desc& d, const FloatWeights& w, int64_t m, const void* a, int64_t lda,
                void* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t col = 0; col < w.n; ++col) {
      float acc = 0.0f;
      if (w.block > 0) {
        for (int64_t b = 0; b < w.k / w.block; ++b) {
          float sb = 0.0f;
          for (int64_t k = b * w.block; k < (b + 1) * w.block; ++k)
            sb = std::fma(load_a(d, a, i * lda + k), w.w[k * w.n + col], sb);
          acc = std::fma(sb, w.block_scale[b * w.n + col], acc);
        }
      } else {
        for (int64_t k = 0; k < w.k; ++k) acc = std::fma(load_a(d, a, i * lda + k), w.w[k * w.n + col], acc);
      }
      float y = d.bias ? acc + d.bias[col] : acc;
      store_output(d, y, c, ldc, i, col);
    }
}

void gemm_float_f64(const qj_gemm_desc& d, const FloatWeights& w, int64_t m, const void* a,
                    int64_t lda, std::vector<double>* sum, std::vector<double>* abs_sum) {
  sum->assign(m * w.n, 0.0);
  abs_sum->assign(m * w.n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t col = 0; col < w.n; ++col) {
      double s = 0.0, t = 0.0;
      for (int64_t k = 0; k < w.k; ++k) {
        double p = static_cast<double>(load_a(d, a, i * lda + k)) * w.w[k * w.n + col];
        if (w.block > 0) p *= w.block_scale[(k / w.block) * w.n + col];  // exact: a power of two
        s += p;
        t += std::fabs(p);
      }
      (*sum)[i * w.n + col] = s;
      (*abs_sum)[i * w.n + col] = t;
    }
}

}  // namespace qj::ref
