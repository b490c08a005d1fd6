#include "src/core/isa.h"

#include <cpuinfo.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "src/core/log.h"
#include "src/core/status.h"

namespace qj {
namespace {

CpuFeatures detect() {
  CpuFeatures f;
  if (!cpuinfo_initialize()) return f;
  f.avx2 = cpuinfo_has_x86_avx2();
  f.fma = cpuinfo_has_x86_fma3();
  f.f16c = cpuinfo_has_x86_f16c();
  f.bmi2 = cpuinfo_has_x86_bmi2();
  f.avx512f = cpuinfo_has_x86_avx512f();
  f.avx512bw = cpuinfo_has_x86_avx512bw();
  f.avx512vl = cpuinfo_has_x86_avx512vl();
  f.avx512dq = cpuinfo_has_x86_avx512dq();
  f.avx512vnni = cpuinfo_has_x86_avx512vnni();
  f.avx512vbmi = cpuinfo_has_x86_avx512vbmi();
  f.avx512bf16 = cpuinfo_has_x86_avx512bf16();
  return f;
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
size_t cache_size(uint32_t (*count)(), const cpuinfo_cache* (*first)(uint32_t), size_t min, size_t fallback) {
  size_t b = 0;
  if (cpuinfo_initialize() && count() > 0) b = first(0)->size;
  return b >= min ? b : fallback;
}
}  // namespace

size_t l2_cache_bytes() {
  static const size_t bytes =
      cache_size(cpuinfo_get_l2_caches_count, cpuinfo_get_l2_cache, size_t(128) << 10, size_t(1) << 20);
  return bytes;
}

size_t l3_cache_bytes() {
  static const size_t bytes =
      cache_size(cpuinfo_get_l3_caches_count, cpuinfo_get_l3_cache, size_t(1) << 20, size_t(32) << 20);
  return bytes;
}

size_t l1d_cache_bytes() {
  static const size_t bytes =
      cache_size(cpuinfo_get_l1d_caches_count, cpuinfo_get_l1d_cache, size_t(16) << 10, size_t(32) << 10);
  return bytes;
}

int amd_family() {
  static const int family = [] {
    if (!cpuinfo_initialize() || cpuinfo_get_cores_count() == 0) return 0;
    const cpuinfo_core* core = cpuinfo_get_core(0);
    if (core->vendor != cpuinfo_vendor_amd) return 0;
    const uint32_t eax = core->cpuid;  // CPUID leaf 1
    const int base = static_cast<int>((eax >> 8) & 0xf), ext = static_cast<int>((eax >> 20) & 0xff);
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
