// GEMM with MX ACTIVATIONS (A in an OCP MX type, MX.md section 5): the A side of MX x MX.
//
// A arrives as a qj_mx_matrix (quantjit.h): row i's SPLIT element bytes at elems + i * lda, its
// E8M0 bytes at scales[i * scales_ld + j]. For the integer-exact element types (MXFP4 2v, MXFP6
// E2M3 8v, MXINT8 the code; MX.md's table of exact inner loops) A is decoded while it is packed to
// the int8 integer form the decoded-weight kernels already take as their signed operand, and the
// block scale of A, 2^(sA - 127 - int_shift), goes through the per-(row, group) A-scale path that
// fp32 A quantized per group uses (a_granularity = QJ_GRAN_GROUP, key flags bit 4):
//   facc = fma(float(int32 block sum) * a_scale(i, g), w_scale(g, n), facc).
// float(sum) * 2^e is exact (|sum| < 2^24 and 2^e >= 2^-133 > 2^-149), so per block only the fma
// of the fp32 accumulation rounds; a 0xFF scale is NaN and the fma propagates it.
//
// The decoders are generic: int8 (FP4, E2M3, INT8: the s8 quads of the int8 decoded-weight
// kernels), int16 (those and E3M2, 16v in [-448, 448]: the s16 pairs of the int16-pair kernels
// for E3M2 / BDR weights, per weight group of 32 or 16) and fp32 (every OCP type, exact element
// values, or value * X with the scales: the float kernels, F16 / BF16 / MXFP8 weights and the
// FP8-A routes). The int8 decoder is vectorized (AVX2; AVX-512 for FP4 / INT8, VBMI vpermb for
// E2M3) and chosen by the ISA cap like pack_a's quantizer; int16 widens it (E3M2: its own AVX2 /
// AVX-512 table decoder); fp32 with scales is mx_dequantize.
// Which (A, weight) pair takes which route: check_mx_a_plan below and quantjit.h (qj_gemm_desc).
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>

#include "src/ops/int_weights.h"
#include "src/ops/pack_a.h"

namespace qj {

// The six OCP MX element types (the a_type values qj_gemm_desc accepts besides U8/S8/F32/BF16).
bool mx_act_type(int32_t t);
// True when the type has an int8 integer form (MXFP4, MXFP6 E2M3, MXINT8).
bool mx_act_int8_type(qj_dtype t);

// nb whole 32-element blocks of SPLIT elements -> 32 * nb integer forms (value * 2^int_shift).
// block_sum (nullable): the sum of each block's integers. false (nothing written) for a type
// without that form.
bool mx_decode_int8(qj_dtype t, const uint8_t* elems, int64_t nb, int8_t* dst, int32_t* block_sum);
bool mx_decode_int16(qj_dtype t, const uint8_t* elems, int64_t nb, int16_t* dst);
// Exact element values (scales == nullptr: the codes' values, FP8 NaN / Inf codes included) or
// value * 2^(b - 127) per block (0xFF: NaN), exactly as qj_mx_dequantize.
void mx_decode_f32(qj_dtype t, const uint8_t* elems, const uint8_t* scales, int64_t nb, float* dst);
// The factor of a block of the integer form: 2^(b - 127 - int_shift) (exact fp32, subnormal below
// 2^-126), NaN for b = 0xFF. t must have an integer form.
float mx_act_block_scale(qj_dtype t, uint8_t b);

// Plan creation with MX A and weights w: MXFP4 / E2M3 / MXINT8 or S4 / U4 groups of 32 with the
// int8 A types; E3M2 / BDR with every A type but FP8; MXFP4 / E2M3 / MXINT8 also with E3M2 A
// (A split into two s8 parts, PackASpec::split32; below VNNI the weights as MX6 / MX9); F16 /
// BF16 / MXFP8 with every MX type; every MX / BDR type with FP8 A (the fp32-FMA kernel reads them
// in place). QJ_ERR_UNSUPPORTED naming the pair it cannot run (and QJ_ERR_INVALID_ARGUMENT for an
// output type that does not apply).
qj_status check_mx_a_plan(const qj_gemm_desc& d, const PackedWeights& w);
// Run arguments with MX A (a points to a qj_mx_matrix, lda = element bytes between rows).
qj_status check_mx_a_run(qj_dtype t, int64_t k, int64_t m, const void* a, int64_t lda);
// Its lda check alone (a run of m = 0 rows, whose a may be NULL).
qj_status check_mx_a_lda(qj_dtype t, int64_t k, int64_t lda);

// Packs rows [row0, row0 + mr) of MX A as s8 quads for the decoded-weight kernels (spec.kg == 4,
// signed_quads): dst as pack_a_tile, row_sum[g * mr + i] = row_sum_mult * block sum when
// spec.row_sums, a_scale[g * mr + i] = mx_act_block_scale of the row's block g (g < spec.groups;
// the weight groups are the 32-blocks). spec.kg == 2: s16 pairs for the int16-pair weights (E3M2,
// BDR), any type with an integer form (E3M2 too), per weight group of k / spec.groups (BDR 16:
// A block g / 2). spec.split32 (E3M2 A, kg == 4): 16v = 32 hi + lo as two s8 quad sets per 8-K
// step (dst holds 2 kp bytes per row; see mx_act.cpp).
void pack_a_tile_mx(const PackASpec& spec, const qj_mx_matrix& a, int64_t lda, int64_t row0, int mr,
                    uint8_t* dst, int32_t* row_sum, float* a_scale, PackAScratch& scratch);
// Grows scratch to what pack_a_tile_mx(spec, ..., mr, ...) uses (throws std::bad_alloc).
void reserve_pack_a_tile_mx(const PackASpec& spec, int mr, PackAScratch& scratch);
// Rows [0, m) of MX A as integers q[i * k + j] and block factors scale[i * groups + g] per weight
// group (groups = k / 32 when 0; k / 16 for BDR weights: A block g / 2) (the scalar fallback of
// the plan, src/ref/gemm_ref.h gemm_int_group_a). Every type with an integer form (E3M2 too).
void mx_act_decode_rows(qj_dtype t, const qj_mx_matrix& a, int64_t lda, int64_t m, int64_t k,
                        int32_t* q, float* scale, int64_t groups = 0);

// F16 / BF16 weights (the float GEMM): MX A dequantized exactly to fp32 (value * 2^(b - 127),
// NaN for a 0xFF scale; +-Inf only where the product leaves the fp32 range), row i of the m x k
// result at dst + i * ld; and the same for rows [row0, row0 + mr) packed as pack_a_float_tile.
void mx_act_decode_rows_f32(qj_dtype t, const qj_mx_matrix& a, int64_t lda, int64_t m, int64_t k,
                            float* dst, int64_t ld);
void pack_a_float_tile_mx(qj_dtype t, const qj_mx_matrix& a, int64_t lda, int64_t row0, int mr,
                          int64_t k, int64_t kp, float* dst, PackAScratch& scratch);
// Grows scratch to what pack_a_float_tile_mx(..., mr, k, ...) uses (throws std::bad_alloc).
void reserve_pack_a_float_tile_mx(int mr, int64_t k, PackAScratch& scratch);

}  // namespace qj
