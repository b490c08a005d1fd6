// An assembler that can check, instruction by instruction, that a kernel uses only what its key's
// ISA tier allows.
//
// The tests run every tier on one CPU, which has every feature: a kernel of the AVX2 tier that
// slipped in one EVEX instruction (a mask register, ymm16, an embedded broadcast, vpternlogd), or
// an AVX-512 kernel that used vpdpbusd or vpermb, would pass them here and stop with SIGILL on the
// CPUs that tier stands for. With the check on (env QJ_JIT_CHECK_ISA=1; the test suite sets it),
// each emitted instruction's required CPU features (asmjit's InstAPI::queryFeatures, plus the
// EVEX-only operand forms it does not count) must lie in the tier's set:
//   avx2         x86-64 through SSE4.2 and POPCNT, AVX, AVX2, FMA, F16C (what isa.cpp requires)
//   avx512       + AVX512F, AVX512BW, AVX512VL, AVX512DQ, BMI2
//   avx512_vnni  + AVX512_VNNI
// plus the extras the kernel's family names for that key (JitExtra, e.g. AVX512-VBMI where the key
// records that the CPU has it). The first instruction outside the set fails the generation
// (QJ_ERR_INTERNAL, naming the instruction and the feature) and is counted (jit_isa_violations).
// Off, the check costs one branch per instruction.
#pragma once
#include <asmjit/x86.h>
#include <cstdint>
#include <string>

namespace qj {

// Features beyond the tier that a key may allow (KernelFamily::extras).
enum JitExtra : uint32_t {
  kJitExtraVbmi = 1u << 0,  // AVX512-VBMI (vpermb, vpermi2b, vpermt2b, vpmultishiftqb)
};

// QJ_JIT_CHECK_ISA=1 (read once), unless set_jit_isa_check_for_tests has overridden it.
bool jit_isa_check_enabled();
void set_jit_isa_check_for_tests(bool on);

// The kernels refused by the check so far, and the first of them (kernel name: instruction and
// feature). The dispatcher falls back from a refused kernel as from any other (logged); the test
// binaries fail at exit if the count is not 0 (test/test_util.cpp), so a refusal is not lost
// behind a correct fallback result.
void note_jit_isa_violation(const std::string& kernel, const std::string& what);
uint64_t jit_isa_violations(std::string* first);
void reset_jit_isa_violations_for_tests();

class IsaCheckedAssembler : public asmjit::x86::Assembler {
 public:
  // isa: the key's qj_isa value; extras: JitExtra bits. enabled: check, else just assemble.
  IsaCheckedAssembler(asmjit::CodeHolder* code, int isa, uint32_t extras, bool enabled);
  asmjit::Error _emit(asmjit::InstId inst_id, const asmjit::Operand_& o0, const asmjit::Operand_& o1,
                      const asmjit::Operand_& o2, const asmjit::Operand_* op_ext) override;
  // Empty, or the first instruction that needs a feature outside the set, and that feature.
  const std::string& violation() const { return violation_; }

 private:
  asmjit::CpuFeatures allowed_;
  bool enabled_;
  std::string violation_;
};

}  // namespace qj
