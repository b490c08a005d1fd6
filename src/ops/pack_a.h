// Packing of A for the integer GEMM kernels, fused with dynamic quantization and row sums.
//
// A tile of mr rows is stored K-group-major: for each group of kg K values, mr rows x 4 bytes
// (kg = 4: u8 quads for vpdpbusd; kg = 2: s16 pairs for vpmaddwd). K is zero-padded to the group.
// s8 A on the VNNI path is shifted to u8 (+128) and its zero point with it, exactly.
//
// INT4 (and other decoded) weights swap the operands' roles: the decoded weights are the unsigned
// operand of vpdpbusd / vpmaddubsw and A the signed one, so A is packed as s8 quads
// (signed_quads): u8 A shifted by -128, s8 and dynamically quantized A as they are. Row sums are
// then multiplied by row_sum_mult (the kernel adds them as they are: -z * sum for a constant
// weight zero point z).
//
// The float-weight kernels take A as fp32 (bf16 widened exactly), K-major per tile.
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>
#include <vector>

namespace qj {

struct PackASpec {
  qj_dtype a_type;     // U8, S8, F32, BF16
  int32_t kg;          // 4 or 2
  int64_t k, kp;       // real and padded K
  int64_t groups;      // scale groups along K (row sums per group)
  bool row_sums;       // compute row sums (weights have zero points)
  bool signed_quads = false;   // kg == 4: keep A signed (u8 - 128, s8 / dynamic as is)
  int32_t row_sum_mult = 1;    // row_sum = mult * sum (mod 2^32)
  bool group_quant = false;    // dynamic A quantized per (row, scale group): the inv / pre
                               // factors are indexed [g * mr + i]
  bool split32 = false;        // kg == 4, MX A with an int16 form (E3M2 16v): each value as
                               // q = 32 hi + lo (lo in [0, 31], hi in [-14, 14]), two s8 quad
                               // rows (see pack_a_tile_mx)
};

// Buffers the A packing functions fill before they lay a tile out (rows quantized or decoded one
// after another). A run grows them for its largest tile with the reserve_* functions below before
// it writes any output, so that running out of memory leaves C untouched; the packing functions
// grow them the same way themselves (then a no-op).
struct PackAScratch {
  std::vector<int8_t> i8;      // the tile's int8 rows
  std::vector<int8_t> row_i8;  // one MX row's int8 codes (as int16 forms next)
  std::vector<int16_t> i16;    // one MX row's int16 forms
  std::vector<int32_t> i32;    // one MX row's block sums
  std::vector<float> f32;      // MX rows decoded to fp32
};
// Grows v to at least n elements (never shrinks it).
template <class T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// Amax of each row of fp32/bf16 A. Returns the first row holding a non-finite value, or -1.
int64_t row_amax(qj_dtype a_type, const void* a, int64_t lda, int64_t m, int64_t k, float* amax);
// Amax of each (row, group of gk along K): amax[i * (k / gk) + g]. Same return value.
int64_t row_group_amax(qj_dtype a_type, const void* a, int64_t lda, int64_t m, int64_t k, int64_t gk,
                       float* amax);

// Packs rows [0, mr_t) of A (pointer at the first row) into `dst` (k_groups x mr x 4 bytes), with
// row_sum[g * mr + i] = sum over group g of the packed (shifted) values when spec.row_sums.
// Dynamic A only: q = clamp(rne((v * pre_scale[i]) * inv_scale[i]), -127, 127) with
// inv_scale[i] = 127 / amax and pre_scale[i] = 1, or, when 127 / amax overflows fp32 (amax below
// ~3.7e-37), pre_scale[i] = 2^100 and inv_scale[i] = 127 / (amax * 2^100) (both exact powers of
// two scalings; see dynamic_scales). src/ref/gemm_ref.cpp defines the same.
void pack_a_tile(const PackASpec& spec, const void* a, int64_t lda, int mr, int mr_t,
                 const float* inv_scale, const float* pre_scale, uint8_t* dst, int32_t* row_sum,
                 PackAScratch& scratch);
// Grows scratch to what pack_a_tile(spec, ..., mr, ...) uses (throws std::bad_alloc).
void reserve_pack_a_tile(const PackASpec& spec, int mr, PackAScratch& scratch);
// The per-row factors above and the row's dequantization scale (amax / 127; 1 when amax = 0).
void dynamic_scales(float amax, float* inv_scale, float* pre_scale, float* row_scale);
// The same for n rows (vectorized where the ISA cap allows; the same IEEE divisions).
void dynamic_scales_n(const float* amax, int64_t n, float* inv_scale, float* pre_scale, float* row_scale);

// dst[(kk * mr + i) * 4, + 4) = src[i * ld + 4 kk, + 4) for rows [0, mr) and quads [0, kq): rows
// of bytes (ld apart) laid out as the K-group-major quad tile of the kernels.
void transpose_quads(const uint8_t* src, int64_t ld, int mr, int64_t kq, uint8_t* dst);

// Packs rows [0, mr_t) of fp32 / bf16 A into `dst` as kp x mr floats (dst[k * mr + i]); rows past
// mr_t and k past K are +0.
void pack_a_float_tile(qj_dtype a_type, const void* a, int64_t lda, int mr, int mr_t, int64_t k,
                       int64_t kp, float* dst);

}  // namespace qj
