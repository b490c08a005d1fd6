// Integer-weight GEMM microkernels (u8 x s8 -> s32 with the fused output stage).
//
// One kernel computes an mr x (n_panels * nr) strip of C from a packed A tile and consecutive
// packed B panels; see docs/kernel-contract.md for the packed layouts. Key fields used:
//   isa            avx512_vnni: vpdpbusd on u8 x s8 quads; avx512 / avx2: vpmaddwd on s16 pairs
//                  (exact, never saturates; A widened at pack time, and B too at avx512, while
//                  the avx2 tier's B pairs are bytes widened by vpmovsxbw: gemm_int_s8_bytes)
//   mr, nr         register tile (nr a multiple of the vector width)
//   c_type, has_bias, activation, has_row_scale, has_beta   epilogue (codegen/epilogue.h)
//   granularity    QJ_GRAN_GROUP: int32 sums per K group folded into fp32 with per-(group, column)
//                  scales; otherwise one int32 sum per output
//   has_b_zp       subtract row_sum * b_zero_point per group (vpmulld)
//   n_tail         live columns of the partial last panel (0 when N is a multiple of nr)
//   flags bit 0    two accumulator sets over alternate K quads (hides latency when mr is small)
//   b_type         QJ_S8: the kernels above. A decoded type (QJ_S4, QJ_U4; codegen/weight_decode):
//                  weights decoded in registers to unsigned quads, A read as s8 quads (a_type
//                  QJ_S8), group scales and zero-point vectors inline in the panel; see the
//                  comment above emit_decoded in gemm_int.cpp. Extra key fields for them:
//   flags bit 1    add the plan's column corrections (A zero point) per group
//   flags bit 2    add the per-row corrections of pack_a (a constant weight zero point)
//   has_b_zp       (decoded) per-column zero-point vector inline in the panel, times row sums
//   flags bit 3    (decoded, VNNI dual) high nibbles decoded without a shift, scaled back per group
//   flags bit 4    (decoded, grouped) A quantized per (row, group): each group's sum is multiplied
//                  by row_group_scale before the fold (has_row_scale is then 0)
//   flags bit 5    (decoded) the CPU has AVX512-VBMI (vpermb decoders, e.g. MXFP6 E2M3; MXFP4
//                  on the VNNI tier)
//   flags bit 6    (decoded MX) no E8M0 byte of the weights is 0x00 or 0xFF: block scales decode
//                  by a shift alone (the plan scans the bytes; OCP MX int8 types only).
//                  (s8, VNNI, u8 A in place) narrow N = 4 or 8: a row's accumulator holds
//                  2 quads x N columns of each 8-byte K chunk (vpbroadcastq of A); n_panels
//                  banks of mr rows per call, software-pipelined, A rows args.lda apart, B
//                  patterns and per-lane arrays in the plan's expanded layout, key.param[1] = K
//                  (see emit_s8_narrow in gemm_int.cpp); with param[4] = 1 (N = 4, K a
//                  multiple of 4 up to 4 * kNarrowRowsMaxKGroups) its row-lane variant: groups
//                  of 4 rows x 4 columns per zmm (emit_s8_narrow_rows); with param[4] = 1 and
//                  N = 8 (K a multiple of 4 up to 4 * kNarrowRows8MaxKGroups) the 8-column one:
//                  a ymm per row, two rows joined per output vector (emit_s8_narrow_rows8).
//                  With nr = 16: the tall kernel (16 columns of the packed panels, K <=
//                  4 * kTallMaxKGroups, B in registers, key.param[3] bytes between its K
//                  quads; emit_s8_tall). With nr = 64: the
//                  banks kernel (one 64-column panel over banks of 3 rows, the same pipeline,
//                  B read per K step; u8 / s8 / f32 / s32 C; emit_s8_banks)
//   param[1]       (decoded, VNNI, mr = 1, int8-form decoders) 1: the one-row form for weights that
//                  sit in L2: each A quad broadcast once into a register (not embedded in each
//                  vpdpbusd), odd K steps accumulated in a second copy of the int32 sets (added in
//                  per group), so a step waits neither on the last one nor on the load ports;
//                  2 (S4 / U4, mr = 1, scaled high nibbles: flags bit 3): the form for weights
//                  streamed from DRAM: the nibble masks read the packed bytes as memory operands
//                  (one instruction fewer a vector); 3 (int8 decoders below VNNI, mr = 1, one column
//                  vector per panel): two panels a pass, their column vectors in the order of
//                  one panel of twice the width (the second panel args.panel_bytes on), so each A
//                  quad broadcast serves both; n_panels counts pairs; no tail; with param[5] the
//                  first stream prefetches the next pair's first panel, the second its own.
//                  (s8, AVX2 byte pairs, mr = 1, per tensor / channel, no b_zp, whole K) 3: the
//                  same two panels a pass (r15 = args.panel_bytes to the second), each A pair
//                  broadcast serving the four column vectors; with param[5] each stream
//                  prefetches its own panel
//   param[2]       (s8, not narrow) K blocking: 0 the whole K in one call; otherwise the call covers
//                  k_groups of K and the accumulators pass through args.acc between calls:
//                  1 first block (start from col_corr, store the raw sums to acc), 2 a middle
//                  block (start from acc, store to acc), 3 the last block (start from acc, then
//                  the b_zp correction and the output stage). Panels are b_skip bytes apart
//                  after their block. Stages 1 and 2 have no output stage: their keys leave the
//                  epilogue fields (c_type, bias, activation, b_zp, row scale, beta, n_tail) zero.
//   param[3]       (decoded MX) 1: the int8-form MX b_types read by the int16-pair kernel: each
//                  step's two quad vectors of decoded bytes (q + offset) widened by vpshufb into
//                  s16 pair rows, for s16 A (E3M2 A below the VNNI tier, and MXINT8 weights under
//                  any A at the AVX2 tier: src/ops/gemm.cpp, quads_as_pairs); row sums remove the
//                  offset
//   param[4]       (decoded MXFP6 E2M3, VNNI tier) 1: the panels hold one byte per code (the run's
//                  scratch copy of a B block, src/ops/gemm.cpp) instead of the tier's 6 bits;
//                  (s8 narrow, flags bit 6 with nr = 4) 1: the row-lane variant (see flags bit 6)
//   param[5]       (decoded; s8 over the whole K, not narrow / tall) how far ahead (bytes) the
//                  kernel prefetches its weight stream, one prefetcht0 per 64-byte line of each
//                  step (0: none; src/ops/gemm.cpp chooses it)
//   MX b_types (MXFP4, MXFP6 E2M3, MXINT8): grouped by blocks of 32; the E8M0 bytes per (block,
//                  column) sit in the panel's scale lines (int_weights.h) and are decoded to
//                  2^(b - 127) in the kernel
//   int16-pair b_types (MXFP6 E3M2; BDR MX9 / MX6 / MX4, blocks of 16 whose exponent byte is
//                  decoded like E8M0): weights decoded to s16 pairs, A packed as s16 pairs (kg 2),
//                  vpdpwssd (VNNI) or vpmaddwd + vpaddd; row sums only for MX4 (offset 8)
#pragma once
#include <cstdint>

#include "codegen/epilogue.h"
#include "src/core/kernel_cache.h"

namespace qj {

struct GemmIntArgs {
  cg::EpilogueConsts consts; // first: the epilogue addresses it from the argument pointer
  const uint8_t* a;          // packed A tile: k_groups x mr x 4 bytes
  const uint8_t* b;          // first packed B panel: k_groups x nr x 4 bytes per panel (s8 pairs
                             // at avx2: x 2, gemm_int_s8_bytes)
  uint8_t* c;                // C(row 0 of the tile, first column of the first panel)
  int64_t ldc;               // bytes between rows of C
  int64_t k_groups;          // 4-byte K groups per scale group (all of K when not grouped);
                             // decoded weights: K steps per scale group (MX: always 4, the
                             // kernels unroll them)
  int64_t groups;            // scale groups (1 when not grouped)
  int64_t n_panels;          // panels to compute
  int64_t last_is_tail;      // 1 if the last panel is the partial one (key.n_tail columns)
  const int32_t* col_corr;   // [groups][n_pad] int32 column corrections, at the first panel
  const int32_t* b_zp;       // [groups][n_pad] weight zero points (has_b_zp)
  const float* group_scale;  // [groups][n_pad] weight scales (grouped)
  int64_t col_stride;        // bytes between groups in the three arrays above
  const int32_t* row_sum;    // [groups][mr] row sums of A (has_b_zp)
  const float* col_mult;     // [n_pad] output multipliers, at the first panel
  const float* col_bias;     // [n_pad] output bias, at the first panel
  const float* row_scale;    // [mr] dynamic-quantization row scales
  const float* row_group_scale;  // [groups][mr] per (group, row) scales of A (decoded, flags bit 4)
  int64_t lda;               // flags bit 6: bytes between rows of A (read in place)
  int32_t* acc;              // K-blocked stages (key.param[2]): int32 accumulators of the call,
                             // [panel][mr][nr]
  int64_t b_skip;            // K-blocked stages: bytes from the end of one panel's K block to
                             // the start of the next panel's
  int64_t panel_bytes;       // the pair form (decoded, param[1] = 3): bytes of one B panel
};

using GemmIntKernel = void (*)(const GemmIntArgs*);

// s8 weights below the AVX-512 tiers are packed as K pairs of bytes (layout kPair8,
// src/ops/int_weights.h) and widened to s16 pairs by the kernel (vpmovsxbw): one byte a weight to
// stream instead of two, the shuffle off the multiply ports. The AVX-512 tier keeps s16 pairs.
inline bool gemm_int_s8_bytes(qj_isa isa) { return isa < QJ_ISA_AVX512; }

// The tall kernel (flags bit 6 with nr = 16, emit_s8_tall) keeps all of B in registers: K quads.
constexpr int kTallMaxKGroups = 19;
// The row-lane narrow kernel (flags bit 6, nr = 4, param[4] = 1) keeps all of B in registers too.
constexpr int kNarrowRowsMaxKGroups = 16;
// Its 8-column form (nr = 8, emit_s8_narrow_rows8) as well.
constexpr int kNarrowRows8MaxKGroups = 16;

const KernelFamily& gemm_int_family();

// The largest mr <= cap for which the generator accepts `key` (its mr field is ignored): the
// register budget is defined once, in the emitter. 0 if none.
int gemm_int_max_mr(const KernelKey& key, int cap);
// The same for the tall kernel (flags bit 6, nr = 16; zmm) at this K: rows per bank.
int gemm_int_tall_max_mr(int64_t k, int cap);
// The same for the 8-column row-lane kernel (flags bit 6, param[4] = 1, nr = 8): the largest even
// rows per bank up to cap whose registers leave two for the output stage's multipliers and bias.
int gemm_int_narrow_rows8_max_mr(int64_t k, int cap);

}  // namespace qj
