// Scalar reference of embedding-bag: obviously correct and slow, one element at a time.
//
// It fixes the exact fp32 arithmetic every generated kernel reproduces bit for bit (all row
// formats; the quantized ones are integer-decoded, so "bit-exact with the summation order" holds):
//
//   For each bag, acc[j] = +0.0f, then for each position p of the bag in index order (i = start + p):
//     idx = indices[i]; row = remap ? remap[idx] : idx; a pruned row (row == -1) adds nothing.
//     w = weighted ? weights[positional ? p : i] : 1.0f
//     float rows (F32 / F16 / BF16), x = the element widened to fp32 exactly:
//         acc[j] = fma(w, x, acc[j])             (unweighted: acc[j] + x, the same value)
//     fused rows (8/4/2-bit), q = the integer code, s / b = the row's scale / bias as fp32:
//         sw = w * s, bw = w * b                 (unweighted: s, b)
//         acc[j] = fma(q, sw, acc[j]);  bsum = bsum + bw     (bsum starts at +0.0f)
//       and after the bag's last row: acc[j] = acc[j] + bsum
//     MX rows, X = the block's E8M0 scale as fp32 (0xFF: NaN), v = value(code) * X (an fp32
//       product, exact for finite scales except below fp32's subnormal range):
//         acc[j] = fma(w, v, acc[j])  (the float-row step)
//   QJ_POOL_MEAN with len = end - start > 0 (pruned positions count): acc[j] *= (1.0f / (float)len).
//   QJ_POOL_NONE (gather): one output row per index, y = w * x (float and MX rows; x if
//     unweighted) or y = fma(q, sw, bw) (fused rows); a pruned row gives zeros.
//
// MX row layouts: QJ_MXFP4_E2M1 rows are FBGEMM's MX4 rows, ceil(dim/32) groups of 17 bytes (16
// data bytes, byte j = code[2j] | code[2j+1] << 4, then the E8M0 byte); QJ_MXINT8 /
// QJ_MXFP8_E4M3 / QJ_MXFP8_E5M2 rows are the SPLIT layout of MX.md: 32 code bytes per block in the
// table row, the E8M0 bytes in a separate array scales[row][block].
//   Output: fp32 as is; fp16 / bf16 rounded to nearest even (src/formats/half.h).
//
// Differences from FBGEMM's reference (EmbeddingSpMDM*_ref): identical for float rows; for fused
// rows FBGEMM computes acc = fma(sw, q, acc + bw), two roundings per element and row. Here the
// bias does not depend on the column, so it is summed once per row (one scalar add) and added to
// every column once per bag: one rounding per element and row plus one per bag, and a third fewer
// vector operations per row (the kernel's hot-cache throughput is bound by them).
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>

namespace qj::ref {

// The row layout of a table, resolved from a desc.
struct EmbTable {
  qj_dtype row_type = QJ_F32;
  int64_t dim = 0;
  bool sb_first = false;
  int64_t row_stride = 0;  // bytes between rows (0: natural)
  const void* data = nullptr;
  int64_t num_rows = 0;
  const uint8_t* scales = nullptr;  // SPLIT MX rows: [num_rows][ceil(dim / 32)]
};

// Natural row size in bytes of a row format (float, fused or MX), or -1.
int64_t emb_row_bytes(qj_dtype row_type, int64_t dim, bool sb_first);

// Runs bags [bag_begin, bag_end) (POOL_NONE: indices [bag_begin, bag_end)) and writes their output
// rows (row r of the whole problem at out + r * out_stride elements). Inputs must be valid (the
// driver validates them first); returns false if it meets an index, offset or remap entry outside
// its range anyway (without writing that bag).
bool embedding_bag(const qj_embedding_bag_desc& d, const EmbTable& t, int64_t num_bags,
                   const void* indices, int64_t num_indices, const void* offsets_or_lengths,
                   const float* weights, void* out, int64_t bag_begin, int64_t bag_end);

}  // namespace qj::ref
