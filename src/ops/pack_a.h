// Packing of A for the integer GEMM kernels, fused with dynamic quantization and row sums.
//
// A tile of mr rows is stored K-group-major: for each group of kg K values, mr rows x 4 bytes
// (kg = 4: u8 quads for vpdpbusd; kg = 2: s16 pairs for vpmaddwd). K is zero-padded to the group.
// s8 A on the VNNI path is shifted to u8 (+128) and its zero point with it, exactly.
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>

namespace qj {

struct PackASpec {
  qj_dtype a_type;     // U8, S8, F32, BF16
  int32_t kg;          // 4 or 2
  int64_t k, kp;       // real and padded K
  int64_t groups;      // scale groups along K (row sums per group)
  bool row_sums;       // compute row sums (weights have zero points)
};

// Amax of each row of fp32/bf16 A. Returns the first row holding a non-finite value, or -1.
int64_t row_amax(qj_dtype a_type, const void* a, int64_t lda, int64_t m, int64_t k, float* amax);

// Packs rows [0, mr_t) of A (pointer at the first row) into `dst` (k_groups x mr x 4 bytes), with
// row_sum[g * mr + i] = sum over group g of the packed (shifted) values when spec.row_sums.
// inv_scale[i] = 127 / amax of row i (dynamic A only).
void pack_a_tile(const PackASpec& spec, const void* a, int64_t lda, int mr, int mr_t,
                 const float* inv_scale, uint8_t* dst, int32_t* row_sum);

}  // namespace qj
