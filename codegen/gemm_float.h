// Float-weight GEMM microkernels (KernelOp::kGemmFloat): fp32 A x F16 / BF16 / MXFP8 packed B,
// fp32 accumulation, the shared output stage (bias, ReLU, beta, fp32 or bf16 C).
//
// One kernel computes an mr x (n_panels * nr) strip of C from a packed fp32 A tile (kp x mr,
// K-major) and consecutive packed B panels (src/ops/int_weights.h: kHalf / kBf16Pair). Per K unit
// (one k for f16, one pair of k for bf16) each weight vector is converted once and used by all mr
// rows: vcvtph2ps (F16C) for f16; vpslld 16 (k) and vpandd 0xffff0000 (k + 1) for bf16; MXFP8
// codes through fp16 (unpack or zero-extend, shift; E4M3 rebiased) then vcvtph2ps, with the E8M0
// block scales applied in fp32 (layout kMxFp8; details in gemm_float.cpp); the integer forms of
// BDR weights (int8, MX9 int16) by vpmovsx + vcvtdq2ps in blocks of 16; MXINT8 / MXFP6 E2M3
// (kMxByte; E2M3 first to q = 8v by vpermb or vpshufb), MXFP4 (kMxNibble) and MXFP6 E3M2 (kMx16)
// codes in place, by shifts + vcvtdq2ps, by vpermps of a value table and through fp16. A values
// are embedded broadcasts (AVX-512; flags bit 3: vbroadcastss) or vbroadcastss (AVX2) from the
// packed tile.
// Key fields used:
//   isa            avx2 (ymm, 16 registers) or avx512 / avx512_vnni (zmm, 32 registers)
//   b_type         QJ_F16, QJ_BF16, QJ_MXFP8_E4M3, QJ_MXFP8_E5M2, QJ_MXFP4_E2M1, QJ_MXINT8,
//                  QJ_MXFP6_E2M3, QJ_MXFP6_E3M2, or
//                  (integer forms) QJ_BDR_MX9 / MX6 / MX4;  a_type QJ_F32 (the packed tile)
//   mr, nr         register tile (nr a multiple of the vector width)
//   c_type, has_bias, activation, has_beta, n_tail   epilogue (codegen/epilogue.h)
//   param[0]       K-interleaved accumulator sets (1, 2 or 4): unit u of every group of param[0]
//                  units accumulates into set u, summed at the end (FMA latency at small mr)
//   param[1]       (f16 / bf16) how far ahead (bytes) the main K loop prefetches the weight
//                  stream, one prefetcht0 per 64-byte line (0: none; src/ops/gemm.cpp chooses it)
//   flags bit 0    direct A: `a` is the caller's fp32 A (row stride lda_bytes), read in place with
//                  no packing (FBGEMM reads A the same way); needs every K unit complete (f16, or
//                  even K for bf16), since nothing past column K - 1 of a row may be read
//   flags bit 1    MX weights only: per-block accumulators (else decoded weights times their
//                  scales)
//   flags bit 2    MXFP6 E2M3 and 6-bit dense panels (E3M2, MX6) only: the CPU has AVX512-VBMI
//                  (zmm: one vpermb decodes a chunk / unpacks the codes)
//   flags bit 3    zmm with two or more column vectors: each A element broadcast into a register
//                  once (vbroadcastss), the FMAs from registers (else embedded {1to16}
//                  broadcasts; src/ops/gemm.cpp sets it on Zen 5)
// MX weights: k_main counts blocks (32 k, BDR 16; k_rem unused); the units of a block are
// interleaved over the param[0] sets (which must divide the block).
#pragma once
#include <cstdint>

#include "codegen/epilogue.h"
#include "src/core/kernel_cache.h"

namespace qj {

struct GemmFloatArgs {
  cg::EpilogueConsts consts; // first: the epilogue addresses it from the argument pointer
  const float* a;            // packed A tile: kp x mr floats (direct A: the tile's first row)
  const uint8_t* b;          // first packed B panel (panels are contiguous)
  uint8_t* c;                // C(row 0 of the tile, first column of the first panel)
  int64_t ldc;               // bytes between rows of C
  int64_t k_main;            // K units / param[0]: iterations of the unrolled loop (MXFP8: K / 32)
  int64_t k_rem;             // K units % param[0]: single units after it (into set 0)
  int64_t n_panels;          // panels to compute
  int64_t last_is_tail;      // 1 if the last panel is the partial one (key.n_tail columns)
  const float* col_mult;     // [n_pad] ones (the epilogue's multiplier), at the first panel
  const float* col_bias;     // [n_pad] bias, at the first panel
  const float* row_scale;    // unused (no row scale for float weights)
  int64_t lda_bytes;         // direct A: bytes between rows of A
};

using GemmFloatKernel = void (*)(const GemmFloatArgs*);

const KernelFamily& gemm_float_family();

// The largest mr <= cap the generator accepts for `key` (mr ignored); 0 if none.
int gemm_float_max_mr(const KernelKey& key, int cap);

// f16 / bf16 weights: bytes of the weight stream per K unit of an nr-column panel (one k of
// fp16, two of bf16), what each step of the main loop reads and prefetches.
inline int gemm_float_unit_bytes(int b_type, int nr) { return b_type == QJ_BF16 ? nr * 4 : nr * 2; }

}  // namespace qj
