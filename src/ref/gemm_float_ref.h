// Scalar reference of the float-weight GEMM (F16 / BF16 weights, fp32 or bf16 A, fp32 math).
//
// Definition (the scalar fallback computes exactly this; the JIT kernels may sum K in another
// order, so tests compare them within a rounding-error bound, see test/gemm_f16_test.cpp):
//   acc(i, n) = fma(a(i, k), w(k, n), acc) for k = 0 .. K-1 in order, from +0, in fp32
//               (a bf16 A value is widened to fp32 exactly, w is the exact value of its code);
//   y = acc + bias[n] (one rounding; no bias: y = acc);
//   then the common output stage (ref::store_output): ReLU, C = y + beta * C (fp32 C, one fma),
//   or bf16 by round-to-nearest-even.
// The weights carry no scale: a_scale, a_zero_point, c_scale and c_zero_point do not apply.
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>
#include <vector>

namespace qj::ref {

// Decoded float weights: w[k * n + col] is the fp32 value of B(k, col). Block-scaled weights
// (MX blocks of the fp32 route: MXFP8, and under MXFP8 A the integer forms of every other MX /
// BDR type) have block > 0: w holds the unscaled element values (or integer forms),
// block_scale[(k / block) * n + col] the block's factor (2^(b - 127), integer forms
// 2^(b - 127 - shift); NaN for 0xFF), and the definition above becomes
//   acc = fma(s_b, block_scale, acc) over the blocks b in order, s_b the fma chain of block b from
//   +0 (as the MX.md dot: the scale product applied to each block's sum).
struct FloatWeights {
  int64_t k = 0, n = 0;
  std::vector<float> w;
  int64_t block = 0;
  std::vector<float> block_scale;
};

void gemm_float(const qj_gemm_desc& d, const FloatWeights& w, int64_t m, const void* a, int64_t lda,
                void* c, int64_t ldc);

// For error bounds: sum[i * n + col] = sum_k a * w and abs_sum = sum_k |a * w|, both in double
// (each product of two fp32 values is exact in double). Infinities and NaNs propagate as IEEE
// arithmetic says, so a non-finite sum is the exact answer's class (inf of a sign, or NaN).
void gemm_float_f64(const qj_gemm_desc& d, const FloatWeights& w, int64_t m, const void* a,
                    int64_t lda, std::vector<double>* sum, std::vector<double>* abs_sum);

}  // namespace qj::ref
