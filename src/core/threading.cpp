#include "src/core/threading.h"

#include <thread>
#include <vector>

namespace qj {
namespace {
qj_parallel_for_fn g_fn = nullptr;
void* g_pool = nullptr;
}  // namespace

void set_parallel_for(qj_parallel_for_fn fn, void* pool) {
  g_fn = fn;
  g_pool = pool;
}

void parallel_for(qj_task_fn fn, void* ctx, int32_t n) {
  if (n <= 1) {
    fn(ctx, 0, 1);
    return;
  }
  if (g_fn) {
    g_fn(g_pool, fn, ctx, n);
    return;
  }
  // Built-in: n-1 short-lived threads plus the caller. Servers with a pool should install it.
  std::vector<std::thread> th;
  th.reserve(n - 1);
  for (int32_t t = 1; t < n; ++t) th.emplace_back(fn, ctx, t, n);
  fn(ctx, 0, n);
  for (auto& x : th) x.join();
}

}  // namespace qj
