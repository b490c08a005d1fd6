// The emit-time ISA check (src/core/jit_isa_check.h): an instruction outside the key's tier fails
// the kernel's generation with a message naming it, whatever CPU the test runs on. The kernels
// here are generated, never called.
#include <asmjit/x86.h>
#include <gtest/gtest.h>
#include <quantjit/quantjit.h>

#include <string>

#include "src/core/jit_isa_check.h"
#include "src/core/kernel_cache.h"

namespace {

using namespace asmjit::x86;

// key.param[0] picks what to emit (then ret).
enum Body : uint32_t {
  kAvx2Only = 1,      // AVX2 / FMA / F16C forms, VEX-encoded
  kMaskedYmm,         // vpaddd ymm0 {k1}, ...: EVEX (AVX512F + VL)
  kYmm16,             // vpaddd ymm16, ...: EVEX
  kBroadcastYmm,      // vpaddd ymm0, ymm1, [rax]{1to8}: EVEX
  kZmm,               // vpaddd zmm0, ...
  kTernlogYmm,        // vpternlogd ymm: AVX512F + VL only
  kVnniZmm,           // vpdpbusd zmm
  kVbmiZmm,           // vpermb zmm
  kBf16,              // vcvtneps2bf16: AVX512_BF16, allowed by no tier
};

bool emit_body(const qj::KernelKey& key, Assembler& a, std::string*) {
  switch (key.param[0]) {
    case kAvx2Only:
      a.vpbroadcastd(ymm0, dword_ptr(rdi));
      a.vfmadd231ps(ymm1, ymm0, ymmword_ptr(rsi));
      a.vcvtph2ps(ymm2, xmmword_ptr(rsi));
      a.vpshufb(ymm3, ymm2, ymm1);
      a.vpmaddubsw(ymm4, ymm3, ymm2);
      a.vpermd(ymm5, ymm4, ymm3);
      a.popcnt(eax, ecx);
      break;
    case kMaskedYmm: a.k(k1).vpaddd(ymm0, ymm1, ymm2); break;
    case kYmm16: a.vpaddd(ymm16, ymm1, ymm2); break;
    case kBroadcastYmm: a.vpaddd(ymm0, ymm1, dword_ptr(rax)._1to8()); break;
    case kZmm: a.vpaddd(zmm0, zmm1, zmm2); break;
    case kTernlogYmm: a.vpternlogd(ymm0, ymm1, ymm2, 0x96); break;
    case kVnniZmm: a.vpdpbusd(zmm0, zmm1, zmm2); break;
    case kVbmiZmm: a.vpermb(zmm0, zmm1, zmm2); break;
    case kBf16: a.vcvtneps2bf16(ymm0, zmm1); break;
    default: return false;
  }
  a.ret();
  return true;
}
std::string body_name(const qj::KernelKey& key) { return "isa_check_body" + std::to_string(key.param[0]); }
uint32_t extras_from_key(const qj::KernelKey& key) { return key.param[1]; }

const qj::KernelFamily kFamily{emit_body, body_name, extras_from_key};

qj::KernelKey key_for(Body body, qj_isa isa, uint32_t extras, uint32_t salt) {
  qj::KernelKey key = qj::KernelKey::zeroed();
  key.op = qj::KernelOp::kConvert;
  key.isa = static_cast<uint8_t>(isa);
  key.param[0] = body;
  key.param[1] = extras;
  key.param[2] = 0x15acec00u + salt;  // keys of this test only
  return key;
}

// Generates `body` for tier `isa` with `extras`; "" on success, else the error.
std::string generate(Body body, qj_isa isa, uint32_t extras = 0, uint32_t salt = 0) {
  const qj::KernelKey key = key_for(body, isa, extras, salt);
  qj::KernelRef r;
  const qj_status s = qj::acquire_kernel(key, kFamily, &r);
  if (s == QJ_OK) return r.entry() ? "" : "no entry";
  return std::string(qj_status_name(s)) + ": " + qj_last_error();
}

// The check on for one test; the refusals the test provokes on purpose are not left counted (the
// test binaries fail at exit on any, test_util.cpp).
struct CheckOn {
  CheckOn() { qj::set_jit_isa_check_for_tests(true); }
  ~CheckOn() {
    qj::set_jit_isa_check_for_tests(false);
    qj::reset_jit_isa_violations_for_tests();
  }
};

void expect_rejected(Body body, qj_isa isa, const char* inst, const char* feature, uint32_t extras = 0) {
  const uint64_t before = qj::jit_isa_violations(nullptr);
  const std::string e = generate(body, isa, extras);
  EXPECT_NE(e.find("QJ_ERR_INTERNAL"), std::string::npos) << e;
  const std::string what = std::string("instruction ") + inst + " needs " + feature;
  EXPECT_NE(e.find(what), std::string::npos) << e;
  std::string first;
  EXPECT_EQ(qj::jit_isa_violations(&first), before + 1);
  if (before == 0)
    EXPECT_EQ(first, body_name(key_for(body, isa, extras, 0)) + ": " + what + ", which this kernel's ISA tier does not allow");
}

TEST(JitIsaCheck, EachTierAcceptsItsOwnInstructions) {
  CheckOn on;
  for (qj_isa isa : {QJ_ISA_AVX2, QJ_ISA_AVX512, QJ_ISA_AVX512_VNNI}) EXPECT_EQ(generate(kAvx2Only, isa), "") << isa;
  for (qj_isa isa : {QJ_ISA_AVX512, QJ_ISA_AVX512_VNNI}) {
    EXPECT_EQ(generate(kMaskedYmm, isa), "");
    EXPECT_EQ(generate(kYmm16, isa), "");
    EXPECT_EQ(generate(kBroadcastYmm, isa), "");
    EXPECT_EQ(generate(kZmm, isa), "");
    EXPECT_EQ(generate(kTernlogYmm, isa), "");
  }
  EXPECT_EQ(generate(kVnniZmm, QJ_ISA_AVX512_VNNI), "");
  EXPECT_EQ(generate(kVbmiZmm, QJ_ISA_AVX512_VNNI, qj::kJitExtraVbmi), "");
  EXPECT_EQ(generate(kVbmiZmm, QJ_ISA_AVX512, qj::kJitExtraVbmi), "");
}

TEST(JitIsaCheck, EvexFormsAreRejectedOnTheAvx2Tier) {
  CheckOn on;
  expect_rejected(kMaskedYmm, QJ_ISA_AVX2, "vpaddd", "AVX512_F");
  expect_rejected(kYmm16, QJ_ISA_AVX2, "vpaddd", "AVX512_F");
  expect_rejected(kBroadcastYmm, QJ_ISA_AVX2, "vpaddd", "AVX512_F");
  expect_rejected(kZmm, QJ_ISA_AVX2, "vpaddd", "AVX512_F");
  expect_rejected(kTernlogYmm, QJ_ISA_AVX2, "vpternlogd", "AVX512_F");
}

TEST(JitIsaCheck, FeaturesAboveTheTierAreRejected) {
  CheckOn on;
  expect_rejected(kVnniZmm, QJ_ISA_AVX512, "vpdpbusd", "AVX512_VNNI");
  expect_rejected(kVbmiZmm, QJ_ISA_AVX512_VNNI, "vpermb", "AVX512_VBMI");  // the key does not allow it
  expect_rejected(kBf16, QJ_ISA_AVX512_VNNI, "vcvtneps2bf16", "AVX512_BF16", qj::kJitExtraVbmi);
}

TEST(JitIsaCheck, OffItOnlyAssembles) {
  qj::set_jit_isa_check_for_tests(false);
  EXPECT_EQ(generate(kVbmiZmm, QJ_ISA_AVX2, 0, 1), "");
}

}  // namespace
