#include "src/core/threading.h"

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "src/core/status.h"

namespace qj {
namespace {

qj_parallel_for_fn g_fn = nullptr;
void* g_pool = nullptr;

// The built-in pool: persistent workers (started on first use, grown on demand) so that a
// parallel run costs a wake-up, not a thread creation. The caller runs slice 0 itself. One
// parallel_for runs at a time; concurrent callers queue on `run_mu`.
class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  qj_status run(qj_task_fn fn, void* ctx, int32_t n) {
    std::lock_guard<std::mutex> run_lock(run_mu_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Workers that cannot be started fail the call before any slice runs (the ones started
      // stay for later calls).
      try {
        // Reserved first: a started thread must never meet a failing vector growth (a joinable
        // std::thread destroyed terminates the process).
        if (static_cast<int32_t>(workers_.size()) < n - 1) workers_.reserve(static_cast<size_t>(n - 1));
        while (static_cast<int32_t>(workers_.size()) < n - 1) {
          int id = static_cast<int>(workers_.size()) + 1;
          workers_.emplace_back([this, id] { worker(id); });
        }
      } catch (const std::exception& e) {
        return fail(QJ_ERR_OUT_OF_MEMORY, "cannot start %d threads (%zu running): %s", n - 1, workers_.size(),
                    e.what());
      }
      fn_ = fn;
      ctx_ = ctx;
      n_ = n;
      pending_ = n - 1;
      ++generation_;
    }
    cv_.notify_all();
    fn(ctx, 0, n);
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    return QJ_OK;
  }

 private:
  void worker(int id) {
    uint64_t seen = 0;
    for (;;) {
      qj_task_fn fn;
      void* ctx;
      int32_t n;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        if (id >= n_) continue;  // not needed in this round
        fn = fn_;
        ctx = ctx_;
        n = n_;
      }
      fn(ctx, id, n);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }

  std::mutex run_mu_, mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  qj_task_fn fn_ = nullptr;
  void* ctx_ = nullptr;
  int32_t n_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

void set_parallel_for(qj_parallel_for_fn fn, void* pool) {
  g_fn = fn;
  g_pool = pool;
}

qj_status parallel_for(qj_task_fn fn, void* ctx, int32_t n) {
  if (n <= 1) {
    fn(ctx, 0, 1);
    return QJ_OK;
  }
  if (g_fn) {
    g_fn(g_pool, fn, ctx, n);
    return QJ_OK;
  }
  return pool().run(fn, ctx, n);
}

}  // namespace qj
