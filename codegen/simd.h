// Small ISA traits shared by the emitters (FBGEMM's simd_info<isa> idea): register width and count,
// and the vector register constructor. Emitters are written once against these traits.
#pragma once
#include <asmjit/x86.h>
#include <quantjit/quantjit.h>

namespace qj::cg {

struct Simd {
  bool zmm = false;    // 512-bit vectors (AVX-512) or 256-bit (AVX2)
  int bytes = 32;      // vector width in bytes
  int lanes32 = 8;     // 32-bit lanes per vector
  int regs = 16;       // architectural vector registers

  asmjit::x86::Vec v(int i) const {
    return zmm ? asmjit::x86::Vec(asmjit::x86::zmm(i)) : asmjit::x86::Vec(asmjit::x86::ymm(i));
  }
  // The same register at half width (for narrowing stores).
  asmjit::x86::Vec half(int i) const {
    return zmm ? asmjit::x86::Vec(asmjit::x86::ymm(i)) : asmjit::x86::Vec(asmjit::x86::xmm(i));
  }
  asmjit::x86::Vec quarter(int i) const { return asmjit::x86::xmm(i); }
  asmjit::Imm bcst() const { return asmjit::Imm(lanes32); }
  // A 32-bit memory operand broadcast to every lane (AVX-512 embedded broadcast only).
  asmjit::x86::Mem b32(const asmjit::x86::Mem& m) const {
    return zmm ? m._1to16() : m;
  }
};

inline Simd simd_for(int isa) {
  Simd s;
  if (isa >= QJ_ISA_AVX512) {
    s.zmm = true;
    s.bytes = 64;
    s.lanes32 = 16;
    s.regs = 32;
  }
  return s;
}

// The GEMM kernels read their weights as one sequential stream per panel. With several rows of
// multiplies per 64 weight bytes the out-of-order window covers too few lines to keep DRAM busy,
// so the f16 / bf16 and decoded-weight (INT4, MX) kernels prefetch each line ahead, as far as
// their keys say: src/ops/gemm.cpp chooses it (this distance on Zen 4 for kernels of two or more
// rows; 16 KiB on Zen 5 for weights beyond L2, with the measurements). The s8 kernel, with fewer
// instructions per weight byte, already streams near the DRAM roof (M = 4 / 16 cold: no gain).
// Past the last panel a prefetch touches nothing: it never faults.
constexpr int kWeightPrefetchBytes = 3072;

// prefetcht0 of every 64-byte line of [base + offset, + bytes), `ahead` bytes ahead.
inline void emit_weight_prefetch(asmjit::x86::Assembler& a, const asmjit::x86::Gp& base, int offset, int bytes,
                                 int ahead = kWeightPrefetchBytes) {
  for (int l = 0; l < bytes; l += 64) a.prefetcht0(asmjit::x86::ptr(base, offset + ahead + l));
}

// The same from base + (index << shift) (a stream one or two panel strides on).
inline void emit_weight_prefetch(asmjit::x86::Assembler& a, const asmjit::x86::Gp& base, const asmjit::x86::Gp& index,
                                 uint32_t shift, int offset, int bytes, int ahead) {
  for (int l = 0; l < bytes; l += 64) a.prefetcht0(asmjit::x86::ptr(base, index, shift, offset + ahead + l));
}

}  // namespace qj::cg
