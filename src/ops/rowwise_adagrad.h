// Fused embedding-bag backward with a row-wise sparse optimizer (AdaGrad or SGD), deterministic.
//
// Why coalesce: when a row occurs several times in a batch, FBGEMM's RowWiseSparseAdaGradFused
// updates it once per occurrence, and with threads the occurrences race, so results change from
// run to run. Here each unique row's gradient is summed over its occurrences in position order
// (the reference sorts by (row, position); the driver groups them with a hash table and chains
// each row's positions in increasing order, which is the same order), and the row is updated
// once by exactly one thread: the result is bit-identical for any thread count. The
// per-occurrence order is kept as an explicitly named mode for users who need FBGEMM's semantics.
//
// Phases: validate everything (nothing is written on error); find the rows that occur more than
// once and chain their occurrences; split the bags and the repeated rows into contiguous ranges
// per thread; per row, G = sum of e_i * grad in position order (for a row that occurs once, its
// bag's gradient times e_i, updated in the bag loop), then the optimizer step. The vector code (AVX2 / AVX-512 by the ISA cap) performs the
// operations of src/ref/rowwise_adagrad_ref.h lane by lane, including the 8-lane partial sums of
// G^2, so every tier gives the reference's bits. Details and measurements: rowwise_adagrad.cpp.
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>

namespace qj {

struct AdagradCall {
  void* table;
  float* momentum;
  int64_t num_rows, num_bags;
  const void* indices;
  int64_t num_indices;
  const void* offsets_or_lengths;
  const float* weights;
  const float* grad;
  uint64_t seed;
};

// desc has passed the API's checks.
qj_status rowwise_adagrad_fused(const qj_rowwise_adagrad_desc& d, const AdagradCall& c, int32_t num_threads);

// Tests only: how rows ahead are prefetched in calls from now on: -1 by table and row size
// (default), 0 into L1 (prefetchw), 1 into L2 (prefetcht1), 2 into L1 and also twice as far ahead
// into L2. The results are the same either way.
void rowwise_adagrad_force_prefetch_l2(int mode);

// The grouping's hash of a row (Fibonacci hashing); a table of 2^b slots takes its top b bits, so
// rows whose hashes share the top 16 bits start at the same slot in every table of up to 2^16
// slots (tests use it to build colliding rows).
inline uint64_t rowwise_adagrad_row_hash(uint64_t row) { return row * 0x9E3779B97F4A7C15ull; }

}  // namespace qj
