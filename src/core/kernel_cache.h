// The process-wide kernel cache.
//
// - Keyed by KernelKey bytes; sharded so that a hit takes one uncontended mutex.
// - Single flight: the first thread to miss on a key generates it; threads asking for the same
//   key meanwhile wait for that result instead of generating a copy.
// - Kernels are reference counted: a KernelRef (held by a plan) keeps its code mapped even if the
//   cache is cleared. Eviction (to stay under QJ_CACHE_MAX_BYTES, default 64 MiB) drops only
//   kernels that no live plan holds, least recently used first. If every kernel is in use the
//   bound is exceeded rather than failing a plan; qj_cache_stats shows it.
// - QJ_VERBOSE=1 prints one line per generated kernel: canonical name, bytes, microseconds.
//   QJ_PERF_MAP=1 appends "<addr> <size> <name>" to /tmp/perf-<pid>.map for `perf report`.
#pragma once
#include <quantjit/quantjit.h>

#include <memory>
#include <string>

#include "src/core/kernel_key.h"

#include <asmjit/core/api-config.h>
ASMJIT_BEGIN_NAMESPACE
namespace x86 {
class Assembler;
}
ASMJIT_END_NAMESPACE

namespace qj {

// A kernel family: a pure generator and the canonical naming of its keys (docs/kernel-naming.md).
struct KernelFamily {
  // Emits the kernel for `key`. Must not print or keep state. Returns false (and may fill `why`)
  // if the key is not supported; asmjit errors are caught by the cache.
  bool (*emit)(const KernelKey& key, asmjit::x86::Assembler& a, std::string* why);
  std::string (*name)(const KernelKey& key);
  // CPU features beyond key.isa's tier that the kernel for `key` may use (JitExtra bits of
  // src/core/jit_isa_check.h; null: none). Checked as the kernel is emitted when QJ_JIT_CHECK_ISA=1.
  uint32_t (*extras)(const KernelKey& key) = nullptr;
};

struct CachedKernel;  // opaque

class KernelRef {
 public:
  KernelRef() = default;
  explicit KernelRef(std::shared_ptr<CachedKernel> k);
  KernelRef(KernelRef&&) noexcept = default;
  KernelRef& operator=(KernelRef&& o) noexcept {
    if (this != &o) {
      release();
      k_ = std::move(o.k_);
      hit_ = o.hit_;
    }
    return *this;
  }
  ~KernelRef() { release(); }
  // Drops this reference; if the cache is over its bound, kernels nobody holds are evicted now
  // (not at the next generation).
  void release() noexcept;
  KernelRef(const KernelRef&) = delete;
  KernelRef& operator=(const KernelRef&) = delete;

  void* entry() const;
  const std::string& name() const;
  size_t code_bytes() const;
  double gen_us() const;  // generation time of this kernel (0 if it came from the cache)
  explicit operator bool() const { return k_ != nullptr; }
  template <class Fn>
  Fn fn() const { return reinterpret_cast<Fn>(entry()); }

 private:
  std::shared_ptr<CachedKernel> k_;
  friend qj_status acquire_kernel(const KernelKey&, const KernelFamily&, KernelRef*);
  bool hit_ = false;
};

// Look up or generate. On failure returns QJ_ERR_UNSUPPORTED / QJ_ERR_OUT_OF_MEMORY /
// QJ_ERR_INTERNAL with a message; the caller decides whether to fall back (and logs it).
qj_status acquire_kernel(const KernelKey& key, const KernelFamily& fam, KernelRef* out);

void cache_stats(qj_cache_stats_t* out);
void cache_clear();
void cache_note_fallback();
// Canonical name of the ISA for kernel names: "scalar", "avx2", "avx512", "avx512vnni".
const char* isa_suffix(int isa);

}  // namespace qj
