// Threading helpers: splitting work by qj_partition, and the pool behind *_run_parallel.
//
// quantjit follows FBGEMM's model: a run call computes the slice {thread_id, num_threads} of the
// problem, and the server's own pool calls it once per thread. Slices are contiguous ranges of
// work items, so any partition computes every output element with the same instructions in the
// same order: results are bit-identical for any thread count.
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>
#include <mutex>
#include <new>
#include <string>

#include "src/core/status.h"

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
// work_ns: a rough estimate of the whole call's single-thread time (negative: unknown). When that
// is below QJ_POOL_INLINE_US (default kInlineWorkNs) and the workers the call needs are asleep,
// the built-in pool runs fn(ctx, 0, 1) on the calling thread instead (waking a worker costs more
// than such a call gains): callers pass work_ns only when one slice of the whole gives the same
// result as n slices.
[[nodiscard]] qj_status parallel_for(qj_task_fn fn, void* ctx, int32_t n, int64_t work_ns = -1);
// Waking a sleeping worker through the condition variable cost the caller 20-40 us on this
// machine's guest (the futex wake of a halted vCPU, measured inside notify_all), and the worker
// starts later still: with the workers asleep, 102 x 512 x 257 (71-73 us on one thread) took
// 109-126 us on two.
constexpr int64_t kInlineWorkNs = 100000;
void set_parallel_for(qj_parallel_for_fn fn, void* pool);
// Calls the built-in pool ran on the caller alone (kInlineWorkNs), since the process started.
uint64_t pool_inline_calls();

// parallel_for over slices that return a status: body(t, n) for t in [0, n). The first failing
// slice's status is returned with its message set again on the calling thread (a message is
// thread-local, and a pool may run slices on other threads).
template <class Body>
qj_status run_slices(int32_t n, const Body& body, int64_t work_ns = -1) {
  struct Ctx {
    const Body* body;
    std::mutex mu;
    qj_status st = QJ_OK;
    std::string msg;
  } ctx;
  ctx.body = &body;
  const qj_status started = parallel_for(
      [](void* v, int32_t t, int32_t nt) {
        auto* x = static_cast<Ctx*>(v);
        qj_status s;
        try {  // (no exception may leave a slice: on a pool's thread it would end the process)
          s = (*x->body)(t, nt);
        } catch (const std::bad_alloc&) {
          s = fail(QJ_ERR_OUT_OF_MEMORY, "out of memory in a slice of the call");
        } catch (...) {
          s = fail(QJ_ERR_INTERNAL, "unexpected C++ exception in a slice of the call");
        }
        if (s == QJ_OK) return;
        std::lock_guard<std::mutex> lock(x->mu);
        if (x->st != QJ_OK) return;
        x->st = s;
        try {
          x->msg = last_error();
        } catch (...) {  // (the status alone, then)
        }
      },
      &ctx, n, work_ns);
  if (started != QJ_OK) return started;
  return ctx.st == QJ_OK ? QJ_OK : fail(ctx.st, "%s", ctx.msg.c_str());
}

}  // namespace qj
