// Embedding-bag driver: plan (kernel key, blocking, prefetch distance), validation of a run's
// inputs, partitioning over threads, and the call into the JIT kernel or the reference.
//
// Validation comes first and covers the whole call, whatever the partition: every thread checks
// all offsets / lengths (scalar, O(num_bags)) and all indices (a vectorized JIT check, about 0.05
// ns per index), so a bad input fails every slice before any output row is written, and the error
// names the bag and the index. Rows are then read without checks.
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>
#include <string>

#include "src/core/kernel_cache.h"

namespace qj {

struct EmbeddingBagPlan {
  qj_embedding_bag_desc d{};   // copy of the caller's desc (remap points to the caller's table)
  int64_t row_stride = 0;      // bytes between table rows
  int64_t out_stride = 0;      // elements between output rows
  int out_bytes = 4;
  int32_t prefetch = 0;        // distance in indices actually used
  int64_t remap_max = -1;      // largest remap entry (-1: none / all pruned)
  qj_isa isa = QJ_ISA_SCALAR;  // tier of the kernel (SCALAR: the reference path)
  KernelRef kernel, check;
  std::string name;            // kernel name, or "emb_ref_..." for the reference path
};

// desc has passed the API's checks (enums, sizes). Validates the remap table, picks the key and
// generates (or fetches) the kernels; falls back to the reference (logged) when no JIT applies.
qj_status embedding_bag_plan_init(const qj_embedding_bag_desc& desc, EmbeddingBagPlan* p);

// Bytes of one natural (unpadded) table row of this format (the C API's row_stride check).
int64_t embedding_row_bytes(qj_dtype row_type, int64_t dim, bool scale_bias_first);

struct EmbeddingBagCall {
  const void* table;
  int64_t num_rows;
  int64_t num_bags;
  const void* indices;
  int64_t num_indices;
  const void* offsets_or_lengths;
  const float* weights;
  void* out;
  const uint8_t* scales;  // SPLIT MX rows
};

// Validates the whole call, then computes the slice thread_id of num_threads.
qj_status embedding_bag_run(const EmbeddingBagPlan& p, const EmbeddingBagCall& c, int32_t thread_id,
                            int32_t num_threads);

// Shared validation (also used by the row-wise AdaGrad driver); `fn` names the API call.
// Offsets: offsets[0] == 0, non-decreasing, offsets[num_bags] == num_indices. Lengths: >= 0,
// summing to num_indices. *prefix receives the first index of bag `bag_begin`.
qj_status validate_bags(const char* fn, int offset_bits, bool use_lengths, const void* ol,
                        int64_t num_bags, int64_t num_indices, int64_t bag_begin, int64_t* prefix);
// The bags of slice t of n, balanced by bag cost (its indices + 1, so empty bags count too) rather
// than by bag count: [*begin, *end), and *prefix = the first index of bag *begin. For validated
// offsets / lengths; any split gives the same output.
void bag_slice(int offset_bits, bool use_lengths, const void* ol, int64_t num_bags, int64_t num_indices,
               int32_t t, int32_t n, int64_t* begin, int64_t* end, int64_t* prefix);
// Scalar index check against [0, limit); names the bag (bags == nullptr: the bag is the index
// position, as in gather mode).
qj_status validate_indices_scalar(const char* fn, int index_bits, const void* indices,
                                  int64_t num_indices, uint64_t limit, const char* what,
                                  int offset_bits, bool use_lengths, const void* ol,
                                  int64_t num_bags, bool gather);

// Vector width choice at the AVX-512 tier: -1 the built-in rule (ymm for quantized rows at most
// half a zmm decode group long), 0 always zmm, 1 always ymm. For tests.
void embedding_set_prefer_ymm(int v);

// MX rows in the SPLIT layout (codes in the table, E8M0 scales in a separate array).
inline bool emb_mx_split_rows(qj_dtype t) { return t == QJ_MXINT8 || t == QJ_MXFP8_E4M3 || t == QJ_MXFP8_E5M2; }

// The prefetch distance used when the desc asks for the library's choice (-1).
int32_t embedding_default_prefetch(qj_dtype row_type, int64_t dim);
// The prefetch instruction used for QJ_PREFETCH_HINT_AUTO: T0 for float rows of at most 64
// elements, T2 otherwise.
qj_prefetch_hint embedding_default_hint(qj_dtype row_type, int64_t dim);

}  // namespace qj
