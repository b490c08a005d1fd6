#include "src/core/isa.h"

#include <cpuid.h>
#include <cpuinfo.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "src/core/log.h"
#include "src/core/status.h"

namespace qj {
namespace {

// The CPU features straight from CPUID and XGETBV (the OS must save the AVX / AVX-512 state), not
// through cpuinfo: in a process that also loads another copy of cpuinfo (PyTorch's libc10.so
// exports its own, of another version), the dynamic linker binds this library's cpuinfo symbols
// to whichever copy comes first. Measured 2026-12-01 with fbgemm-gpu's fbgemm.so and torch in one
// process: cpuinfo_initialize and cpuinfo_isa bound to libc10's, whose struct layout differs,
// and every plan fell back to the scalar reference, ~100x slower. test/cpuinfo_interposed_test.c
// covers that case; core_test checks these bits against cpuinfo's where cpuinfo is our own.
CpuFeatures detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  const unsigned max_leaf = a;
  __cpuid_count(1, 0, a, b, c, d);
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28);
  const bool fma = c & (1u << 12), f16c = c & (1u << 29);
  uint64_t xcr0 = 0;
  if (osxsave) {
    uint32_t lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
  }
  const bool ymm_os = avx && (xcr0 & 0x6) == 0x6;          // SSE and AVX state
  const bool zmm_os = ymm_os && (xcr0 & 0xe0) == 0xe0;     // opmask, ZMM_Hi256, Hi16_ZMM
  if (max_leaf < 7 || !ymm_os) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const unsigned leaf7_sub = a, b7 = b, c7 = c;
  f.avx2 = b7 & (1u << 5);
  f.fma = fma;
  f.f16c = f16c;
  f.bmi2 = b7 & (1u << 8);
  if (zmm_os) {
    f.avx512f = b7 & (1u << 16);
    f.avx512dq = b7 & (1u << 17);
    f.avx512bw = b7 & (1u << 30);
    f.avx512vl = b7 & (1u << 31);
    f.avx512vbmi = c7 & (1u << 1);
    f.avx512vnni = c7 & (1u << 11);
    if (leaf7_sub >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      f.avx512bf16 = a & (1u << 5);
    }
  }
  return f;
}

// True if this library's cpuinfo symbols resolve to a cpuinfo library (its own dependency), not
// to another copy that a different library exports (see detect()).
bool own_cpuinfo() {
  static const bool own = [] {
    Dl_info info;
    const bool ok = dladdr(reinterpret_cast<void*>(&cpuinfo_initialize), &info) != 0 && info.dli_fname &&
                    std::strstr(info.dli_fname, "libcpuinfo") != nullptr;
    if (!ok)
      QJ_LOG(1, "cpuinfo's symbols resolve to %s, not to libcpuinfo (another copy in this process); cache sizes "
               "from CPUID instead", info.dli_fname ? info.dli_fname : "?");
    return ok;
  }();
  return static_cast<bool>(own);
}

qj_isa tier_of(const CpuFeatures& f) {
  if (!(f.avx2 && f.fma && f.f16c)) return QJ_ISA_SCALAR;
  // (BMI2: every AVX-512 CPU has it; the AVX-512 MX / BDR converters use pext.)
  if (!(f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.bmi2)) return QJ_ISA_AVX2;
  if (!f.avx512vnni) return QJ_ISA_AVX512;
  return QJ_ISA_AVX512_VNNI;
}

std::atomic<int>& cap() {
  static std::atomic<int> c = [] {
    qj_isa best = cpu_isa();
    const char* env = std::getenv("QJ_MAX_ISA");
    if (!env || !*env) return static_cast<int>(best);
    qj_isa want;
    if (!parse_isa(env, &want)) {
      log_line("QJ_MAX_ISA=%s is not one of scalar, avx2, avx512, avx512_vnni; ignored", env);
      return static_cast<int>(best);
    }
    if (want > best) {
      log_line("QJ_MAX_ISA=%s is above this CPU (%s); using %s", env, isa_name(best), isa_name(best));
      return static_cast<int>(best);
    }
    return static_cast<int>(want);
  }();
  return c;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

qj_isa cpu_isa() {
  static const qj_isa t = tier_of(cpu_features());
  return t;
}

namespace {
// The size cpuinfo reports for the first cache of a level, or `fallback` when it reports none
// (or less than `min`).
size_t cache_size(uint32_t (*count)(), const cpuinfo_cache* (*first)(uint32_t), int level, size_t min,
                  size_t fallback) {
  size_t b = 0;
  if (own_cpuinfo()) {
    if (cpuinfo_initialize() && count() > 0) b = first(0)->size;
  } else {
    b = cpuid_cache_bytes(level);
  }
  return b >= min ? b : fallback;
}
}  // namespace

size_t cpuid_cache_bytes(int level) {
  // AMD: leaf 0x8000001D (with TOPOEXT), Intel: leaf 4; the same layout (EAX type and level; EBX
  // ways, partitions and line size, ECX sets, each minus one). The size of one instance, as
  // cpuinfo reports it. (glibc's sysconf reported 384 MiB of L3 on this guest, cpuinfo and CPUID
  // 32 MiB.)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
  const unsigned max_leaf = a;
  const bool amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "AuthenticAMD"
  unsigned leaf = 0;
  if (amd) {
    __cpuid(0x80000000u, a, b, c, d);
    if (a >= 0x8000001du) {
      __cpuid(0x80000001u, a, b, c, d);
      if (c & (1u << 22)) leaf = 0x8000001du;  // TOPOEXT
    }
  } else if (max_leaf >= 4) {
    leaf = 4;
  }
  if (!leaf) return 0;
  for (unsigned i = 0; i < 16; ++i) {
    __cpuid_count(leaf, i, a, b, c, d);
    const unsigned type = a & 0x1f, lv = (a >> 5) & 7;
    if (type == 0) break;
    if (static_cast<int>(lv) != level || (type != 1 && type != 3)) continue;  // data or unified
    return static_cast<size_t>((b >> 22) + 1) * (((b >> 12) & 0x3ff) + 1) * ((b & 0xfff) + 1) * (size_t{c} + 1);
  }
  return 0;
}

size_t l2_cache_bytes() {
  static const size_t bytes =
      cache_size(cpuinfo_get_l2_caches_count, cpuinfo_get_l2_cache, 2, size_t(128) << 10,
                 size_t(1) << 20);
  return bytes;
}

size_t l3_cache_bytes() {
  static const size_t bytes =
      cache_size(cpuinfo_get_l3_caches_count, cpuinfo_get_l3_cache, 3, size_t(1) << 20,
                 size_t(32) << 20);
  return bytes;
}

size_t l1d_cache_bytes() {
  static const size_t bytes =
      cache_size(cpuinfo_get_l1d_caches_count, cpuinfo_get_l1d_cache, 1, size_t(16) << 10,
                 size_t(32) << 10);
  return bytes;
}

namespace {
std::atomic<int> g_amd_family_override{-1};
}  // namespace

void set_amd_family_override(int family) { g_amd_family_override.store(family, std::memory_order_relaxed); }

int amd_family() {
  const int forced = g_amd_family_override.load(std::memory_order_relaxed);
  if (forced >= 0) return forced;
  static const int family = [] {  // CPUID directly (see detect())
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
    const bool amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "AuthenticAMD"
    if (!amd) return 0;
    __cpuid(1, a, b, c, d);
    const int base = static_cast<int>((a >> 8) & 0xf), ext = static_cast<int>((a >> 20) & 0xff);
    return base == 0xf ? base + ext : base;
  }();
  return family;
}
qj_isa max_isa() { return static_cast<qj_isa>(cap().load(std::memory_order_relaxed)); }

qj_status set_max_isa(qj_isa isa) {
  if (static_cast<int>(isa) < QJ_ISA_SCALAR || static_cast<int>(isa) > QJ_ISA_AVX512_VNNI)
    return fail(QJ_ERR_INVALID_ARGUMENT, "qj_set_max_isa: isa=%d is not a qj_isa value",
                static_cast<int>(isa));
  if (isa > cpu_isa())
    return fail(QJ_ERR_ISA_UNAVAILABLE, "qj_set_max_isa: isa=%s is above this CPU's %s",
                isa_name(isa), isa_name(cpu_isa()));
  cap().store(static_cast<int>(isa), std::memory_order_relaxed);
  return QJ_OK;
}

const char* isa_name(qj_isa isa) {
  switch (isa) {
    case QJ_ISA_SCALAR: return "scalar";
    case QJ_ISA_AVX2: return "avx2";
    case QJ_ISA_AVX512: return "avx512";
    case QJ_ISA_AVX512_VNNI: return "avx512_vnni";
  }
  return "unknown";
}

bool parse_isa(const char* s, qj_isa* out) {
  struct { const char* name; qj_isa isa; } table[] = {
      {"scalar", QJ_ISA_SCALAR}, {"avx2", QJ_ISA_AVX2}, {"avx512", QJ_ISA_AVX512},
      {"avx512_vnni", QJ_ISA_AVX512_VNNI}, {"avx512vnni", QJ_ISA_AVX512_VNNI}};
  for (auto& e : table)
    if (std::strcmp(s, e.name) == 0) { *out = e.isa; return true; }
  return false;
}

}  // namespace qj
