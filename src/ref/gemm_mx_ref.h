// Scalar reference of GEMM with MX weights (MX.md section 5): every weight is dequantized with
// the scalar decoder of src/ref/mx_ref (value(code) * 2^(b - 127), exact in double) and multiplied
// in double precision with A as the kernels see it: fp32 / bf16 A quantized by the library's
// dynamic-quantization rule (src/ref/gemm_ref.h, per row, tensor or (row, 32-block)), u8 / s8 A
// minus its zero point. It returns the exact pre-activation output and the magnitude the fp32
// rounding bound of the tests is proportional to; the tests apply the output stage.
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

}  // namespace qj::ref
