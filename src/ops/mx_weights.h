// GEMM weights in OCP MX formats (MX.md sections 4, 5, 9): the integer-exact element types MXFP4,
// MXFP6 E2M3 and MXINT8 (E3M2 and BDR: the entry points below forward to src/ops/mx16_weights.h)
// packed into the same PackedWeights object as every other weight type
// (layouts kMxNibble / kMxByte, src/ops/int_weights.h), so they run through the same plan / run
// path and the decoded-weight integer kernels (codegen/gemm_int + codegen/weight_decode).
//
// Blocks of 32 along K are the scale groups (gran = QJ_GRAN_GROUP, group_size = 32); the packed
// panels keep the element CODES (4 or 8 bits; never their values) and the E8M0 bytes; the kernels
// decode both in registers. MXFP8 shares the packers and the checks but not the integer kernels
// (see mx_fp8_weights_type). The integer form q of a code (MX.md section 5: FP4 2v, E2M3 8v, INT8
// the code) times 2^(b - 127 - int_shift) is the weight value.
#pragma once
#include <quantjit/quantjit.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "src/ops/int_weights.h"

namespace qj {

// True for the MX element types this path packs (MXFP4, MXFP6 E2M3, MXINT8; MXFP8 E4M3 / E5M2).
bool mx_weights_type(qj_dtype t);
// MXFP8 (E4M3, E5M2): packed as code bytes (layout kMxFp8) for the fp32-FMA kernels of
// codegen/gemm_float, which decode them through fp16 in registers (no integer form).
bool mx_fp8_weights_type(qj_dtype t);
// Integer form of a code (see above) and its power-of-two shift (value = q * 2^-shift).
int32_t mx_int_value(qj_dtype t, uint8_t code);
int mx_int_shift(qj_dtype t);

// Argument checks of qj_weights_pack (quantized) / qj_weights_quantize_pack for an MX dtype.
qj_status check_mx_weights_desc(const qj_weights_desc* d, bool quantized);
// data -> qj_mx_weights_data (quantjit.h); ld = bytes between the element rows of two columns.
// The SPLIT-layout input of an OCP type (elements and E8M0 scale arrays, qj_mx_weights_data):
// scales present, ld and scales_ld large enough for k / 32 blocks and within the address space.
qj_status check_mx_split_data(const qj_weights_desc& d, const qj_mx_weights_data& md, int64_t ld,
                              int64_t block_bytes);
qj_status pack_mx_weights(const qj_weights_desc& d, const void* data, int64_t ld, qj_isa isa,
                          std::shared_ptr<PackedWeights>* out);
// fp32 (K x N or N x K, ld in floats) -> MX with the FLOOR scale rule (MX.md 3.2), per column.
qj_status quantize_mx_weights(const qj_weights_desc& d, const float* w, int64_t ld, qj_isa isa,
                              std::shared_ptr<PackedWeights>* out);
qj_status repack_mx_weights(const PackedWeights& src, qj_isa isa, std::shared_ptr<PackedWeights>* out);

// Dense MXFP6 E2M3 panels (w.fp6_dense()) [p0, p1) with one byte per code instead, as the AVX-512
// tier packs them (also E3M2's kMx16 panels, whose step codes are in the byte layout's order; the
// GEMM driver does this for E2M3 only) (w.mx_panel_bytes(8) bytes per panel, contiguous at dst; the same scale lines):
// the GEMM driver's per-block scratch for many rows, whose kernels then skip the unpack (see
// gemm_run in src/ops/gemm.cpp). vbmi: vpermb + vpmultishiftqb per 64 codes, else scalar.
void fp6_panels_to_bytes(const PackedWeights& w, int64_t p0, int64_t p1, uint8_t* dst, bool vbmi);

// Calls fn(c, v) for every column c of the fp32 weights (K x N or N x K, ld in floats) with v its
// K values contiguous: the rows themselves for N x K, else gathered 16 columns at a time (reading
// whole lines of each K row).
template <class Fn>
void for_weight_columns(const qj_weights_desc& d, const float* w, int64_t ld, const Fn& fn) {
  const int64_t k = d.k, n = d.n;
  if (d.layout != QJ_LAYOUT_KN) {
    for (int64_t c = 0; c < n; ++c) fn(c, w + c * ld);
    return;
  }
  std::vector<float> cols(static_cast<size_t>(16 * k));
  for (int64_t c0 = 0; c0 < n; c0 += 16) {
    const int64_t nc = std::min<int64_t>(16, n - c0);
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t j = 0; j < nc; ++j) cols[j * k + kk] = w[kk * ld + c0 + j];
    for (int64_t j = 0; j < nc; ++j) fn(c0 + j, cols.data() + j * k);
  }
}

}  // namespace qj
