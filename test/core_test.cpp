// ISA cap, status names and errors through the C API.
#include <cpuinfo.h>
#include <gtest/gtest.h>
#include <quantjit/quantjit.h>

#include <cstdlib>
#include <set>
#include <string>
#include <thread>

#include "src/core/isa.h"
#include "src/core/kernel_key.h"
#include "test/test_util.h"

TEST(Core, StatusNames) {
  EXPECT_STREQ(qj_status_name(QJ_OK), "QJ_OK");
  EXPECT_STREQ(qj_status_name(QJ_ERR_CORRUPT_DATA), "QJ_ERR_CORRUPT_DATA");
  EXPECT_STREQ(qj_status_name(static_cast<qj_status>(999)), "QJ_ERR_UNKNOWN");
}

TEST(Core, VersionMatchesHeader) { EXPECT_STREQ(qj_version(), QJ_VERSION_STRING); }

TEST(Core, IsaCapBelowCpuWorksAboveIsRejected) {
  qj_isa cpu = qj_cpu_isa();
  for (qj_isa isa : qjt::supported_isas()) {
    qjt::IsaCap cap(isa);
    EXPECT_EQ(qj_max_isa(), isa);
  }
  if (cpu < QJ_ISA_AVX512_VNNI) {
    EXPECT_EQ(qj_set_max_isa(static_cast<qj_isa>(cpu + 1)), QJ_ERR_ISA_UNAVAILABLE);
    EXPECT_NE(std::string(qj_last_error()).find("above this CPU"), std::string::npos);
  }
  EXPECT_EQ(qj_set_max_isa(static_cast<qj_isa>(-1)), QJ_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(qj_last_error()).find("isa=-1"), std::string::npos);
  EXPECT_EQ(qj_max_isa(), cpu);
}

// The cache bound from QJ_CACHE_MAX_BYTES: a decimal byte count, or 64 MiB when unset or not one
// ("-1", an overflowing count, "12x"; ctest runs this binary with such values, see
// test/CMakeLists.txt, and checks the stderr line that reports them).
// The library reads the CPU's features (and, where cpuinfo is not its own, the cache sizes) from CPUID itself (src/core/isa.cpp: another copy of
// cpuinfo in the process can take cpuinfo's symbols, see cpuinfo_interposed_test): they must
// agree with cpuinfo's, which is this process's own copy here.
TEST(Core, CpuidFeaturesMatchCpuinfo) {
  ASSERT_TRUE(cpuinfo_initialize());
  const qj::CpuFeatures& f = qj::cpu_features();
  EXPECT_EQ(f.avx2, cpuinfo_has_x86_avx2());
  EXPECT_EQ(f.fma, cpuinfo_has_x86_fma3());
  EXPECT_EQ(f.f16c, cpuinfo_has_x86_f16c());
  EXPECT_EQ(f.bmi2, cpuinfo_has_x86_bmi2());
  EXPECT_EQ(f.avx512f, cpuinfo_has_x86_avx512f());
  EXPECT_EQ(f.avx512bw, cpuinfo_has_x86_avx512bw());
  EXPECT_EQ(f.avx512vl, cpuinfo_has_x86_avx512vl());
  EXPECT_EQ(f.avx512dq, cpuinfo_has_x86_avx512dq());
  EXPECT_EQ(f.avx512vnni, cpuinfo_has_x86_avx512vnni());
  EXPECT_EQ(f.avx512vbmi, cpuinfo_has_x86_avx512vbmi());
  EXPECT_EQ(f.avx512bf16, cpuinfo_has_x86_avx512bf16());
  // the cache sizes (the library's fallback when another cpuinfo holds the symbols)
  if (cpuinfo_get_l1d_caches_count()) EXPECT_EQ(qj::cpuid_cache_bytes(1), cpuinfo_get_l1d_cache(0)->size);
  if (cpuinfo_get_l2_caches_count()) EXPECT_EQ(qj::cpuid_cache_bytes(2), cpuinfo_get_l2_cache(0)->size);
  if (cpuinfo_get_l3_caches_count()) EXPECT_EQ(qj::cpuid_cache_bytes(3), cpuinfo_get_l3_cache(0)->size);
  // and the family, for AMD processors (0 for others)
  const cpuinfo_core* core = cpuinfo_get_cores_count() ? cpuinfo_get_core(0) : nullptr;
  ASSERT_NE(core, nullptr);
  const int family = core->vendor == cpuinfo_vendor_amd
                         ? [&] {
                             const int base = static_cast<int>((core->cpuid >> 8) & 0xf);
                             const int ext = static_cast<int>((core->cpuid >> 20) & 0xff);
                             return base == 0xf ? base + ext : base;
                           }()
                         : 0;
  EXPECT_EQ(qj::amd_family(), family);
  // The tests' override (QJ_TEST_AMD_FAMILY) replaces it until -1 gives the CPU's back.
  for (int forced : {0x1a, 0x19, 0}) {
    qj::set_amd_family_override(forced);
    EXPECT_EQ(qj::amd_family(), forced);
  }
  qj::set_amd_family_override(-1);
  EXPECT_EQ(qj::amd_family(), family);
}

TEST(Core, CacheBoundFromEnvironment) {
  const char* e = std::getenv("QJ_CACHE_MAX_BYTES");
  uint64_t want = uint64_t{64} << 20;
  if (e && std::string(e) == "12345") want = 12345;
  qj_cache_stats_t s{};
  qj_cache_stats(&s);
  EXPECT_EQ(s.max_bytes, want) << "QJ_CACHE_MAX_BYTES=" << (e ? e : "(unset)");
}

// The key hash sees every bit of the 64 key bytes: the keys one bit away from a real-looking key
// all hash differently, and spread over all of the cache's 16 shards (hash % 16).
TEST(Core, KeyHashSeesEveryBit) {
  qj::KernelKey base = qj::KernelKey::zeroed();
  base.op = qj::KernelOp::kGemmInt;
  base.isa = QJ_ISA_AVX2;
  base.mr = 4;
  base.nr = 16;
  std::set<uint64_t> hashes{base.hash()};
  std::set<uint64_t> shards;
  for (int bit = 0; bit < 512; ++bit) {
    qj::KernelKey k = base;
    reinterpret_cast<unsigned char*>(&k)[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    hashes.insert(k.hash());
    shards.insert(k.hash() % 16);
  }
  EXPECT_EQ(hashes.size(), 513u);
  EXPECT_EQ(shards.size(), 16u);
}

TEST(Core, LastErrorIsThreadLocal) {
  EXPECT_EQ(qj_set_max_isa(static_cast<qj_isa>(77)), QJ_ERR_INVALID_ARGUMENT);
  std::string here = qj_last_error();
  std::string there;
  std::thread t([&] { there = qj_last_error(); });
  t.join();
  EXPECT_NE(here.find("77"), std::string::npos);
  EXPECT_EQ(there, "");
}
