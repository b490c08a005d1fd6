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
  int64_t k = 0, n = 0;            // k a multiple of the block (32 OCP, 16 BDR)
  std::vector<uint8_t> codes;      // OCP: n x k element codes (one per byte)
  std::vector<uint8_t> scales;     // OCP: n x k/32 E8M0 bytes
  std::vector<uint8_t> bdr;        // BDR (QJ_BDR_MX9/6/4): n x k/16 packed blocks, column-major
};
// K values per scale block of the type: 16 for BDR, 32 for OCP MX.
int64_t mx_ref_block(qj_dtype t);

// For C (m x n, row-major, ld n), g over the blocks (32 OCP, 16 BDR; A per (row, block) with
// a_granularity QJ_GRAN_GROUP), value(k, c) the exact decoded weight (BDR: src/ref/mx_ref's
// bdr_dequantize, +-M * 2^(E - 127 - mu + 1 - m); OCP: value(code) * 2^(b - 127)):
//   y[i*n + c]   = sum_g a_scale(i, g) * sum_{k in g} qa(i, k) * value(k, c)
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

// MX ACTIVATIONS (MX x MX, MX.md section 5): A as element codes (m x k, one per byte) and E8M0
// scales (m x k/32), any OCP type on either side.
struct MxActivations {
  qj_dtype type = QJ_MXFP4_E2M1;
  int64_t m = 0, k = 0;
  std::vector<uint8_t> codes;   // m x k
  std::vector<uint8_t> scales;  // m x k/32
};

// y[i*n + c] = sum_g T_g + bias[c],  T_g = 2^(sA(i,g) + sB(g,c) - 254) * S_g, where S_g is the
// block's sum of element products computed EXACTLY (integer forms value * 2^shift, shift = the
// type's finest exponent, multiplied and summed in __int128; only its conversion to double can
// round, and only for E5M2 x E5M2 blocks needing more than 53 bits). A 0xFF scale on either side
// makes T_g NaN; an FP8 NaN / Inf code makes the block an IEEE double sum (propagating NaN / Inf).
// mag[i*n + c] = sum_g |T_g| + |bias[c]| (the scale of the fp32 rounding bound of the tests).
// BDR weights (w.bdr): g runs over the 16-blocks, A's scale is that of its 32-block g / 2 and
// T_g = 2^(sA + E - 254 - m) * sum q_A * (+-M << (1 - mu)), the same exact integer sum.
void gemm_mx_mx(const qj_gemm_desc& d, const MxActivations& a, const MxWeights& w,
                std::vector<double>* y, std::vector<double>* mag);

}  // namespace qj::ref
