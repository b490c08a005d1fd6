#include "src/core/kernel_cache.h"

#include <asmjit/x86.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "src/core/jit_isa_check.h"
#include "src/core/jit_memory.h"
#include "src/core/log.h"
#include "src/core/status.h"

namespace qj {

uint64_t KernelKey::hash() const {
  // The 64 key bytes as 8 words, each pair folded by one 64 x 64 -> 128-bit multiply (the high
  // half xor the low, as wyhash mixes), then the xor of the four folds folded once more. The folds
  // are independent, so their multiplies overlap, where the serial FNV-1a chain this replaced had
  // eight dependent multiplies (and ran twice a lookup, for the shard and in the map).
  uint64_t w[8];
  std::memcpy(w, this, sizeof w);
  auto mix = [](uint64_t a, uint64_t b) {
    const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
    return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
  };
  constexpr uint64_t s0 = 0xa0761d6478bd642full, s1 = 0xe7037ed1a0b428dbull;
  constexpr uint64_t s2 = 0x8ebc6af09c88c6e3ull, s3 = 0x589965cc75374cc3ull;
  const uint64_t h = mix(w[0] ^ s0, w[1] ^ s1) ^ mix(w[2] ^ s2, w[3] ^ s3) ^ mix(w[4] ^ s1, w[5] ^ s2) ^
                     mix(w[6] ^ s3, w[7] ^ s0);
  return mix(h ^ s0, s3);
}

struct CachedKernel {
  KernelKey key;
  JitBlock block;
  std::string name;
  double gen_us = 0;
  std::atomic<uint64_t> last_use{0};
  // single-flight state
  std::mutex m;
  std::condition_variable cv;
  std::atomic<int> state{0};  // 0 generating, 1 ready, 2 failed
  qj_status status = QJ_OK;
  std::string error;
  ~CachedKernel();
};

namespace {

// A key with its hash, computed once per lookup (for the shard and the map alike).
struct HashedKey {
  KernelKey key;
  uint64_t hash;
  bool operator==(const HashedKey& o) const { return hash == o.hash && key == o.key; }
};
struct KeyHash {
  size_t operator()(const HashedKey& k) const { return static_cast<size_t>(k.hash); }
};

constexpr int kShards = 16;

struct Shard {
  std::mutex m;
  std::unordered_map<HashedKey, std::shared_ptr<CachedKernel>, KeyHash> map;
};

struct Stats {
  std::atomic<uint64_t> misses{0}, evictions{0}, code_bytes{0}, gen_ns{0}, fallbacks{0};
  std::atomic<uint64_t> entries{0};
  // Lookups so far, the clock of the LRU order; hits are the lookups that were neither misses nor
  // waits for a generation that failed (one atomic increment per hit, not two).
  std::atomic<uint64_t> tick{0};
  std::atomic<uint64_t> failed_waits{0};
};

// fork(): the shards' locks are taken around the fork, so that the child never starts with one
// held by a thread it does not have; the child then drops the entries still being generated
// (their generating threads stayed in the parent: a lookup would wait for them forever).
Shard* shard_array();
void lock_shards_for_fork() {
  for (int i = 0; i < kShards; ++i) shard_array()[i].m.lock();
}
void unlock_shards_after_fork() {
  for (int i = kShards - 1; i >= 0; --i) shard_array()[i].m.unlock();
}
void child_after_fork() {
  unlock_shards_after_fork();
  for (int i = 0; i < kShards; ++i) {
    Shard& sh = shard_array()[i];
    for (auto it = sh.map.begin(); it != sh.map.end();) it = it->second->state == 0 ? sh.map.erase(it) : std::next(it);
  }
}
Shard* shard_array() {
  static Shard s[kShards];
  return s;
}
Shard* shards() {
  static Shard* s = [] {
    Shard* a = shard_array();
    pthread_atfork(lock_shards_for_fork, unlock_shards_after_fork, child_after_fork);
    return a;
  }();
  return s;
}
Stats& stats() {
  static Stats s;
  return s;
}

uint64_t max_bytes() {
  static const uint64_t v = [] {
    const char* e = std::getenv("QJ_CACHE_MAX_BYTES");
    if (e && *e) {
      // Decimal digits only, and no wrap-around (strtoull would take "-1" as 2^64 - 1).
      uint64_t x = 0;
      const char* c = e;
      for (; *c >= '0' && *c <= '9'; ++c) {
        const uint64_t d = static_cast<uint64_t>(*c - '0');
        if (x > (UINT64_MAX - d) / 10) break;
        x = x * 10 + d;
      }
      if (*c == '\0') return x;
      log_line("QJ_CACHE_MAX_BYTES=%s is not a byte count; using 64 MiB", e);
    }
    return static_cast<uint64_t>(64) << 20;
  }();
  return v;
}

void write_perf_map(const CachedKernel& k) {
  static const bool on = [] {
    const char* e = std::getenv("QJ_PERF_MAP");
    return e && std::atoi(e) != 0;
  }();
  if (!on) return;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  char path[64];
  std::snprintf(path, sizeof path, "/tmp/perf-%d.map", static_cast<int>(getpid()));
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%lx %zx %s\n", reinterpret_cast<unsigned long>(k.block.code), k.block.bytes,
                 k.name.c_str());
    std::fclose(f);
  }
}

struct EmitError : public asmjit::ErrorHandler {
  asmjit::Error err = asmjit::kErrorOk;
  std::string msg;
  void handleError(asmjit::Error e, const char* message, asmjit::BaseEmitter*) override {
    if (err == asmjit::kErrorOk) {
      err = e;
      msg = message;
    }
  }
};

struct FillCtx {
  asmjit::CodeHolder* code;
  size_t size;
};

bool fill_code(void* ctx, void* dst, void* final_addr) {
  auto* c = static_cast<FillCtx*>(ctx);
  if (c->code->relocateToBase(reinterpret_cast<uint64_t>(final_addr)) != asmjit::kErrorOk) return false;
  if (c->code->codeSize() > c->size) return false;
  return c->code->copyFlattenedData(dst, c->size, asmjit::CopySectionFlags::kPadTargetBuffer) ==
         asmjit::kErrorOk;
}

// Generates the code for k->key; fills k->block or k->status/error.
void generate(CachedKernel* k, const KernelFamily& fam) {
  auto t0 = std::chrono::steady_clock::now();
  k->name = fam.name(k->key);
  asmjit::CodeHolder code;
  code.init(asmjit::Environment::host());
  EmitError eh;
  code.setErrorHandler(&eh);
  IsaCheckedAssembler a(&code, k->key.isa, fam.extras ? fam.extras(k->key) : 0, jit_isa_check_enabled());
  std::string why;
  bool ok = fam.emit(k->key, a, &why);
  if (!ok || eh.err != asmjit::kErrorOk || !a.violation().empty()) {
    k->status = ok ? QJ_ERR_INTERNAL : QJ_ERR_UNSUPPORTED;
    k->error = !ok ? why : eh.err != asmjit::kErrorOk ? "asmjit: " + eh.msg : a.violation();
    if (ok && eh.err == asmjit::kErrorOk) note_jit_isa_violation(k->name, a.violation());
    return;
  }
  code.flatten();
  code.resolveUnresolvedLinks();
  FillCtx ctx{&code, code.codeSize()};
  if (eh.err != asmjit::kErrorOk || !jit_alloc_and_seal(ctx.size, fill_code, &ctx, &k->block)) {
    k->status = eh.err != asmjit::kErrorOk ? QJ_ERR_INTERNAL : QJ_ERR_OUT_OF_MEMORY;
    k->error = eh.err != asmjit::kErrorOk ? "asmjit: " + eh.msg : "cannot map JIT memory";
    return;
  }
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  k->gen_us = ns / 1000.0;
  stats().gen_ns += static_cast<uint64_t>(ns);
  stats().code_bytes += k->block.bytes;
  QJ_LOG(1, "jit,%s,%zu bytes,%.1f us", k->name.c_str(), ctx.size, k->gen_us);
  write_perf_map(*k);
}

// Drops unused kernels, least recently used first, until the cache is under its bound.
void evict_if_needed() {
  Stats& st = stats();
  uint64_t bound = max_bytes();
  while (st.code_bytes.load() > bound) {
    // Find the least recently used evictable entry across shards.
    int best_shard = -1;
    HashedKey best_key{};
    uint64_t best_tick = UINT64_MAX;
    for (int s = 0; s < kShards; ++s) {
      Shard& sh = shards()[s];
      std::lock_guard<std::mutex> lock(sh.m);
      for (auto& [key, k] : sh.map) {
        if (k.use_count() != 1 || k->state != 1) continue;  // held by a plan, or in flight
        uint64_t t = k->last_use.load(std::memory_order_relaxed);
        if (t < best_tick) {
          best_tick = t;
          best_shard = s;
          best_key = key;
        }
      }
    }
    if (best_shard < 0) return;  // everything is in use: the bound yields to live plans
    Shard& sh = shards()[best_shard];
    std::shared_ptr<CachedKernel> victim;
    {
      std::lock_guard<std::mutex> lock(sh.m);
      auto it = sh.map.find(best_key);
      if (it == sh.map.end() || it->second.use_count() != 1) continue;
      victim = std::move(it->second);
      sh.map.erase(it);
    }
    st.entries--;
    st.evictions++;
    QJ_LOG(2, "cache: evicted %s (%zu bytes)", victim->name.c_str(), victim->block.bytes);
  }
}

}  // namespace

CachedKernel::~CachedKernel() {
  if (block.code) {
    stats().code_bytes -= block.bytes;
    jit_free(block);
  }
}

KernelRef::KernelRef(std::shared_ptr<CachedKernel> k) : k_(std::move(k)) {}
void KernelRef::release() noexcept {
  if (!k_) return;
  k_.reset();
  if (stats().code_bytes.load(std::memory_order_relaxed) > max_bytes()) evict_if_needed();
}
void* KernelRef::entry() const { return k_ ? k_->block.code : nullptr; }
const std::string& KernelRef::name() const {
  static const std::string empty;
  return k_ ? k_->name : empty;
}
size_t KernelRef::code_bytes() const { return k_ ? k_->block.bytes : 0; }
double KernelRef::gen_us() const { return k_ && !hit_ ? k_->gen_us : 0.0; }

// The error of a failed generation (also for the threads that waited for it).
static qj_status generation_failed(const CachedKernel& k) {
  return fail(k.status, "kernel %s: %s", k.name.c_str(),
              !k.error.empty()                     ? k.error.c_str()
              : k.status == QJ_ERR_OUT_OF_MEMORY ? "out of memory while generating"
                                                 : "unexpected C++ exception while generating");
}

qj_status acquire_kernel(const KernelKey& key, const KernelFamily& fam, KernelRef* out) {
  Stats& st = stats();
  const HashedKey hk{key, key.hash()};
  Shard& sh = shards()[hk.hash % kShards];
  std::shared_ptr<CachedKernel> k;
  bool mine = false;
  {
    std::lock_guard<std::mutex> lock(sh.m);
    auto it = sh.map.find(hk);
    if (it != sh.map.end()) {
      k = it->second;
    } else {
      k = std::make_shared<CachedKernel>();
      k->key = key;
      sh.map.emplace(hk, k);
      mine = true;
    }
  }
  k->last_use.store(st.tick.fetch_add(1, std::memory_order_relaxed), std::memory_order_relaxed);
  if (mine) {
    st.misses++;
    // An exception out of the generator (bad_alloc from the emitter's containers, the name) must
    // still end the generation: it becomes the entry's failure, which wakes the waiters and
    // removes the entry below (left in state 0, every later lookup of the key would wait forever).
    try {
      generate(k.get(), fam);
    } catch (const std::bad_alloc&) {
      k->status = QJ_ERR_OUT_OF_MEMORY;
      k->error.clear();  // (no allocation: fail() below still names the status)
    } catch (...) {
      k->status = QJ_ERR_INTERNAL;
      k->error.clear();
    }
    {
      std::lock_guard<std::mutex> lock(k->m);
      k->state = k->status == QJ_OK ? 1 : 2;
    }
    k->cv.notify_all();
    if (k->status != QJ_OK) {
      std::lock_guard<std::mutex> lock(sh.m);
      auto it = sh.map.find(hk);
      if (it != sh.map.end() && it->second == k) sh.map.erase(it);
      return generation_failed(*k);
    }
    st.entries++;
    *out = KernelRef(std::move(k));
    evict_if_needed();
    return QJ_OK;
  }
  // A ready entry needs no lock (its state is stored, under k->m, after the code it publishes).
  if (k->state.load(std::memory_order_acquire) == 0) {
    std::unique_lock<std::mutex> lock(k->m);
    k->cv.wait(lock, [&] { return k->state != 0; });
  }
  if (k->state == 2) {
    st.failed_waits++;
    return generation_failed(*k);
  }
  *out = KernelRef(std::move(k));
  out->hit_ = true;
  return QJ_OK;
}

void cache_stats(qj_cache_stats_t* out) {
  Stats& st = stats();
  out->misses = st.misses.load();
  // Tick last: a lookup counted in misses or failed_waits was in tick first (its relaxed tick
  // increment happens before the seq_cst counter's, which these loads read). A lookup still in
  // flight is in tick alone and reads as a hit until it is classified.
  const uint64_t failed = st.failed_waits.load();
  out->hits = st.tick.load() - out->misses - failed;
  out->evictions = st.evictions.load();
  out->entries = st.entries.load();
  out->code_bytes = st.code_bytes.load();
  out->max_bytes = max_bytes();
  out->generation_ns = st.gen_ns.load();
  out->fallbacks = st.fallbacks.load();
}

void cache_clear() {
  for (int s = 0; s < kShards; ++s) {
    std::vector<std::shared_ptr<CachedKernel>> dead;  // freed outside the lock
    Shard& sh = shards()[s];
    std::lock_guard<std::mutex> lock(sh.m);
    for (auto it = sh.map.begin(); it != sh.map.end();) {
      if (it->second.use_count() == 1 && it->second->state == 1) {
        dead.push_back(std::move(it->second));
        it = sh.map.erase(it);
        stats().entries--;
      } else {
        ++it;
      }
    }
  }
}

void cache_note_fallback() { stats().fallbacks++; }

const char* isa_suffix(int isa) {
  switch (isa) {
    case QJ_ISA_AVX2: return "avx2";
    case QJ_ISA_AVX512: return "avx512";
    case QJ_ISA_AVX512_VNNI: return "avx512vnni";
    default: return "scalar";
  }
}

}  // namespace qj
