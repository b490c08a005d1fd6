// Emitter of the float-weight GEMM microkernels declared in gemm_float.h.
//
// Register plan (System V: the argument pointer arrives in rdi and stays there):
//   rsi  A tile pointer   rdx  B pointer (runs through all panels)   rcx  C of the current panel
//   r8   K loop counter   r9   panel counter   rbp  panel column offset (bytes into the fp32
//   per-column arrays)    rbx  C row (epilogue)   rax scratch; r10/r11 in the epilogue.
//   Direct A: rows 3j, 3j+1, 3j+2 at [base_j], [base_j + r11], [base_j + 2 r11] with r11 = lda
//   bytes and base_j = rsi, r12, r13, r14, r15 (rows 0..14), all advanced along K together.
// Vector registers: [0, sets*mr*nrv) accumulators, then the converted weight vectors (nrv for
// f16, 2*nrv for bf16: k and k+1), the bf16 high-half mask, the AVX2 A broadcast register.
//
// Measured on the Zen 4 host (docs: PERF.md has Intel numbers): vfmadd231ps zmm 1/cycle, latency
// 4; vcvtph2ps zmm 0.75/cycle and it competes with the FMAs (8 FMA + 8 cvt: 12.7 cycles, 8 FMA +
// 4 cvt: 8 cycles), so one conversion per 2 or more FMAs (mr >= 2) is free; the bf16 shift
// (1/cycle) likewise. At mr = 1 the f16 conversion caps a GEMV at ~0.65 of the FMA peak.
#include "codegen/gemm_float.h"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <string>

#include "codegen/simd.h"
#include "src/core/kernel_cache.h"

namespace qj {
namespace {

using namespace asmjit;
using namespace asmjit::x86;

#define ARG(field) qword_ptr(rdi, static_cast<int32_t>(offsetof(GemmFloatArgs, field)))

struct Plan {
  cg::Simd s;
  bool bf16, direct;
  int mr, nr, nrv, sets;
  int acc, bvec, mask, abc;
};

const Gp kBases[5] = {rsi, r12, r13, r14, r15};

// Address of A for row i, K unit u (half h of a bf16 pair).
Mem a_mem(const Plan& p, int i, int u, int h) {
  if (!p.direct) return dword_ptr(rsi, (((p.bf16 ? 2 : 1) * u + h) * p.mr + i) * 4);
  const int disp = ((p.bf16 ? 2 : 1) * u + h) * 4;
  const Gp base = kBases[i / 3];
  switch (i % 3) {
    case 0: return dword_ptr(base, disp);
    case 1: return dword_ptr(base, r11, 0, disp);
    default: return dword_ptr(base, r11, 1, disp);
  }
}

bool make_plan(const KernelKey& key, Plan* p, std::string* why) {
  p->s = cg::simd_for(key.isa);
  if (key.isa < QJ_ISA_AVX2) {
    *why = "no JIT kernel below avx2";
    return false;
  }
  if (key.b_type != QJ_F16 && key.b_type != QJ_BF16) {
    *why = "weights must be f16 or bf16";
    return false;
  }
  p->bf16 = key.b_type == QJ_BF16;
  p->direct = (key.flags & 1) != 0;
  p->mr = key.mr;
  if (p->direct && p->mr > 15) {
    *why = "direct A reaches 15 rows at most";
    return false;
  }
  p->nr = key.nr;
  p->sets = static_cast<int>(key.param[0]);
  if (p->sets != 1 && p->sets != 2 && p->sets != 4) {
    *why = "param[0] (accumulator sets) must be 1, 2 or 4";
    return false;
  }
  if (p->nr % p->s.lanes32 != 0 || p->mr < 1 || p->nr < 1) {
    *why = "nr must be a multiple of the vector width";
    return false;
  }
  p->nrv = p->nr / p->s.lanes32;
  int used = 0;
  p->acc = used, used += p->sets * p->mr * p->nrv;
  // Weight vectors; at least two, because the epilogue borrows two of them as scratch.
  p->bvec = used, used += std::max(2, p->nrv * (p->bf16 ? 2 : 1));
  p->mask = p->bf16 ? used++ : -1;
  p->abc = p->s.zmm ? -1 : used++;
  if (used > p->s.regs) {
    *why = "register tile too large for the ISA";
    return false;
  }
  return true;
}

void zero_regs(Assembler& a, const cg::Simd& s, int first, int count) {
  for (int r = first; r < first + count; ++r) {
    if (s.zmm)
      a.vpxord(s.v(r), s.v(r), s.v(r));
    else
      a.vpxor(s.v(r), s.v(r), s.v(r));
  }
}

// acc += b * broadcast(A element at m)
void fma_bcast(Assembler& a, const Plan& p, int acc, int b, Mem m) {
  const cg::Simd& s = p.s;
  if (s.zmm)
    a.vfmadd231ps(s.v(acc), s.v(b), m._1to16());
  else
    a.vfmadd231ps(s.v(acc), s.v(b), s.v(p.abc));
}

// One K unit (f16: one k; bf16: one pair) into accumulator set `set`; A and B at offsets of unit u.
void emit_unit(Assembler& a, const Plan& p, int set, int u) {
  const cg::Simd& s = p.s;
  const int acc = p.acc + set * p.mr * p.nrv;
  if (!p.bf16) {
    for (int j = 0; j < p.nrv; ++j)
      a.vcvtph2ps(s.v(p.bvec + j), ptr(rdx, u * p.nr * 2 + j * s.lanes32 * 2));
    for (int i = 0; i < p.mr; ++i) {
      if (!s.zmm) a.vbroadcastss(s.v(p.abc), a_mem(p, i, u, 0));
      for (int j = 0; j < p.nrv; ++j) fma_bcast(a, p, acc + i * p.nrv + j, p.bvec + j, a_mem(p, i, u, 0));
    }
    return;
  }
  // bf16 pair: dword = bf16(k) | bf16(k+1) << 16.
  for (int j = 0; j < p.nrv; ++j) {
    Mem src = ptr(rdx, u * p.nr * 4 + j * s.bytes);
    Vec lo = s.v(p.bvec + j), hi = s.v(p.bvec + p.nrv + j);
    if (s.zmm) {
      a.vpslld(lo, src, 16);
      a.vpandd(hi, s.v(p.mask), src);
    } else {
      a.vmovdqu(hi, src);
      a.vpslld(lo, hi, 16);
      a.vpand(hi, hi, s.v(p.mask));
    }
  }
  for (int half = 0; half < 2; ++half)
    for (int i = 0; i < p.mr; ++i) {
      if (!s.zmm) a.vbroadcastss(s.v(p.abc), a_mem(p, i, u, half));
      for (int j = 0; j < p.nrv; ++j)
        fma_bcast(a, p, acc + i * p.nrv + j, p.bvec + half * p.nrv + j, a_mem(p, i, u, half));
    }
}

bool emit(const KernelKey& key, Assembler& a, std::string* why) {
  Plan p;
  if (!make_plan(key, &p, why)) return false;
  const cg::Simd& s = p.s;
  const int n_acc = p.mr * p.nrv;
  const int unit_b = p.bf16 ? p.nr * 4 : p.nr * 2;   // B bytes per K unit
  // A bytes per K unit: a packed tile holds mr floats per k; direct A moves each row pointer by k.
  const int unit_a = (p.bf16 ? 2 : 1) * (p.direct ? 1 : p.mr) * 4;

  cg::emit_save_callee_regs(a);
  const int n_bases = p.direct ? (p.mr + 2) / 3 : 1;
  auto advance_a = [&](int bytes) {
    for (int b = 0; b < n_bases; ++b) a.add(kBases[b], bytes);
  };
  if (p.bf16) {
    a.mov(eax, 0xffff0000u);
    if (s.zmm) {
      a.vpbroadcastd(s.v(p.mask), eax);
    } else {
      a.vmovd(xmm(p.mask), eax);
      a.vpbroadcastd(s.v(p.mask), xmm(p.mask));
    }
  }
  a.mov(rdx, ARG(b));
  a.mov(rcx, ARG(c));
  a.mov(r9, ARG(n_panels));
  a.xor_(ebp, ebp);

  Label l_panel = a.newLabel();
  a.bind(l_panel);
  a.mov(rsi, ARG(a));
  if (p.direct) {
    a.mov(r11, ARG(lda_bytes));
    for (int b = 1; b < n_bases; ++b) {  // base_b = base_{b-1} + 3 lda
      a.lea(kBases[b], ptr(kBases[b - 1], r11, 1));
      a.add(kBases[b], r11);
    }
  }
  zero_regs(a, s, p.acc, p.sets * n_acc);
  {
    Label l_main = a.newLabel(), l_rem = a.newLabel(), l_rem_loop = a.newLabel(), l_done = a.newLabel();
    a.mov(r8, ARG(k_main));
    a.test(r8, r8);
    a.jz(l_rem);
    a.bind(l_main);
    for (int u = 0; u < p.sets; ++u) emit_unit(a, p, u, u);
    advance_a(p.sets * unit_a);
    a.add(rdx, p.sets * unit_b);
    a.dec(r8);
    a.jnz(l_main);
    a.bind(l_rem);
    if (p.sets > 1) {
      a.mov(r8, ARG(k_rem));
      a.test(r8, r8);
      a.jz(l_done);
      a.bind(l_rem_loop);
      emit_unit(a, p, 0, 0);
      advance_a(unit_a);
      a.add(rdx, unit_b);
      a.dec(r8);
      a.jnz(l_rem_loop);
    }
    a.bind(l_done);
  }
  // Sum the sets into set 0 (pairwise: (0 + 1) + (2 + 3)).
  if (p.sets == 4)
    for (int r = 0; r < n_acc; ++r) {
      a.vaddps(s.v(p.acc + r), s.v(p.acc + r), s.v(p.acc + n_acc + r));
      a.vaddps(s.v(p.acc + 2 * n_acc + r), s.v(p.acc + 2 * n_acc + r), s.v(p.acc + 3 * n_acc + r));
      a.vaddps(s.v(p.acc + r), s.v(p.acc + r), s.v(p.acc + 2 * n_acc + r));
    }
  else if (p.sets == 2)
    for (int r = 0; r < n_acc; ++r) a.vaddps(s.v(p.acc + r), s.v(p.acc + r), s.v(p.acc + n_acc + r));

  // Output stage for this panel (the weight registers are free: epilogue scratch).
  a.mov(r10, ARG(col_mult));
  a.add(r10, rbp);
  a.mov(r11, ARG(col_bias));
  a.add(r11, rbp);
  cg::EpilogueRegs er;
  er.consts = rdi;
  er.c_row = rbx;
  er.mult = r10;
  er.bias = r11;
  er.row_scale = r8;  // unused: float kernels have no row scale
  er.tmp = rax;
  er.t0 = p.bvec;
  er.t1 = p.bvec + 1;
  cg::PanelEnd pe;
  pe.mr = p.mr;
  pe.nr = p.nr;
  pe.nrv = p.nrv;
  pe.acc = p.acc;
  pe.acc_is_float = true;
  pe.ldc_off = static_cast<int32_t>(offsetof(GemmFloatArgs, ldc));
  pe.last_is_tail_off = static_cast<int32_t>(offsetof(GemmFloatArgs, last_is_tail));
  pe.l_panel = l_panel;
  cg::emit_panel_end(a, s, key, er, pe);
  cg::emit_restore_and_return(a);
  return true;
}

std::string name(const KernelKey& key) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "gemm_f32%s_accf32_%s%s%s%s%s__%s_%dx%d%s%s",
                qj_dtype_name(static_cast<qj_dtype>(key.b_type)),
                qj_dtype_name(static_cast<qj_dtype>(key.c_type)), key.has_bias ? "_bias" : "",
                key.activation == QJ_ACT_RELU ? "_relu" : "", key.has_beta ? "_beta" : "",
                (key.flags & 1) ? "_da" : "", isa_suffix(key.isa), key.mr, key.nr,
                key.n_tail ? ("_t" + std::to_string(key.n_tail)).c_str() : "",
                key.param[0] > 1 ? ("_k" + std::to_string(key.param[0])).c_str() : "");
  return buf;
}

}  // namespace

int gemm_float_max_mr(const KernelKey& key_in, int cap) {
  KernelKey key = key_in;
  std::string why;
  for (int mr = cap; mr >= 1; --mr) {
    key.mr = static_cast<uint8_t>(mr);
    Plan p;
    if (make_plan(key, &p, &why)) return mr;
  }
  return 0;
}

const KernelFamily& gemm_float_family() {
  static const KernelFamily f{emit, name};
  return f;
}

}  // namespace qj
