// Scalar reference for MX (OCP MX v1.0) and BDR MX9/MX6/MX4 quantize, dequantize and dot
// products (MX.md sections 3, 5, 6). Obviously-correct rather than fast: scales and element
// rounding are computed in double arithmetic from the definitions (frexp / ldexp / nearbyint on
// exact values), not with the bit tricks of src/formats, so tests can pit the two against each
// other. Only the byte layouts (packing) come from src/formats.
//
// Requires the default floating-point environment (round to nearest, no FTZ/DAZ), as tests have.
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>

namespace qj::ref {

// ---- OCP MX ----

// Exact value of an element code, from sign / exponent / mantissa (NaN/Inf for FP8 specials).
double mx_elem_value(qj_dtype t, uint8_t code);
// Scale byte of one block of count values (count <= 32; the rest is +0.0).
uint8_t mx_block_scale(qj_dtype t, qj_rounding r, const float* v, int count);
// Element code of value v in a block whose scale byte is s (s != 0xFF): RNE to the element grid
// of v / 2^(s-127), saturated, sign kept (MXINT8: clamped to [-127, 127]).
uint8_t mx_encode(qj_dtype t, float v, uint8_t s);

// fp32 -> MX, unpacked: codes[ceil(n/32)*32] (one code per byte; padding codes 0), scales.
void mx_quantize_codes(qj_dtype t, qj_rounding r, const float* src, int64_t n, uint8_t* codes,
                       uint8_t* scales);
// Same, written in the SPLIT layout (src/formats/mx.h) the C API uses.
void mx_quantize(qj_dtype t, qj_rounding r, const float* src, int64_t n, uint8_t* elems,
                 uint8_t* scales);
// SPLIT layout -> fp32: value(code) * 2^(s-127) rounded once to fp32; scale 0xFF -> NaN.
void mx_dequantize(qj_dtype t, const uint8_t* elems, const uint8_t* scales, int64_t n, float* dst);

// MX dot product (MX.md section 5, OCP section 6.1/6.2) of two SPLIT vectors of k elements (mixed
// element types allowed). Per block j the element sum S_j is exact (integers in __int128);
// term_j = fp32(S_j * 2^(sA+sB-254)), rounded once via double (exact unless S_j needs more than 53
// bits, which only E5M2 x E5M2 blocks can); acc = fp32(acc + term_j) in block order. A 0xFF scale
// on either side, or a NaN/Inf element code (FP8), makes the result NaN / propagates like IEEE
// arithmetic. Elements at index >= k are ignored (K padded with zeros).
float mx_dot(qj_dtype ta, const uint8_t* elems_a, const uint8_t* scales_a, qj_dtype tb,
             const uint8_t* elems_b, const uint8_t* scales_b, int64_t k);

// ---- BDR MX9 / MX6 / MX4 (blocks of 16, self-contained) ----

// fp32 -> packed BDR blocks (ceil(n/16) blocks of 18 / 12 / 8 bytes).
void bdr_quantize(qj_dtype t, const float* src, int64_t n, uint8_t* blocks);
void bdr_dequantize(qj_dtype t, const uint8_t* blocks, int64_t n, float* dst);
// Dot product of two BDR vectors of the same type: per block the exact sum of +-M_a * +-M_b *
// 2^(step_a + step_b), rounded once to fp32, accumulated in fp32; an 0xFF exponent -> NaN.
float bdr_dot(qj_dtype t, const uint8_t* blocks_a, const uint8_t* blocks_b, int64_t k);

}  // namespace qj::ref
