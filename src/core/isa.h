// CPU features and the ISA cap.
//
// The tiers form a chain (scalar < avx2 < avx512 < avx512_vnni), as oneDNN's ONEDNN_MAX_CPU_ISA
// and ruy's RUY_PATHS do. Plans are built for min(cpu tier, cap). Tests lower the cap to run
// every tier the host supports; raising it above the CPU is an error, never a silent downgrade.
#pragma once
#include <quantjit/quantjit.h>

#include <cstddef>

namespace qj {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false, bmi2 = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512vbmi = false, avx512bf16 = false;
};

const CpuFeatures& cpu_features();
qj_isa cpu_isa();              // best tier of this CPU
// Cache sizes from cpuinfo, or from CPUID (cpuid_cache_bytes) where another copy of cpuinfo in the
// process has taken its symbols (isa.cpp)
size_t l2_cache_bytes();       // private L2 of one core (1 MiB if unknown): blocking
size_t l1d_cache_bytes();      // L1 data cache of one core (32 KiB if unknown)
size_t l3_cache_bytes();       // the first L3 reported (32 MiB if unknown)
size_t cpuid_cache_bytes(int level);  // the data or unified cache of that level per CPUID, 0 if none
qj_isa max_isa();              // the cap in force (<= cpu_isa())
qj_status set_max_isa(qj_isa isa);
const char* isa_name(qj_isa isa);
// The CPU family of an AMD processor (CPUID leaf 1, base plus extended family: 0x19 Zen 3 / Zen 4,
// 0x1A Zen 5), 0 for other vendors. For tuning defaults measured per microarchitecture only; the
// Debian cpuinfo (2022) does not name Zen 4 or Zen 5. The rules read it where they apply (when a
// plan is made; per call for the tall INT8 kernels' row rule, src/ops/gemm.cpp) and never keep
// it, so that tests can take each family's choices on any CPU:
int amd_family();
// Tests: tune as if on this AMD family from now on (0: another vendor), or, with -1, as the CPU
// is again. The choices are tuning only, among kernels of the ISA tier in force and the plan's
// packing, so any family is safe on any CPU; plans made before keep their kernels.
void set_amd_family_override(int family);
bool parse_isa(const char* s, qj_isa* out);

}  // namespace qj
