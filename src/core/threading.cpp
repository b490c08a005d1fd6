#include "src/core/threading.h"

#include <pthread.h>

#if defined(__linux__)
#include <sched.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "src/core/fp_env.h"
#include "src/core/log.h"
#include "src/core/status.h"

namespace qj {
namespace {

qj_parallel_for_fn g_fn = nullptr;
void* g_pool = nullptr;

// The built-in pool: persistent workers (started on first use, grown on demand) so that a
// parallel run costs a wake-up, not a thread creation. One parallel_for runs at a time;
// concurrent callers queue on `run_mu`.
//
// The slices are claimed, not assigned: the caller and the woken workers each take the next
// unclaimed slice until none is left (claim_, tagged with the call's generation so that a worker
// that wakes after its call has ended claims nothing), and the call ends when every slice is
// done. A worker that wakes late thus never holds the call up: the caller runs the slices that
// no worker took. (Which thread runs a slice does not matter: a slice's output is the same on
// any thread.)
//
// A wake-up through the condition variable took 20-40 us per call on this machine's guest (a
// futex wake of a sleeping vCPU thread, then the caller's own wake-up by the last worker): more
// than a small call's whole work. So for a short while after a slice (poll_time) a worker polls for
// the next call before it sleeps, and the caller polls for the workers before it waits, as
// OpenMP runtimes do; only while the call's threads fit the CPUs of the caller's affinity mask,
// and only workers that had a slice in the last call, so that spare or oversubscribed workers
// never spin against the threads that hold the work.
class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  qj_status run(qj_task_fn fn, void* ctx, int32_t n, int64_t work_ns) {
    std::lock_guard<std::mutex> run_lock(run_mu_);
    bool spin;
    uint64_t gen;
    const auto now = std::chrono::steady_clock::now();
    const bool sporadic = now - last_end_ > poll_time();
    struct EndStamp {  // last_end_ = the end of this call, on every return (under run_mu_)
      std::chrono::steady_clock::time_point& t;
      ~EndStamp() { t = std::chrono::steady_clock::now(); }
    } stamp{last_end_};
    // A short call, the previous one over for longer than the workers poll, and the workers it
    // needs asleep (or never started): the caller alone. (Calls back to back wake the workers
    // once; from then on they find them polling.)
    if (work_ns >= 0 && work_ns < inline_limit_ns() && sporadic) {
      bool asleep;
      {
        std::lock_guard<std::mutex> lock(mu_);
        asleep = awake_ < n - 1;
      }
      if (asleep) {  // as one slice: every caller's output is the same for any partition
        inline_calls_.fetch_add(1, std::memory_order_relaxed);
        fn(ctx, 0, 1);
        return QJ_OK;
      }
    }
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
          ++awake_;
        }
      } catch (const std::exception& e) {
        return fail(QJ_ERR_OUT_OF_MEMORY, "cannot start %d threads (%zu running): %s", n - 1, workers_.size(),
                    e.what());
      }
      fn_ = fn;
      ctx_ = ctx;
      n_ = n;
      spin = poll_time().count() > 0 && n <= usable_cpus(now);
      spin_ = spin;
      done_.store(0, std::memory_order_relaxed);
      gen = generation_.load(std::memory_order_relaxed) + 1;
      claim_.store(static_cast<uint64_t>(static_cast<uint32_t>(gen)) << 32, std::memory_order_relaxed);
      generation_.store(gen, std::memory_order_release);
    }
    cv_.notify_all();
    run_claimed(static_cast<uint32_t>(gen), fn, ctx, n, false);
    auto all_done = [&] { return done_.load(std::memory_order_acquire) == n; };
    if (all_done() || (spin && poll(all_done))) return QJ_OK;
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, all_done);
    return QJ_OK;
  }

 private:
  // A count of microseconds from the environment variable `name` (0 to 1000000), else `dflt`.
  static std::chrono::microseconds env_us(const char* name, int64_t dflt) {
    const char* e = std::getenv(name);
    if (e && *e) {
      char* end = nullptr;
      const unsigned long long x = std::strtoull(e, &end, 10);
      if (end && *end == '\0' && x <= 1000000) return std::chrono::microseconds(static_cast<int64_t>(x));
      log_line("%s=%s is not a count of microseconds up to 1000000; using %lld", name, e, static_cast<long long>(dflt));
    }
    return std::chrono::microseconds(dflt);
  }
  // How long to poll: QJ_POOL_POLL_US (0: sleep at once), default 100 us.
  static std::chrono::microseconds poll_time() {
    static const std::chrono::microseconds v = env_us("QJ_POOL_POLL_US", 100);
    return v;
  }
  // Calls estimated below this run on the caller while the workers sleep: QJ_POOL_INLINE_US
  // (0: never), default kInlineWorkNs.
  static int64_t inline_limit_ns() {
    static const int64_t v = env_us("QJ_POOL_INLINE_US", kInlineWorkNs / 1000).count() * 1000;
    return v;
  }

  // CPUs this thread may run on (its affinity mask: a caller pinned with taskset to fewer CPUs
  // than the call's threads must not poll for workers that wait for its CPU). The system call
  // took 0.3 us here, a third of a small parallel call, so each thread asks again at most every
  // 10 ms (an affinity change is seen that much later: it only decides whether to poll).
  static int32_t usable_cpus(std::chrono::steady_clock::time_point now) {
    thread_local int32_t cpus = 0;
    thread_local std::chrono::steady_clock::time_point asked{};
    if (cpus > 0 && now - asked < std::chrono::milliseconds(10)) return cpus;
    asked = now;
    cpus = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) cpus = std::max(1, CPU_COUNT(&set));
#endif
    return cpus;
  }

  // Polls ready() for up to poll_time(); true if it became true.
  template <class Ready>
  static bool poll(Ready&& ready) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto limit = poll_time();
    for (;;) {
      for (int i = 0; i < 64; ++i) {
        if (ready()) return true;
        cpu_relax();
      }
      if (std::chrono::steady_clock::now() - t0 > limit) return ready();
    }
  }
  static void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  void worker(int id) {
    DefaultFpEnv fp_env;  // the library's threads compute in the default environment (fp_env.h)
    uint64_t seen = 0;
    bool polls = false;  // had a slice in the last call, which was allowed to poll
    for (;;) {
      qj_task_fn fn;
      void* ctx;
      int32_t n;
      if (polls)
        poll([&] {
          return generation_.load(std::memory_order_acquire) != seen || stop_.load(std::memory_order_acquire);
        });
      {
        std::unique_lock<std::mutex> lock(mu_);
        --awake_;
        cv_.wait(lock, [&] {
          return stop_.load(std::memory_order_relaxed) || generation_.load(std::memory_order_relaxed) != seen;
        });
        ++awake_;
        if (stop_.load(std::memory_order_relaxed)) return;
        seen = generation_.load(std::memory_order_relaxed);
        polls = id < n_ && spin_;
        if (id >= n_) continue;  // not needed in this round
        fn = fn_;
        ctx = ctx_;
        n = n_;
      }
      run_claimed(static_cast<uint32_t>(seen), fn, ctx, n, true);
    }
  }

  // Claims and runs slices of the call of generation `gen` (its low 32 bits) until none is left
  // or that call is over. The thread that completes the last slice wakes the caller (worker).
  void run_claimed(uint32_t gen, qj_task_fn fn, void* ctx, int32_t n, bool worker) {
    for (;;) {
      uint64_t v = claim_.load(std::memory_order_acquire);
      do {
        if (static_cast<uint32_t>(v >> 32) != gen || static_cast<int32_t>(static_cast<uint32_t>(v)) >= n) return;
      } while (!claim_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_acquire));
      fn(ctx, static_cast<int32_t>(static_cast<uint32_t>(v)), n);
      if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == n && worker) {
        std::lock_guard<std::mutex> lock(mu_);
        done_cv_.notify_one();
      }
    }
  }

  std::mutex run_mu_, mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  qj_task_fn fn_ = nullptr;
  void* ctx_ = nullptr;
  int32_t n_ = 0;
  bool spin_ = false;  // the current call polls (under mu_)
  std::chrono::steady_clock::time_point last_end_{};  // end of the last call (under run_mu_)
  // Workers not blocked on cv_ (polling or running), under mu_. A worker counts as awake from its
  // start until it first waits, and again from each wake-up until its next wait.
  int32_t awake_ = 0;
  std::atomic<int32_t> done_{0};      // slices of the current call completed
  std::atomic<uint64_t> claim_{0};    // (generation & 0xffffffff) << 32 | next slice to claim
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};

 public:
  std::atomic<uint64_t> inline_calls_{0};  // calls run on the caller alone (tests)
  Pool* forked_from = nullptr;              // in a fork() child: the parent's pool (see pool())
};

// The process's pool. A child of fork() has none of the parent's workers, and the parent's
// threads may have held the pool's locks at the fork: the child starts from a new pool, and the
// parent's is left untouched there (never destroyed: joining its threads would crash the child
// at exit; its memory is the parent's copy). The owner destroys the pool of its own process at
// exit (joining the workers).
Pool* g_pool_instance = nullptr;
void new_pool_after_fork() {
  Pool* p = new Pool;
  p->forked_from = g_pool_instance;  // (kept reachable, never used)
  g_pool_instance = p;
}
struct PoolOwner {
  PoolOwner() {
    g_pool_instance = new Pool;
    pthread_atfork(nullptr, nullptr, new_pool_after_fork);
  }
  ~PoolOwner() {
    delete g_pool_instance;
    g_pool_instance = nullptr;
  }
};
Pool& pool() {
  static PoolOwner owner;
  return *g_pool_instance;
}

}  // namespace

void set_parallel_for(qj_parallel_for_fn fn, void* pool) {
  g_fn = fn;
  g_pool = pool;
}

qj_status parallel_for(qj_task_fn fn, void* ctx, int32_t n, int64_t work_ns) {
  if (n <= 1) {
    fn(ctx, 0, 1);
    return QJ_OK;
  }
  if (g_fn) {
    // The caller's pool runs the slices on its own threads: each in the default floating-point
    // environment (fp_env.h), whatever those threads have set.
    struct InEnv {
      qj_task_fn fn;
      void* ctx;
      static void run(void* p, int32_t t, int32_t nt) {
        const InEnv* e = static_cast<const InEnv*>(p);
        DefaultFpEnv fp_env;
        e->fn(e->ctx, t, nt);
      }
    } in_env{fn, ctx};
    g_fn(g_pool, &InEnv::run, &in_env, n);
    return QJ_OK;
  }
  return pool().run(fn, ctx, n, work_ns);
}

uint64_t pool_inline_calls() { return pool().inline_calls_.load(std::memory_order_relaxed); }

}  // namespace qj
