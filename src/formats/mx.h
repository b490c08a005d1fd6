// OCP Microscaling (MX v1.0) formats: element codecs, the E8M0 block scale, block quantize /
// dequantize and the byte layouts (MX.md is the normative summary; section numbers below are its).
//
// Everything here is scalar, integer-exact and independent of the caller's MXCSR (rounding mode,
// FTZ/DAZ): it is the definition that the vectorized converters (src/ops/mx_convert*) must match bit for bit, and the
// building block the MX GEMM uses for its decoders (value tables, "integer form" tables).
//
// Vocabulary:
//  - code:  one element's bit pattern, one per byte, in the low `bits` bits (ml_dtypes convention);
//  - scale: the E8M0 byte b of a 32-element block, X = 2^(b-127), 0xFF = NaN (whole block NaN);
//  - y:     the element-domain value V / X, which the element codec rounds.
// Choices (MX.md section 9): scale from exponent bits (never log2f), FLOOR by default, RCEIL on
// request; RNE with saturation (E4M3 never yields NaN from finite input); signed zero kept; an
// all-zero block gets scale 0x00; a block holding NaN or Inf gets scale 0xFF and codes 0; MXINT8
// never emits -128 but decodes it.
#pragma once
#include <quantjit/quantjit.h>

#include <cstddef>
#include <cstdint>

#include "src/formats/half.h"

namespace qj::mx {

constexpr int kBlock = 32;               // elements per OCP MX block
constexpr uint8_t kScaleNaN = 0xFF;      // the only E8M0 NaN
constexpr uint32_t kF32Inf = 0x7f800000u;
constexpr uint32_t kF32QuietNaN = 0x7fc00000u;

// Static description of one OCP MX element type (MX.md section 1.1, Table 1).
struct ElemFormat {
  qj_dtype type;
  const char* name;
  int bits;           // 8, 6 or 4: bits per element code
  bool is_int;        // MXINT8 (two's complement, value = code * 2^-6)
  int ebits, mbits;   // FP types: exponent and mantissa bits (INT8: 0, 6 fraction bits)
  int bias;           // FP exponent bias
  int emax;           // emax_elem: exponent of the largest power of two representable
  uint32_t max_code;  // magnitude code of the largest finite value (E4M3 0x7E, E5M2 0x7B)
  float max_value;    // that value (448, 57344, 28, 7.5, 6, 127/64)
  int block_bytes;    // SPLIT layout: bytes per 32-element block (32, 24 or 16)
  int int_shift;      // integer form: value * 2^int_shift is an integer (FP4 1, E2M3 3, E3M2 4,
                      // INT8 6); -1 for FP8, whose values are not small integers (MX.md sec. 5)
};

// nullptr when t is not one of the six OCP MX element types.
const ElemFormat* format(qj_dtype t);
inline bool is_ocp_type(qj_dtype t) { return format(t) != nullptr; }

// ---- E8M0 scale (MX.md section 2) ----

// Exact fp32 value of a scale byte: 0xFF -> NaN, 0x00 -> 2^-127 (fp32 subnormal), else b << 23.
inline float e8m0_to_f32(uint8_t b) {
  if (b == kScaleNaN) return bits_f32(kF32QuietNaN);
  if (b == 0) return bits_f32(0x00400000u);
  return bits_f32(static_cast<uint32_t>(b) << 23);
}

// 1/X = 2^(127-b) for b in [0, 254]; exact (b = 254 gives the subnormal 2^-127).
inline float e8m0_inverse_f32(uint8_t b) {
  return b <= 253 ? bits_f32(static_cast<uint32_t>(254 - b) << 23) : bits_f32(0x00400000u);
}

// v * 2^k rounded to nearest even, computed on the bits (so FTZ/DAZ and the rounding mode of the
// caller do not matter): what an IEEE fp32 multiply by an exact power of two gives, including
// gradual underflow and overflow to +-Inf. Zero, Inf and NaN come back unchanged.
inline float mul_pow2(float v, int k) {
  const uint32_t u = f32_bits(v);
  const uint32_t sign = u & 0x80000000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a == 0 || a >= kF32Inf) return v;
  int e = static_cast<int>(a >> 23);
  uint32_t sig = a & 0x7fffffu;
  if (e == 0) {  // subnormal input: normalize so that bit 23 is set
    const int lz = __builtin_clz(sig) - 8;
    sig <<= lz;
    e = 1 - lz;
  } else {
    sig |= 0x800000u;
  }
  const int re = e + k;
  if (re >= 255) return bits_f32(sign | kF32Inf);
  if (re >= 1) return bits_f32(sign | static_cast<uint32_t>(re) << 23 | (sig & 0x7fffffu));
  const int sh = 1 - re;  // result below 2^-126: RNE to a multiple of 2^-149
  const uint32_t m = sh > 25 ? 0u : (sig + (1u << (sh - 1)) - 1u + ((sig >> sh) & 1u)) >> sh;
  return bits_f32(sign | m);  // m == 2^23 (rounded up to the smallest normal) is still right
}

// Bits of the largest finite element value, used by the RCEIL threshold.
inline uint32_t max_value_mantissa(const ElemFormat& f) { return f32_bits(f.max_value) & 0x7fffffu; }

// The scale byte of a block from amax_bits = max over the block of (fp32 bits & 0x7fffffff).
// Integer max of those bits is the max of |V| and catches NaN/Inf (bits >= 0x7f800000): the block
// then gets 0xFF. FLOOR (OCP section 6.3): X = 2^(floor(log2 amax) - emax_elem), exponent read
// from the bits, clamped to >= 2^-127 (fp32 subnormal amax clamps the same way). RCEIL: the
// smallest X = 2^s with amax <= max_value * X, i.e. the block maximum is never clamped (up to the
// ceiling below). Both are exact integer computations.
// Ceiling: X <= 2^(127 - emax_elem), the largest X with max_value * X finite; FLOOR never goes
// beyond it, RCEIL is capped there so that a finite block never decodes to Inf (for amax within a
// binade of FLT_MAX the block maximum then saturates, as with FLOOR; MXINT8 can use all of 2^127).
// A scale byte is therefore in [0, 254 - emax_elem] or 0xFF.
inline uint8_t scale_from_amax(const ElemFormat& f, uint32_t amax_bits, qj_rounding r) {
  if (amax_bits >= kF32Inf) return kScaleNaN;
  int b = static_cast<int>(amax_bits >> 23) - f.emax;
  if (b < 0) b = 0;
  if (r == QJ_ROUND_RCEIL) {
    // Threshold max_value * 2^(b-127): exponent field emax + b (<= 254 since b <= 254 - emax);
    // exponent field 0 happens only for MXINT8 at b = 0 and is then the subnormal 127 * 2^-133.
    const int te = f.emax + b;
    const uint32_t mant = max_value_mantissa(f);
    const uint32_t t = te >= 1 ? (static_cast<uint32_t>(te) << 23) | mant : (mant | 0x800000u) >> 1;
    if (amax_bits > t) ++b;  // amax < 2^(ef-126) <= max_value * 2^(b+1-127): one step suffices
    if (b > 254 - f.emax) b = 254 - f.emax;
  }
  return static_cast<uint8_t>(b);
}

// ---- element codecs ----

// fp32 y (finite; the element-domain value V/X) -> element code: round to nearest even on the
// element grid, saturate to +-max_value, keep the sign (also of a result that rounds to zero).
// MXINT8: RNE(y * 64) clamped to [-127, 127]. Integer-exact, independent of MXCSR.
uint8_t encode_elem(const ElemFormat& f, float y);
// Exact value of a code (bits above f.bits ignored): the value rule of MX.md section 1.2;
// E4M3 S.1111.111 -> NaN (0x7fc00000 with the sign); E5M2 exponent 31 -> +-Inf (mantissa 0) or
// NaN (as an fp16's: the sign, 0x7fc00000 | m << 21); INT8 accepts -128.
float decode_elem(const ElemFormat& f, uint8_t code);

// Per-code tables, built once (thread-safe static init), indexed by the code (2^bits entries).
const float* value_table(qj_dtype t);       // exact values, as decode_elem
const int8_t* fp4_int_table();              // 16 entries: 2*v in [-12, 12] (ggml's kvalues_mxfp4)
const int8_t* e2m3_int_table();             // 64 entries: 8*v in [-60, 60]
const int16_t* e3m2_int_table();            // 64 entries: 16*v in [-448, 448]
// MXINT8's integer form is the code itself (int8, value = code * 2^-6).

// ---- blocks ----

// Quantize count (1..32) values; the rest of the block counts as +0.0 (tail padding). Writes 32
// codes (padding codes are 0) and returns the scale byte.
uint8_t quantize_block(const ElemFormat& f, qj_rounding r, const float* v, int count,
                       uint8_t* codes);
// 32 codes + scale -> 32 floats: value(code) * X rounded once to fp32 (exact unless it overflows
// to +-Inf or underflows below fp32 subnormals), via mul_pow2. Scale 0xFF -> every output NaN.
void dequantize_block(const ElemFormat& f, const uint8_t* codes, uint8_t scale, float* out);

// ---- SPLIT layout (default; MX.md section 4 "MX_LAYOUT_SPLIT") ----
// An element array of whole blocks plus a separate uint8 scale per block. Per block:
//  - FP8 / INT8: 32 bytes, one code per byte;
//  - FP6: 24 bytes, LSB-first bit stream, element i at bits [6i, 6i+6) (4 codes in 3 bytes);
//  - FP4: 16 bytes, byte j = code[2j] | code[2j+1] << 4 (low nibble = even element).
// Elements past n in the last block are encoded as code 0 (+0.0).

inline int64_t num_blocks(int64_t n) { return (n + kBlock - 1) / kBlock; }
inline int64_t split_elem_bytes(const ElemFormat& f, int64_t n) { return num_blocks(n) * f.block_bytes; }

void pack_block(const ElemFormat& f, const uint8_t* codes32, uint8_t* dst);
void unpack_block(const ElemFormat& f, const uint8_t* src, uint8_t* codes32);
// Code of element i of a SPLIT element array (random access; for references and tests).
uint8_t get_code(const ElemFormat& f, const uint8_t* elems, int64_t i);

// ---- foreign MXFP4 layouts (byte-compatible; MX.md section 4) ----
constexpr int kGgmlBlockBytes = 17;    // ggml block_mxfp4 {uint8_t e; uint8_t qs[16];}
constexpr int kFbgemmGroupBytes = 17;  // FBGEMM MX4 row group [16 data bytes][1 exponent byte]

// ggml: e = the E8M0 byte (ggml's doubled-LUT convention gives the same byte); qs[j] = code[j] |
// code[j+16] << 4 (low nibble = first half of the block).
void ggml_block_from_split(const uint8_t* elems16, uint8_t scale, uint8_t* block17);
void split_from_ggml_block(const uint8_t* block17, uint8_t* elems16, uint8_t* scale);
// FBGEMM MX4 (triton / CPU path): the SPLIT block's 16 bytes (low nibble = even) then the scale.
void fbgemm_group_from_split(const uint8_t* elems16, uint8_t scale, uint8_t* group17);
void split_from_fbgemm_group(const uint8_t* group17, uint8_t* elems16, uint8_t* scale);

}  // namespace qj::mx
