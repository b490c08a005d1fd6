// Scalar reference of GEMM with MX weights (MX.md section 5): every weight is dequantized with
// the scalar decoder of src/ref/mx_ref (value(code) * 2^(b - 127), exact in double) and multiplied
// in double precision with A as the kernels see it: fp32 / bf16 A quantized by the library's
// dynamic-quantization rule (src/ref/gemm_ref.h, per row, tensor or (row, 32-block)), u8 / s8 A
// minus its zero point. It returns the exact pre-activation output and the magnitude the fp32
// rounding bound of the tests is proportional to; the tests apply the output stage.
// MXFP8 weights multiply fp32 / bf16 A unquantized (gemm_mxfp8 below).
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>
#include <vector>

namespace qj::ref {

struct MxWeights {
  qj_dtype type = QJ_MXFP4_E2M1;
  int64_t k = 0, n = 0;            // k a multiple of 32
  std::vector<uint8_t> codes;      // n x k element codes (one per byte)
  std::vector<uint8_t> scales;     // n x k/32 E8M0 bytes
};

// For C (m x n, row-major, ld n):
//   y[i*n + c]   = sum_g a_scale(i, g) * 2^(b(g,c) - 127) * sum_{k in g} qa(i, k) * value(k, c)
//                  [* a_scale for u8/s8 A] + bias[c]         (NaN when a scale byte is 0xFF)
//   mag[i*n + c] = sum_g |term_g| + |bias[c]|
// Returns false if A holds a non-finite value (fp32 / bf16 A).
bool gemm_mx(const qj_gemm_desc& d, const MxWeights& w, int64_t m, const void* a, int64_t lda,
             std::vector<double>* y, std::vector<double>* mag);

// MXFP8 weights (E4M3, E5M2; gemm_mx forwards them here): A is not quantized. fp32 A as is, bf16 A
// widened exactly; every product a * value * 2^(b - 127) is exact in double (a 24-bit and a 4-bit
// significand; exponents far inside double's range), so
//   y[i*n + c]   = sum_k a(i, k) * w(k, c) + bias[c]   (summed in double, K-order; NaN / Inf
//                  weights propagate as IEEE says; a 0xFF scale byte makes the block's weights NaN)
//   mag[i*n + c] = sum_k |a(i, k) * w(k, c)| + |bias[c]|
// Non-finite A values propagate. Always returns true.
bool gemm_mxfp8(const qj_gemm_desc& d, const MxWeights& w, int64_t m, const void* a, int64_t lda,
                std::vector<double>* y, std::vector<double>* mag);

}  // namespace qj::ref
