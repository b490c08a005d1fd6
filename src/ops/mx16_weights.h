// GEMM weights whose integer form needs 16 bits (MX.md section 9: "an int16 path for E3M2",
// "GEMM with BDR weights"): OCP MXFP6 E3M2 (16 v in [-448, 448]) and the BDR shared-microexponent
// formats MX9 / MX6 / MX4 (q = +-M * 2^(1 - mu) per element). Packed into PackedWeights with the
// layout kMx16 (src/ops/int_weights.h) and multiplied as int16 pairs by the decoded-weight kernels
// of codegen/gemm_int (vpdpwssd / vpmaddwd).
//
// Blocks along K are the scale groups: 32 (E3M2, one E8M0 byte each) or 16 (BDR, the block's
// shared exponent E, decoded exactly like an E8M0 byte: value = q * 2^(E - 127) * 2^-m, m the
// magnitude bits, so int_shift = m). The panels keep one BYTE per element, not int16 values:
//  - E3M2: the 6-bit code (decoded by a 64-entry word table: vpermi2w / two vpshufb);
//  - MX6: the int8 integer form q = +-M << (1 - mu) (|q| <= 30; decode = vpmovsxbw);
//  - MX4: the same q (|q| <= 6) as a nibble q + 8 (decode = vpmovzxbw and a mask or a shift; the
//    offset 8 is removed with A's row sums per block), 4.5 bits per value with the exponent;
//  - MX9: int8 +-M' plus one "double" bit per element (q = 2 M' when set; a pair shares it), so
//    9 bits per value + the 8-bit exponent per 16, i.e. the format's own size plus 1/2 bit.
// Dense 6-bit packing (E3M2 / MX6 codes) would add a permute, a shift and a mask per decoded
// vector to a loop that issues only mr multiplies per vector (the nibbles of MX4 cost one op).
// (E2M3 in the int8 kernels is dense on the VNNI tier: there two ops per 64 codes cost ~10% at
// M >= 16 and gave 1.3-1.4x from DRAM at M = 1; see codegen/weight_decode.h, emit_fp6_unpack.
// E3M2 GEMV, 2026-11-30: 47 GOPS from DRAM, 0.91-0.93 of the roof of its 8.25 bits, and 62 with
// the weights in L3, so 6 bits would gain at most ~15% from DRAM if the unpack kept the kernel
// above that; not done.)
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>
#include <memory>

#include "src/ops/int_weights.h"

namespace qj {

// True for QJ_MXFP6_E3M2, QJ_BDR_MX9, QJ_BDR_MX6, QJ_BDR_MX4.
bool mx16_weights_type(qj_dtype t);
// K values per block (scale group): 32 for E3M2, 16 for BDR.
int mx16_block(qj_dtype t);
// Integer-form shift: weight value = q * 2^(b - 127 - shift) (E3M2 4; BDR m = 7, 4, 2).
int mx16_int_shift(qj_dtype t);

qj_status pack_mx16_weights(const qj_weights_desc& d, const void* data, int64_t ld, qj_isa isa,
                            std::shared_ptr<PackedWeights>* out);
qj_status quantize_mx16_weights(const qj_weights_desc& d, const float* w, int64_t ld, qj_isa isa,
                                std::shared_ptr<PackedWeights>* out);
qj_status repack_mx16_weights(const PackedWeights& src, qj_isa isa, std::shared_ptr<PackedWeights>* out);

// Read back from a kMx16 panel: the integer form q of element (kk, col).
int32_t mx16_q(const PackedWeights& w, int64_t kk, int64_t col);

}  // namespace qj
