#include "src/core/jit_isa_check.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "quantjit/quantjit.h"

namespace qj {

namespace {
std::atomic<int>& check_state() {
  static std::atomic<int> on = [] {
    const char* e = std::getenv("QJ_JIT_CHECK_ISA");
    return e && std::strcmp(e, "1") == 0 ? 1 : 0;
  }();
  return on;
}

struct Violations {
  std::mutex m;
  uint64_t count = 0;
  std::string first;
};
Violations& violations() {
  static Violations v;
  return v;
}
}  // namespace

bool jit_isa_check_enabled() { return check_state().load(std::memory_order_relaxed) != 0; }
void set_jit_isa_check_for_tests(bool on) { check_state().store(on ? 1 : 0, std::memory_order_relaxed); }

void note_jit_isa_violation(const std::string& kernel, const std::string& what) {
  Violations& v = violations();
  std::lock_guard<std::mutex> lock(v.m);
  if (v.count++ == 0) v.first = kernel + ": " + what;
}
uint64_t jit_isa_violations(std::string* first) {
  Violations& v = violations();
  std::lock_guard<std::mutex> lock(v.m);
  if (first) *first = v.first;
  return v.count;
}
void reset_jit_isa_violations_for_tests() {
  Violations& v = violations();
  std::lock_guard<std::mutex> lock(v.m);
  v.count = 0;
  v.first.clear();
}

namespace {

using F = asmjit::CpuFeatures::X86;

asmjit::CpuFeatures tier_features(int isa, uint32_t extras) {
  asmjit::CpuFeatures f;
  // Every CPU of the AVX2 tier (isa.cpp's tier_of: AVX2, FMA, F16C).
  f.add(F::kI486, F::kCMOV, F::kCMPXCHG8B, F::kFPU, F::kMMX, F::kMMX2, F::kSSE, F::kSSE2, F::kSSE3,
        F::kSSSE3, F::kSSE4_1, F::kSSE4_2, F::kPOPCNT, F::kAVX, F::kAVX2, F::kFMA, F::kF16C);
  if (isa >= QJ_ISA_AVX512) f.add(F::kAVX512_F, F::kAVX512_BW, F::kAVX512_VL, F::kAVX512_DQ, F::kBMI2);
  if (isa >= QJ_ISA_AVX512_VNNI) f.add(F::kAVX512_VNNI);
  if (extras & kJitExtraVbmi) f.add(F::kAVX512_VBMI);
  return f;
}

}  // namespace

IsaCheckedAssembler::IsaCheckedAssembler(asmjit::CodeHolder* code, int isa, uint32_t extras, bool enabled)
    : asmjit::x86::Assembler(code), allowed_(tier_features(isa, extras)), enabled_(enabled) {}

asmjit::Error IsaCheckedAssembler::_emit(asmjit::InstId inst_id, const asmjit::Operand_& o0,
                                         const asmjit::Operand_& o1, const asmjit::Operand_& o2,
                                         const asmjit::Operand_* op_ext) {
  if (enabled_ && violation_.empty()) {
    asmjit::Operand_ ops[6] = {o0, o1, o2};
    size_t n = 3;
    if (op_ext) {
      for (int i = 0; i < 3; ++i) ops[3 + i] = op_ext[i];
      n = 6;
    }
    while (n > 0 && ops[n - 1].isNone()) --n;
    const asmjit::InstOptions opts = instOptions() | forcedInstOptions();
    asmjit::BaseInst inst(inst_id, opts, extraReg());
    asmjit::CpuFeatures need;
    if (asmjit::InstAPI::queryFeatures(asmjit::Arch::kX64, inst, ops, n, &need) == asmjit::kErrorOk) {
      // EVEX-only forms that queryFeatures (asmjit of late 2022) does not count: an embedded
      // broadcast, embedded rounding / SAE.
      bool evex = (opts & (asmjit::InstOptions::kX86_ER | asmjit::InstOptions::kX86_SAE |
                           asmjit::InstOptions::kX86_Evex)) != asmjit::InstOptions::kNone;
      bool zmm = false;
      for (size_t i = 0; i < n; ++i) {
        if (ops[i].isMem() && ops[i].as<asmjit::x86::Mem>().hasBroadcast()) evex = true;
        if (ops[i].isReg() && ops[i].as<asmjit::x86::Reg>().isZmm()) zmm = true;
      }
      if (evex) {
        need.add(F::kAVX512_F);
        if (!zmm) need.add(F::kAVX512_VL);
      }
      for (uint32_t id = 0; id <= uint32_t(F::kMaxValue); ++id) {
        if (!need.has(id) || allowed_.has(id)) continue;
        asmjit::String name, feature;
        asmjit::InstAPI::instIdToString(asmjit::Arch::kX64, inst_id, name);
        asmjit::Formatter::formatFeature(feature, asmjit::Arch::kX64, id);
        violation_ = std::string("instruction ") + name.data() + " needs " + feature.data() +
                     ", which this kernel's ISA tier does not allow";
        break;
      }
    }
  }
  return asmjit::x86::Assembler::_emit(inst_id, o0, o1, o2, op_ext);
}

}  // namespace qj
