// Threading helpers: splitting work by qj_partition, and the pool behind *_run_parallel.
//
// quantjit follows FBGEMM's model: a run call computes the slice {thread_id, num_threads} of the
// problem, and the server's own pool calls it once per thread. Slices are contiguous ranges of
// work items, so any partition computes every output element with the same instructions in the
// same order: results are bit-identical for any thread count.
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>

namespace qj {

struct Range {
  int64_t begin, end;
};

// The t-th of n near-equal contiguous slices of [0, total).
inline Range split_range(int64_t total, int32_t t, int32_t n) {
  int64_t q = total / n, r = total % n;
  int64_t b = t * q + (t < r ? t : r);
  return {b, b + q + (t < r ? 1 : 0)};
}

// Runs fn(ctx, t, n) for t in [0, n) on the installed pool (or the built-in one) and returns when
// all are done. QJ_ERR_OUT_OF_MEMORY (with the message set) when the built-in pool cannot start
// the threads: then no slice has run.
[[nodiscard]] qj_status parallel_for(qj_task_fn fn, void* ctx, int32_t n);
void set_parallel_for(qj_parallel_for_fn fn, void* pool);

}  // namespace qj
