// Packed weights of every GEMM family: quantization parameters, the packed panels in the layout
// of one ISA tier, and what the zero-point corrections need. Packed once, shared (read-only) by
// every plan made from it. One object for integer (S8, S4, U4) and float (F16, BF16) weights:
// `layout` says how `packed` is organised, the rest of the object is common.
//
// Layouts of `packed` (docs/kernel-contract.md). N is cut into panels of nr columns (the last one
// zero-padded); panels are contiguous, panel_bytes() each.
//   kQuad8  (s8, avx512_vnni)   kg = 4: per K group of 4, nr columns x 4 consecutive s8 of K
//                               (vpdpbusd quads).
//   kPair16 (s8, avx512)        kg = 2: per K group of 2, nr columns x 2 consecutive s16 of K
//                               (vpmaddwd pairs).
//   kPair8  (s8, avx2, scalar)  kg = 2: per K group of 2, nr columns x 2 consecutive s8 of K: the
//                               pairs of kPair16 at one byte a weight, widened to s16 by one
//                               vpmovsxbw per 16 weights in the kernel (half the bytes to stream).
//   kNibble (s4, u4, every tier) kg = 8: per scale group (or all of K when not grouped):
//                 steps of 8 K: nr columns x 4 bytes; byte r (0..3) of column c holds
//                   low nibble = u(k0 + r, c), high nibble = u(k0 + 4 + r, c)
//                 with u = q + 8 for S4 (0..15) and u = q for U4, so one vpand gives the quads of
//                 k0..k0+3 and one shift + vpand the quads of k0+4..k0+7 (codegen/weight_decode);
//                 then, grouped only, nr fp32 scales of the group; then, when zp_vec, nr int32
//                 z(g, c) = zero_point + 8 (S4) or zero_point (U4). Group parameters sit inline so
//                 that a panel is one sequential stream (M = 1 is bandwidth bound). Padding
//                 (K to a multiple of 8, columns past N) holds u = 0 and scale 0.
//   kHalf   (f16)   kg = 1: per k, nr fp16 values (one vcvtph2ps per vector).
//   kBf16Pair (bf16) kg = 2: per pair of K, nr dwords: low half bf16(k, c), high half bf16(k+1, c)
//                   (vpslld 16 gives k, vpandd 0xffff0000 gives k + 1). Odd K is padded with +0.
//   kMxNibble (MXFP4) and kMxByte (MXFP6 E2M3, MXINT8) (src/ops/mx_weights.h): integer-exact OCP MX
//                 element codes (never their values), K blocks of 32 = the scale groups; a panel is
//                 a run of scale lines: [64 bytes: the nr E8M0 bytes of each of 64 / nr groups]
//                 [those groups' steps], ...; zero pad to 64 bytes (mx_group_offset and friends
//                 below).
//                 kMxNibble steps: 8 K, nr columns x 4 bytes as kNibble (low nibble k0 + r, high
//                 nibble k0 + 4 + r), FP4 codes. kMxByte steps: 8 K, per column vector of `lanes`
//                 columns (16 zmm, 8 ymm) lanes x 4 codes of k0..k0+3 then lanes x 4 of k0+4..k0+7:
//                 one byte per code, except MXFP6 E2M3 on the VNNI tier (fp6_dense()), whose codes
//                 are one LSB-first 6-bit stream (MX.md section 4, the library's FP6 packing: code
//                 i of the step at bits [6i, 6i + 6)), so each vector of 64 codes is 48 bytes and a
//                 step 6 bytes per column; the kernels unpack a vector with one byte permute and
//                 one vpmultishiftqb, or 5 ops without them (codegen/weight_decode.h,
//                 emit_fp6_unpack).
//   kMxFp8 (MXFP8 E4M3 / E5M2, src/ops/mx_weights.h; the fp32-FMA kernels of codegen/gemm_float):
//                 kg = 1: per k, nr code bytes; E8M0 bytes in scale lines as kMxNibble.
//                 With two vectors per row (nr = 2 lanes) the nr bytes of a k are in the order one
//                 vpunpcklbw / vpunpckhbw pair turns into the two fp16 vectors (fp8_byte_pos);
//                 with one vector they are in column order (vpmovzxbw). An E4M3 block holding a
//                 NaN code (S.1111.111) has its scale byte stored as 0xFF (equivalent: see
//                 mx_weights.cpp).
//   kMx16 (MXFP6 E3M2, BDR MX9 / MX6 / MX4) (src/ops/mx16_weights.h): the int16-pair kernels.
//                 Blocks (32 / 16 K) = scale groups; scale lines as kMxNibble, holding E8M0 bytes
//                 or the BDR exponents. Step = 8 K; per column vector of
//                 `lanes` columns, for pair o = 0..3: lanes x 2 bytes (k0 + 2o, k0 + 2o + 1) of each
//                 column (one vpmovzxbw / vpmovsxbw gives the int16 pairs of vpdpwssd / vpmaddwd);
//                 MX9 then adds 4 masks of 2 * lanes bits (bit 2c + r: element doubled). Byte =
//                 E3M2 code, MX6 int8 q, MX9 int8 q or q / 2 (mx_col_step() = 8 or 9 bytes).
//                 On the VNNI tier (fp6_dense()) E3M2 and MX6 take 6 bits per element: the codes
//                 of a column vector's step, in the byte order above, as one LSB-first 6-bit
//                 stream (code i at bits [6i, 6i + 6); MX6: q & 63), so pair row o is bytes
//                 [24o, 24o + 24) of zmm's 96 (mx_col_step() = 6).
//                 MX4 (4 bytes): one dword per column (lanes dwords per column vector), nibble
//                 u = q + 8 (q in [-6, 6]) of K = k0 + 2o + r at bits [16 r + 4 o, +4): pair row
//                 o is (dword >> 4o) & 0x000f000f, no shuffle.
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "src/core/buffer.h"

namespace qj {

enum class PackLayout : int32_t {
  kQuad8 = 0, kPair16 = 1, kNibble = 2, kHalf = 3, kBf16Pair = 4, kMxNibble = 5, kMxByte = 6,
  kMx16 = 7, kMxFp8 = 12, kPair8 = 13
};

struct PackedWeights {
  qj_dtype dtype = QJ_S8;
  int64_t k = 0, n = 0;
  qj_granularity gran = QJ_GRAN_TENSOR;
  int64_t group_size = 0;            // QJ_GRAN_GROUP only
  std::vector<float> scales;         // 1, n or groups*n (empty for float weights)
  std::vector<int32_t> zero_points;  // same count, or empty when all zero
  qj_isa isa = QJ_ISA_SCALAR;        // tier whose layout `packed` uses
  PackLayout layout = PackLayout::kQuad8;
  int32_t nr = 0, kg = 0;            // panel width; K values per packed step of one column
  int64_t kp = 0;                    // K padded to a multiple of kg
  int64_t n_panels = 0;
  bool zp_vec = false;               // kNibble: per-column z vector inline after each group
  int64_t clamped = 0;               // float weights converted from fp32: values clamped to +-max
  AlignedBuffer packed;
  std::vector<int32_t> colsum;       // [groups][n]: sum of q over the group's K (integer weights)

  bool is_float() const { return dtype == QJ_F16 || dtype == QJ_BF16; }
  bool is_int4() const { return dtype == QJ_S4 || dtype == QJ_U4; }
  // Integer-exact MX weights: MXFP4, MXFP6 E2M3, MXINT8 (int8 kernels) and the is_mx16() types.
  bool is_mx() const {
    return dtype == QJ_MXFP4_E2M1 || dtype == QJ_MXFP6_E2M3 || dtype == QJ_MXINT8 || is_mx16();
  }
  // MX weights on the int16 path (E3M2, BDR MX9 / MX6 / MX4; layout kMx16).
  bool is_mx16() const {
    return dtype == QJ_MXFP6_E3M2 || dtype == QJ_BDR_MX9 || dtype == QJ_BDR_MX6 || dtype == QJ_BDR_MX4;
  }
  // MXFP6 E2M3 codes packed 6 bits each (kMxByte on the VNNI tier; see the layout above). The
  // AVX-512 tier (CPUs without VNNI, and without VBMI: its unpack would take 6 more ops per 64
  // codes, measured 25-40% slower) and AVX2 keep one byte per code.
  // The same on the VNNI tier for the 6-bit int16-pair types of kMx16: MXFP6 E3M2 codes and BDR
  // MX6's q (|q| <= 30) as a 6-bit two's complement, each step's codes in the order of the byte
  // layout (src/ops/mx16_weights.h).
  static bool fp6_dense_for(qj_isa isa, PackLayout layout, qj_dtype dtype) {
    if (isa < QJ_ISA_AVX512_VNNI) return false;
    if (layout == PackLayout::kMxByte) return dtype == QJ_MXFP6_E2M3;
    return layout == PackLayout::kMx16 && (dtype == QJ_MXFP6_E3M2 || dtype == QJ_BDR_MX6);
  }
  bool fp6_dense() const { return fp6_dense_for(isa, layout, dtype); }
  // MX: packed bytes per column per 8-K step (FP4 / MX4 4; dense E2M3 / E3M2 / MX6 6; else E2M3 /
  // INT8 / E3M2 / MX6 8; MX9 9; kMxFp8: 8, one byte per code).
  int32_t mx_col_step() const {
    if (layout == PackLayout::kMxNibble || dtype == QJ_BDR_MX4) return 4;
    if (fp6_dense()) return 6;
    return dtype == QJ_BDR_MX9 ? 9 : 8;
  }
  // kMxByte: the code index within a step of code r (0..7, k0 + r) of panel column c; one byte
  // per index, or 6 bits per index when fp6_dense().
  int64_t mx_byte_index(int64_t r, int64_t c) const {
    const int64_t lanes = isa >= QJ_ISA_AVX512 ? 16 : 8;
    return (c / lanes) * 8 * lanes + (r / 4) * lanes * 4 + (c % lanes) * 4 + r % 4;
  }
  // Layout kMxFp8 (the fp32-FMA kernels' own MX panels): MXFP8 E4M3 / E5M2 codes. (Under MXFP8 A
  // those kernels also read every integer-form MX / BDR type in place: is_mx().)
  bool is_mx_fp8() const { return layout == PackLayout::kMxFp8; }
  // MX panels (kMxNibble, kMxByte, kMxFp8, kMx16) are runs of scale lines: one 64-byte line
  // holding the scale bytes (E8M0, or the BDR exponent) of mx_line_groups() = 64 / nr consecutive
  // groups, nr bytes per group, followed by the steps of those groups. A GEMV thus reads a panel
  // as one sequential stream (a separate stream of scale bytes at the panel's end cost MXFP4 at
  // M = 1 from DRAM about a fifth of its speed).
  int64_t mx_line_groups() const { return 64 / nr; }
  // Bytes of the steps of one group (all nr columns), and of a whole MX panel, with col_step bytes
  // per column per step (0: mx_col_step(); 8: the same panel with one byte per code).
  size_t mx_group_bytes(int32_t col_step = 0) const;
  size_t mx_panel_bytes(int32_t col_step = 0) const;
  size_t mx_group_offset(int64_t g) const;  // panel offset of group g's first step
  size_t mx_scale_offset(int64_t g) const;  // panel offset of group g's nr scale bytes
  // Panel offset of the 8-K step holding k index kk (kMxFp8: of k row kk, nr bytes).
  size_t mx_k_offset(int64_t kk) const;
  int64_t groups() const { return gran == QJ_GRAN_GROUP ? k / group_size : 1; }
  int64_t k_groups() const { return kp / kg; }
  // kQuad8, kPair16, kPair8, kBf16Pair: the bytes of one K group of a panel (all nr columns).
  int64_t step_bytes() const { return static_cast<int64_t>(nr) * (layout == PackLayout::kPair8 ? 2 : 4); }
  // kNibble: 8-K steps per scale group, and the bytes of one group block of a panel.
  int64_t group_steps() const { return kp / groups() / 8; }
  size_t group_block_bytes() const;
  size_t panel_bytes() const;
  // Decoded byte = q + offset: S4 8, U4 0; MX: FP4 12 (q = 2v), E2M3 60 (q = 8v), INT8 128;
  // int16-pair weights: MX4 8 (the nibble q + 8), E3M2 / MX9 / MX6 0.
  int32_t nibble_offset() const;
  int32_t q(int64_t kk, int64_t col) const;       // read back one quantized value (integer)
  uint16_t code(int64_t kk, int64_t col) const;   // read back one fp16 / bf16 code (float)
  float value(int64_t kk, int64_t col) const;     // decoded float weight (F16 / BF16)
  float scale(int64_t g, int64_t col) const;   // MX: 2^(b-127) of the E8M0 byte (NaN for 0xFF)
  // Every scale(g, col) as [groups()][n] floats, in one pass (over the panels' scale bytes for
  // MX / BDR): for the per-(group, column) loops of plan creation.
  std::vector<float> all_scales() const;
  // MX / MXFP8 weights: the largest E8M0 scale byte of the live columns other than the NaN byte
  // 0xFF (0 when there is none).
  uint8_t max_mx_scale_byte() const;
  uint8_t mx_code(int64_t kk, int64_t col) const;      // MX: element code
  uint8_t mx_scale_byte(int64_t g, int64_t col) const; // MX: E8M0 byte of block g of column col
  int32_t zp(int64_t g, int64_t col) const;
};

// Dense FP6 codes (fp6_dense): code i of a step at bits [6i, 6i + 6), LSB first; a code spans at
// most two bytes. fp6_put ORs into zeroed bytes.
inline uint8_t fp6_get(const uint8_t* p, int64_t i) {
  const int64_t bit = 6 * i, sh = bit % 8;
  const uint32_t v = p[bit / 8] | (sh > 2 ? static_cast<uint32_t>(p[bit / 8 + 1]) << 8 : 0u);
  return static_cast<uint8_t>((v >> sh) & 63);
}
inline void fp6_put(uint8_t* p, int64_t i, uint8_t code) {
  const int64_t bit = 6 * i, sh = bit % 8;
  const uint32_t x = static_cast<uint32_t>(code & 63) << sh;
  p[bit / 8] |= static_cast<uint8_t>(x);
  if (sh > 2) p[bit / 8 + 1] |= static_cast<uint8_t>(x >> 8);
}

// Panel geometry of a tier for N columns and a weight type.
int32_t weights_nr(qj_isa isa, int64_t n, qj_dtype dtype = QJ_S8);
int32_t weights_kg(qj_isa isa, qj_dtype dtype = QJ_S8);
// kMxFp8: byte offset, within the nr bytes of one k, of panel column c (see the layout above).
int32_t fp8_byte_pos(int32_t nr, int32_t lanes, int32_t c);
PackLayout weights_layout(qj_isa isa, qj_dtype dtype);

// Validates desc (for packing integers when `quantized`, or for quantizing fp32 otherwise).
// Handles every weight type (the name predates S4/U4/F16/BF16).
qj_status check_int_weights_desc(const qj_weights_desc* desc, bool quantized);
// Packs ready data: S8 bytes, S4/U4 nibbles (ld in bytes), F16/BF16 codes (ld in elements).
qj_status pack_int_weights(const qj_weights_desc& desc, const void* data, int64_t ld, qj_isa isa,
                           std::shared_ptr<PackedWeights>* out);
// From fp32: S8 symmetric (amax / 127), S4 symmetric (amax / 7, q in [-7, 7]), U4 asymmetric
// (min/max with 0 included: scale (max - min) / 15, zero point rne(-min / scale)), per channel or
// per group; F16 / BF16 by round-to-nearest-even conversion, finite values beyond the format's
// largest finite value clamped to it and counted in `clamped` (logged at QJ_VERBOSE=1).
qj_status quantize_int_weights(const qj_weights_desc& desc, const float* w, int64_t ld, qj_isa isa,
                               std::shared_ptr<PackedWeights>* out);
// The same weights in the layout of another tier.
qj_status repack_int_weights(const PackedWeights& w, qj_isa isa, std::shared_ptr<PackedWeights>* out);
// Fills layout, kg, nr, kp, n_panels and zp_vec of `w` (type, shape, granularity and zero points
// set) for `isa`: the one definition of the geometry, used by packing and by deserialization.
void set_weights_geometry(PackedWeights* w, qj_isa isa);
// Allocates w->packed (64-byte aligned; huge pages requested from 4 MiB up), zeroed if `zero`,
// with 64 bytes more than `bytes` that no panel uses: the kernels read a dense FP6 vector's 48
// bytes as 64 (their permute never selects the 16 past it), also at the end of the last panel.
bool allocate_packed(PackedWeights* w, size_t bytes, bool zero);
// True when `w` is already in the layout `isa` uses.
bool weights_match_isa(const PackedWeights& w, qj_isa isa);

// Versioned, checksummed images (see serialize.cpp for the format).
size_t weights_serialized_size(const PackedWeights& w);
qj_status weights_serialize(const PackedWeights& w, void* buf, size_t size);
qj_status weights_deserialize(const void* buf, size_t size, qj_isa isa,
                              std::shared_ptr<PackedWeights>* out);

}  // namespace qj
