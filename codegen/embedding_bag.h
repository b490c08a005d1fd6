// Embedding-bag kernels: gather rows by index, decode, weight, pool, convert, store; and the
// vectorized index-range check that runs before them.
//
// Key fields (KernelKey, op = KernelOp::kEmbeddingBag). Every code-shaping parameter is here and
// nothing else; sizes that only change trip counts or addresses (number of bags, row stride,
// output stride, pointers) are run-time arguments (EmbArgs).
//   isa         QJ_ISA_AVX2 (ymm, 16 registers) or QJ_ISA_AVX512 (zmm, k-masks). The VNNI tier
//               uses the AVX512 kernel (no VNNI instruction helps here).
//   a_type      row format: QJ_F32, QJ_F16, QJ_BF16, QJ_FUSED_8BIT, QJ_FUSED_4BIT, QJ_FUSED_2BIT,
//               QJ_MXFP4_E2M1 (FBGEMM MX4 rows), QJ_MXINT8 / QJ_MXFP8_E4M3 / QJ_MXFP8_E5M2 (SPLIT)
//   b_type      index width in bits: 32 or 64
//   c_type      output type: QJ_F32, QJ_F16, QJ_BF16
//   nr          dim & 0xffff (informative; param[0] is authoritative)
//   flags       bit 0 kEmbLengths     lengths instead of offsets
//               bit 1 kEmbWeighted    per-index weights
//               bit 2 kEmbPositional  weights indexed by position in the bag
//               bit 3 kEmbRemap       pruned-table remap (index -> row or -1)
//               bit 4 kEmbSbFirst     fused rows with fp16 scale/bias before the values
//               bit 5 kEmbOffsets64   offsets / lengths are int64 (else int32)
//               bit 6 kEmbCheck       the index-range check kernel instead of the bag kernel
//   param[0]    dim (elements per row)
//   param[1]    qj_pooling: QJ_POOL_SUM, QJ_POOL_MEAN, QJ_POOL_NONE (gather: one row per index)
//   param[2]    prefetch distance in indices (0: no prefetch)
//   param[3]    accumulator vectors per column block (chosen by src/ops; dims wider than one
//               block run the bag's indices once per block)
//   param[4]    prefetch instruction: 0 prefetcht0, 1 prefetcht1, 2 prefetcht2, 3 prefetchnta
//   param[5]    bit 0: next-bag prefetch (pooled bags, a prefetch distance): when a bag takes P >= 2
//               column blocks, one row step in P of all its blocks prefetches the whole next row
//               of the next bag (and a SPLIT MX row's scale bytes; each row once, from the bag's
//               first), so those rows load while every block of this bag runs; the first block's
//               prefetch `distance` ahead stays. 0: that one alone.
//               bit 1: block prefetch (pooled bags, a prefetch distance): every column block after
//               the first prefetches its own bytes of the row `distance` ahead (prefetcht0)
// Everything else is zero.
//
// Canonical names (QJ_VERBOSE, perf map, tests, benchmark rows):
//   emb_<row>_i<32|64>_<o|l><32|64>_<sum|mean|gather>[_w|_pw][_remap][_sbf]_<out>_d<dim>_b<acc>
//      [_pf<dist><t0|t1|t2|nta>[nb][bp]]__<isa>   e.g. emb_fused8_i64_o64_sum_f32_d128_b8_pf16t2__avx512
//   emb_check_i<32|64>__<isa>           the index-range check
#pragma once
#include <cstdint>

#include "src/core/kernel_cache.h"

namespace qj {

enum EmbFlags : uint8_t {
  kEmbLengths = 1,
  kEmbWeighted = 2,
  kEmbPositional = 4,
  kEmbRemap = 8,
  kEmbSbFirst = 16,
  kEmbOffsets64 = 32,
  kEmbCheck = 64,
};

// Arguments of a bag kernel: `void kernel(const EmbArgs*)`. It computes `count` consecutive bags
// (gather: `count` consecutive indices) and writes their output rows; the inputs were validated
// by the driver (indices in range, offsets consistent), so the kernel checks nothing.
struct EmbArgs {
  const uint8_t* table;      // row r at table + r * row_stride
  const void* indices;       // the whole index array (int32 or int64)
  const void* offsets;       // offsets / lengths entry of the first bag of this call
  const float* weights;      // the whole weight array (weighted), or nullptr
  const int32_t* remap;      // remap table (kEmbRemap), or nullptr
  uint8_t* out;              // output row of the first bag of this call
  int64_t row_stride;        // bytes between table rows
  int64_t out_stride;        // bytes between output rows
  int64_t count;             // bags (gather: indices) in this call, >= 1
  int64_t index_begin;       // first index of the first bag (lengths and gather modes)
  int64_t prefetch_limit;    // prefetch row i + distance only while i < prefetch_limit
  const uint8_t* scales;     // SPLIT MX rows: the E8M0 bytes, [rows][ceil(dim / 32)]
};

// Arguments of the check kernel: `int64_t check(const EmbCheckArgs*)` returns 1 if some index,
// read as unsigned, is >= limit (a negative index included), else 0.
struct EmbCheckArgs {
  const void* indices;
  int64_t n;
  uint64_t limit;  // <= 2^31 for int32 indices
};

using EmbKernel = void (*)(const EmbArgs*);
using EmbCheckKernel = int64_t (*)(const EmbCheckArgs*);

const KernelFamily& embedding_bag_family();

// Largest number of accumulator vectors a block may use for this key's format and ISA (src/ops
// picks the blocking within it).
int emb_max_block_vectors(const KernelKey& key);
// Elements a vector of the key's ISA holds (8 or 16), and vectors per decode group (4-bit rows
// decode 2 vectors at a time, 2-bit rows 4).
int emb_lanes(const KernelKey& key);
int emb_group_vectors(const KernelKey& key);

}  // namespace qj
