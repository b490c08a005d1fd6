// GEMM weights whose integer form needs 16 bits (MX.md section 9: "an int16 path for E3M2",
// "GEMM with BDR weights"): OCP MXFP6 E3M2 (16 v in [-448, 448]) and the BDR shared-microexponent
// formats MX9 / MX6 / MX4 (q = +-M * 2^(1 - mu) per element). Packed into PackedWeights with the
// layout kMx16 (src/ops/int_weights.h) and multiplied as int16 pairs by the decoded-weight kernels
// of codegen/gemm_int (vpdpwssd / vpmaddwd).
//
// Blocks along K are the scale groups: 32 (E3M2, one E8M0 byte each) or 16 (BDR, the block's
// shared exponent E, decoded exactly like an E8M0 byte: value = q * 2^(E - 127) * 2^-m, m the
// magnitude bits, so int_shift = m). The panels keep the elements' codes, never int16 values:
//  - E3M2: the 6-bit code (decoded by a 64-entry word table: vpermi2w / two vpshufb);
//  - MX6: the integer form q = +-M << (1 - mu) (|q| <= 30) as a 6-bit two's complement;
//    E3M2 and MX6 take 6 bits each on the AVX512-VNNI tier (PackedWeights::fp6_dense: one LSB-first
//    6-bit stream per step and column vector, unpacked per 32 codes by a byte permute and a
//    per-word shift, codegen/weight_decode.h emit_fp6_words), one byte each below it (MX6: int8 q,
//    decode = vpmovsxbw): the AVX-512 tier's CPUs lack VBMI, and its unpack (vpermd + vpshufb +
//    shift, measured there on this machine with --isa avx512) ran 15-25% slower warm and no faster
//    from DRAM; AVX2 has no per-word shift;
//  - MX4: the same q (|q| <= 6) as a nibble q + 8 (decode = vpmovzxbw and a mask or a shift; the
//    offset 8 is removed with A's row sums per block), 4.5 bits per value with the exponent;
//  - MX9: int8 +-M' plus one "double" bit per element (q = 2 M' when set; a pair shares it), so
//    9 bits per value + the 8-bit exponent per 16, i.e. the format's own size plus 1/2 bit.
// Dense E3M2 / MX6 against one byte per value (2026-12-01, 4096 x 4096 unless given, fp32 A, GOPS):
// GEMV from DRAM E3M2 64-66 against 50-52, MX6 61-62 against 52-56 (1 x 11008 x 4096 likewise);
// GEMV from L3 E3M2 75-76 against 65-84, MX6 71-72 against 75-92 (2 ops more per 32 codes where
// the kernel is bound by its decode); M = 4-256 within -6%..+3%. 24% less memory.
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
