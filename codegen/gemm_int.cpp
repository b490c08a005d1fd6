// Emitter of the integer-weight GEMM microkernels declared in gemm_int.h.
//
// Register plan (System V: the argument pointer arrives in rdi and stays there):
//   rsi  A tile pointer            rdx  B pointer (runs through all panels)
//   rcx  C of the current panel    r8   K counter          r9  panel counter
//   r10  group counter             r11  group column offset (panel offset + g * col_stride)
//   r12  row sums of the group     r13/r14/r15  col_corr / b_zp / group_scale bases
//   rbp  panel column offset (bytes into 32-bit per-column arrays)   rbx  C row (epilogue)
//   rax  scratch. In the epilogue r8/r10/r11 hold col_mult/col_bias/row_scale.
// Vector registers: [0, mr*nrv) accumulators, then the second accumulator set (dual) or the fp32
// group accumulators, then B vectors, A broadcasts and product temps at the top.
#include "codegen/gemm_int.h"

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>

#include "codegen/mx_codes.h"
#include "codegen/simd.h"
#include "codegen/weight_decode.h"
#include "src/core/jit_isa_check.h"
#include "src/core/kernel_cache.h"

namespace qj {
namespace {

using namespace asmjit;
using namespace asmjit::x86;

#define ARG(field) qword_ptr(rdi, static_cast<int32_t>(offsetof(GemmIntArgs, field)))

struct Plan {
  cg::Simd s;
  bool vnni;
  int mr, nr, nrv;
  bool grouped, dual;
  int acc0, acc1, facc, breg, areg, nareg, treg, ntreg;
  // A addressing: packed tiles put the mr rows of one K group side by side (a_row = 4,
  // a_kstep = mr * 4); A read in place (key.param[0] = bytes per row) keeps rows apart.
  int a_row, a_kstep;
  // B: s8 pairs stored as bytes (the AVX2 tier's kPair8, gemm_int_s8_bytes) are widened by
  // vpmovsxbw as they are loaded; b_step = bytes of one K group of the panel, b_vec = of one
  // column vector of it.
  bool b8;
  int b_step, b_vec;
  // key.param[1] = 3 (s8 byte pairs, one row): two panels a pass, the second panel's column
  // vectors (the upper half of nrv) at r15 = args.panel_bytes further on.
  bool pair;
};

bool make_plan(const KernelKey& key, Plan* p, std::string* why) {
  p->s = cg::simd_for(key.isa);
  if (key.isa < QJ_ISA_AVX2) {
    *why = "no JIT kernel below avx2";
    return false;
  }
  p->vnni = key.isa >= QJ_ISA_AVX512_VNNI;
  p->mr = key.mr;
  p->nr = key.nr;
  p->a_row = key.param[0] ? static_cast<int>(key.param[0]) : 4;
  p->a_kstep = key.param[0] ? 4 : p->mr * 4;
  if (p->nr % p->s.lanes32 != 0 || p->mr < 1) {
    *why = "nr must be a multiple of the vector width";
    return false;
  }
  p->nrv = p->nr / p->s.lanes32;
  p->b8 = key.b_type == QJ_S8 && gemm_int_s8_bytes(static_cast<qj_isa>(key.isa));
  p->b_vec = p->b8 ? p->s.bytes / 2 : p->s.bytes;
  p->b_step = p->nrv * p->b_vec;
  p->pair = key.b_type == QJ_S8 && key.param[1] == 3 && !(key.flags & 64);
  if (p->pair) p->nrv *= 2;
  p->grouped = key.granularity == QJ_GRAN_GROUP;
  p->dual = (key.flags & 1) != 0 && !p->grouped;
  int n_acc = p->mr * p->nrv;
  p->acc0 = 0;
  p->acc1 = n_acc;
  p->facc = n_acc;
  int used = n_acc * ((p->dual || p->grouped) ? 2 : 1);
  p->breg = used;
  used += p->nrv;
  int free_regs = p->s.regs - used;
  p->ntreg = p->vnni ? 0 : 1;
  p->nareg = free_regs - p->ntreg >= 2 ? 2 : 1;
  p->areg = used;
  p->treg = used + p->nareg;
  if (free_regs < p->nareg + p->ntreg || free_regs < 2) {
    *why = "register tile too large for the ISA";
    return false;
  }
  return true;
}

void load_vec(Assembler& a, const cg::Simd& s, int reg, const Mem& m) {
  if (s.zmm)
    a.vmovdqu32(s.v(reg), m);
  else
    a.vmovdqu(s.v(reg), m);
}

// Column vector j of K group u of B (the pair form's upper half: the next panel's, at r15 on).
Mem b_mem(const Plan& p, int u, int j) {
  const int half = p.nrv / 2;
  if (p.pair && j >= half) return ptr(rdx, r15, 0, u * p.b_step + (j - half) * p.b_vec);
  return ptr(rdx, u * p.b_step + j * p.b_vec);
}

// The weight prefetch `bytes` of B ahead of each stream (the pair form: both panels').
void emit_b_prefetch(Assembler& a, const Plan& p, int bytes, int pf) {
  cg::emit_weight_prefetch(a, rdx, 0, bytes, pf);
  if (p.pair) cg::emit_weight_prefetch(a, rdx, r15, 0, 0, bytes, pf);
}

// One K group (4 bytes of A per row, nr*4 bytes of B) into accumulator set `acc`.
void emit_kstep(Assembler& a, const Plan& p, int acc, int u) {
  const cg::Simd& s = p.s;
  // With one row each B vector is used once: fold its load into the multiply (fewer uops, which
  // is what bounds a GEMV streaming weights from L1/L2).
  const bool b_from_mem = p.mr == 1 && !p.b8;
  if (!b_from_mem)
    for (int j = 0; j < p.nrv; ++j) {
      const Mem m = b_mem(p, u, j);
      if (p.b8)
        a.vpmovsxbw(s.v(p.breg + j), m);
      else
        load_vec(a, s, p.breg + j, m);
    }
  for (int i = 0; i < p.mr; ++i) {
    Vec av = s.v(p.areg + (i % p.nareg));
    a.vpbroadcastd(av, dword_ptr(rsi, u * p.a_kstep + i * p.a_row));
    for (int j = 0; j < p.nrv; ++j) {
      Vec c = s.v(acc + i * p.nrv + j);
      Operand b = b_from_mem ? Operand(b_mem(p, u, j)) : Operand(s.v(p.breg + j));
      if (p.vnni) {
        a.emit(Inst::kIdVpdpbusd, c, av, b);
      } else {
        Vec t = s.v(p.treg);
        a.emit(Inst::kIdVpmaddwd, t, av, b);
        a.vpaddd(c, c, t);
      }
    }
  }
}

// The output stage's registers of the integer kernels: the argument struct (its EpilogueConsts)
// at rdi, the C row in rbx, rax scratch; the per-column arrays and the row scales where given.
cg::EpilogueRegs epilogue_regs(const Gp& mult, const Gp& bias, const Gp& row_scale, int t0, int t1) {
  cg::EpilogueRegs er;
  er.consts = rdi;
  er.c_row = rbx;
  er.mult = mult;
  er.bias = bias;
  er.row_scale = row_scale;
  er.tmp = rax;
  er.t0 = t0;
  er.t1 = t1;
  return er;
}

// The end of a panel for both integer kernels: per-column arrays at this panel (r8 multipliers,
// r10 bias, r11 row scales), the shared output stage and panel loop, then the return.
void emit_panel_output(Assembler& a, const cg::Simd& s, const KernelKey& key, int mr, int nr,
                       int nrv, int acc, bool acc_is_float, int t0, int t1, Label l_panel) {
  a.mov(r8, ARG(col_mult));
  a.add(r8, rbp);
  a.mov(r10, ARG(col_bias));
  a.add(r10, rbp);
  a.mov(r11, ARG(row_scale));
  cg::EpilogueRegs er = epilogue_regs(r8, r10, r11, t0, t1);
  cg::PanelEnd pe;
  pe.mr = mr;
  pe.nr = nr;
  pe.nrv = nrv;
  pe.acc = acc;
  pe.acc_is_float = acc_is_float;
  pe.ldc_off = static_cast<int32_t>(offsetof(GemmIntArgs, ldc));
  pe.last_is_tail_off = static_cast<int32_t>(offsetof(GemmIntArgs, last_is_tail));
  pe.l_panel = l_panel;
  if (cg::packed_rows(s, key, nrv)) er.pack_perm = a.newLabel();
  cg::emit_panel_end(a, s, key, er, pe);
  cg::emit_restore_and_return(a);
  if (er.pack_perm.isValid()) cg::emit_pack_consts(a, er);
}

void zero_regs(Assembler& a, const cg::Simd& s, int first, int count) {
  for (int r = first; r < first + count; ++r) {
    if (s.zmm)
      a.vpxord(s.v(r), s.v(r), s.v(r));
    else
      a.vpxor(s.v(r), s.v(r), s.v(r));
  }
}


// The K-blocked stages' accumulator tile of this panel, [panel][mr][nr] int32, into rax.
void emit_acc_address(Assembler& a, const Plan& p) {
  a.imul(rax, rbp, p.mr);
  a.add(rax, ARG(acc));
}

bool emit_s8(const KernelKey& key, Assembler& a, std::string* why) {
  Plan p;
  if (!make_plan(key, &p, why)) return false;
  const cg::Simd& s = p.s;
  const int n_acc = p.mr * p.nrv;
  const uint32_t stage = key.param[2];  // K blocking (gemm_int.h)
  const bool acc_in = stage >= 2, acc_out = stage == 1 || stage == 2;
  if (stage > 3 || (stage != 0 && (p.grouped || key.param[0] != 0))) {
    *why = "K blocking needs packed A and per-tensor / per-channel scales";
    return false;
  }
  const int pf = static_cast<int>(key.param[5]);  // weight prefetch distance (whole-K kernels)
  if (pf != 0 && stage != 0) {
    *why = "weight prefetch (param[5]) is for kernels over the whole K";
    return false;
  }
  if (p.pair && (!p.b8 || p.mr != 1 || p.grouped || key.has_b_zp || stage != 0 || key.n_tail != 0 ||
                 key.param[0] != 0)) {
    *why = "the pair form (param[1] = 3) is for one row of byte-pair weights, per tensor or channel, "
           "whole K, no tail, no weight zero point";
    return false;
  }

  cg::emit_save_callee_regs(a);
  a.mov(rdx, ARG(b));
  a.mov(rcx, ARG(c));
  a.mov(r9, ARG(n_panels));
  a.xor_(ebp, ebp);
  a.mov(r13, ARG(col_corr));
  a.mov(r14, ARG(b_zp));
  a.mov(r15, p.pair ? ARG(panel_bytes) : ARG(group_scale));

  Label l_panel = a.newLabel();
  a.bind(l_panel);
  a.mov(rsi, ARG(a));
  a.mov(r11, rbp);
  a.mov(r12, ARG(row_sum));
  if (p.grouped) {
    zero_regs(a, s, p.facc, n_acc);
    a.mov(r10, ARG(groups));
  }
  Label l_group = a.newLabel();
  a.bind(l_group);
  // The accumulators start from the A zero-point column correction of this group (col_corr):
  // integer adds commute, and it saves an add per accumulator at the end of the group. Later K
  // blocks start from the sums the previous block stored.
  if (acc_in) emit_acc_address(a, p);
  for (int i = 0; i < p.mr; ++i)
    for (int j = 0; j < p.nrv; ++j)
      load_vec(a, s, p.acc0 + i * p.nrv + j,
               acc_in ? ptr(rax, (i * p.nrv + j) * s.bytes) : ptr(r13, r11, 0, j * s.bytes));
  if (p.dual) {
    zero_regs(a, s, p.acc1, n_acc);
    Label l_pairs = a.newLabel(), l_odd = a.newLabel(), l_done = a.newLabel();
    a.mov(r8, ARG(k_groups));
    a.shr(r8, 1);
    a.jz(l_odd);
    a.bind(l_pairs);
    if (pf) emit_b_prefetch(a, p, p.b_step * 2, pf);
    emit_kstep(a, p, p.acc0, 0);
    emit_kstep(a, p, p.acc1, 1);
    a.add(rsi, p.a_kstep * 2);
    a.add(rdx, p.b_step * 2);
    a.dec(r8);
    a.jnz(l_pairs);
    a.bind(l_odd);
    a.test(byte_ptr(rdi, static_cast<int32_t>(offsetof(GemmIntArgs, k_groups))), 1);
    a.jz(l_done);
    emit_kstep(a, p, p.acc0, 0);
    a.add(rsi, p.a_kstep);
    a.add(rdx, p.b_step);
    a.bind(l_done);
    for (int r = 0; r < n_acc; ++r) a.vpaddd(s.v(p.acc0 + r), s.v(p.acc0 + r), s.v(p.acc1 + r));
  } else {
    Label l_k = a.newLabel();
    a.mov(r8, ARG(k_groups));
    a.bind(l_k);
    if (pf) emit_b_prefetch(a, p, p.b_step, pf);
    emit_kstep(a, p, p.acc0, 0);
    a.add(rsi, p.a_kstep);
    a.add(rdx, p.b_step);
    a.dec(r8);
    a.jnz(l_k);
  }

  if (stage != 0) a.add(rdx, ARG(b_skip));  // to this K block of the next panel
  if (p.pair) a.add(rdx, r15);              // past the second panel
  if (acc_out) {
    // Not the last K block: the raw sums go to the accumulator tile, and on to the next panel.
    emit_acc_address(a, p);
    for (int r = 0; r < n_acc; ++r) {
      const Mem m = ptr(rax, r * s.bytes);
      if (s.zmm)
        a.vmovdqu32(m, s.v(p.acc0 + r));
      else
        a.vmovdqu(m, s.v(p.acc0 + r));
    }
    a.add(rbp, p.nr * 4);
    a.dec(r9);
    a.jnz(l_panel);
    cg::emit_restore_and_return(a);
    return true;
  }

  // B zero-point correction of this group: acc -= row_sum * b_zp.
  const Vec t = s.v(p.breg);  // B vectors are free now
  for (int i = 0; key.has_b_zp && i < p.mr; ++i) {
    a.vpbroadcastd(s.v(p.areg), dword_ptr(r12, i * 4));
    for (int j = 0; j < p.nrv; ++j) {
      Vec c = s.v(p.acc0 + i * p.nrv + j);
      a.vpmulld(t, s.v(p.areg), ptr(r14, r11, 0, j * s.bytes));
      a.vpsubd(c, c, t);
    }
  }
  if (p.grouped) {
    for (int i = 0; i < n_acc; ++i) {
      Vec c = s.v(p.acc0 + i);
      a.vcvtdq2ps(c, c);
      a.vfmadd231ps(s.v(p.facc + i), c, ptr(r15, r11, 0, (i % p.nrv) * s.bytes));
    }
    a.add(r11, ARG(col_stride));
    a.add(r12, p.mr * 4);
    a.dec(r10);
    a.jnz(l_group);
  }

  emit_panel_output(a, s, key, p.mr, p.pair ? 2 * p.nr : p.nr, p.nrv, p.grouped ? p.facc : p.acc0, p.grouped,
                    p.breg, p.areg, l_panel);
  return true;
}

// The software pipeline of the tall and narrow kernels over r9 = n_panels banks of mr rows of A
// (rows r12 = lda bytes apart, r13 = 3 lda; a bank at rsi, the next at rsi + mr * lda), in two
// register banks that alternate: k_bank(b, out_other) emits all of K for the bank at rsi into
// register bank b, with the output stage of register bank 1 - b (the previous bank of rows)
// spread between its K steps when out_other; out_bank(b) emits that output stage alone (the
// last bank's). Row i of the bank is read at a_row(i, off) (rsi for rows 0..3, r10 = rsi + 4 lda
// for rows 4..7, which each k_bank sets first).
inline Mem a_row(int i, int off, uint32_t size) {
  const Gp base = i < 4 ? rsi : r10;
  Mem m = (i & 3) == 0   ? ptr(base, off)
          : (i & 3) == 3 ? ptr(base, r13, 0, off)
                         : ptr(base, r12, (i & 3) - 1, off);
  m.setSize(size);
  return m;
}
// The prologue both pipelined kernels share: registers saved, r9 = banks, r12 = lda, r13 = 3 lda,
// r14 = ldc, r15 = 3 ldc, the column corrections (the accumulators' start) in vector register
// `corr`; returns the output stage's registers (r11 multipliers, rbp bias, rax scratch, rbx the C
// row, temporaries t0 and t0 + 1).
cg::EpilogueRegs emit_bank_prologue(Assembler& a, const Vec& corr, int t0) {
  cg::emit_save_callee_regs(a);
  a.mov(r9, ARG(n_panels));  // banks of mr rows
  a.mov(r12, ARG(lda));
  a.lea(r13, ptr(r12, r12, 1));
  a.mov(r14, ARG(ldc));
  a.lea(r15, ptr(r14, r14, 1));
  a.mov(r8, ARG(col_corr));
  a.vmovdqu32(corr, ptr(r8));
  a.mov(r11, ARG(col_mult));
  a.mov(rbp, ARG(col_bias));
  return epilogue_regs(r11, rbp, rax, t0, t0 + 1);  // (no row scale: rax is only scratch)
}

template <class KBank, class OutBank>
void emit_bank_pipeline(Assembler& a, int mr, KBank&& k_bank, OutBank&& out_bank) {
  Label l_loop = a.newLabel(), l_last0 = a.newLabel(), l_last1 = a.newLabel(), l_done = a.newLabel();
  auto next_bank = [&]() {
    if (mr == 1 || mr == 2 || mr == 4 || mr == 8) {
      a.lea(rsi, ptr(rsi, r12, mr == 1 ? 0 : mr == 2 ? 1 : mr == 4 ? 2 : 3));
    } else {
      a.imul(rax, r12, mr);
      a.add(rsi, rax);
    }
  };
  auto bank = [&](int b, bool out_other) {
    if (mr > 4) a.lea(r10, ptr(rsi, r12, 2));
    k_bank(b, out_other);
  };
  bank(0, false);
  a.dec(r9);
  a.jz(l_last0);
  a.bind(l_loop);
  next_bank();
  bank(1, true);
  a.dec(r9);
  a.jz(l_last1);
  next_bank();
  bank(0, true);
  a.dec(r9);
  a.jnz(l_loop);
  a.bind(l_last0);
  out_bank(0);
  a.jmp(l_done);
  a.bind(l_last1);
  out_bank(1);
  a.bind(l_done);
}

// The bound on the vector registers of the tall kernel with mr rows per bank and kg K quads that
// chooses mr (gemm_int_tall_max_mr): the banks, B, the corrections, two A registers and two
// temporaries. The kernel itself uses one A register and gives what is left to the output
// stage's constants (see emit_s8_tall).
int tall_regs(int mr, int kg) { return 2 * mr + kg + 5; }

// ---------------------------------------------------------------------------------------------
// Tall and narrow (flags bit 6 with nr = 16; VNNI, u8 A read in place, rows lda bytes apart): one
// panel of at most 16 columns and a K of at most kTallMaxKGroups quads, e.g. FBGEMM's
// 156800 x 16 x 36 (a convolution as a GEMM). With so short a K an mr-row tile spends as long in
// its output stage as in its multiplies, and the ordinary kernel runs the two one after the other
// (one call per tile, the output stage of 16 rows after the last multiply). Here one call covers
// n_panels banks of mr rows, the B quads sit in registers for the whole call, and the banks are
// software-pipelined in two register banks of mr accumulators (emit_bank_pipeline): while one
// accumulates its rows, the output stage of the other's rows is emitted between its K steps, so
// that the conversions and stores issue beside the vpdpbusd instead of after them.
// key.param[1] = K (a multiple of 4); key.param[3] = bytes between the K quads of B (0: 64, a panel
// of 16 columns; 4 nr for the 16 columns at args.b inside a wider panel); key.mr = rows per bank;
// key.n_tail = live columns (0: 16).
// Row i of a bank is read at a_row(i, 4 k) (any lda: args.lda). Output stages:
// every one of emit_output_vec except row scales, grouped weights and weight zero points (u8 A).
bool emit_s8_tall(const KernelKey& key, Assembler& a, std::string* why) {
  const cg::Simd s = cg::simd_for(key.isa);
  const int k = static_cast<int>(key.param[1]);
  const int kg = k / 4, mr = key.mr;
  if (key.isa < QJ_ISA_AVX512_VNNI || key.a_type != QJ_U8 || k % 4 != 0 || kg < 1 || kg > kTallMaxKGroups ||
      key.nr != 16 || mr < 1 || mr > 8) {
    *why = "tall tiles need avx512_vnni, u8 A, K a multiple of 4 up to 4 * kTallMaxKGroups, nr 16 "
           "and 1 to 8 rows";
    return false;
  }
  if (key.granularity == QJ_GRAN_GROUP || key.has_b_zp || key.has_row_scale) {
    *why = "tall tiles: unsupported output stage";
    return false;
  }
  // Registers (at most tall_regs): two banks of mr accumulators, the kg B vectors, the column
  // corrections, the A broadcast, the output stage's two temporaries, and in the registers left
  // the output stage's constants (emit_resident_consts; the loads bound this kernel on Zen 5).
  // The temporaries are used only by bf16 and beta outputs and by multipliers read from memory;
  // otherwise they alias the constants. (B as the multiplies' memory operand, a second 64-byte
  // load per vpdpbusd, ran at half the speed.)
  const int bank[2] = {0, mr}, breg = 2 * mr, corr = breg + kg, areg = corr + 1, free0 = areg + 1;
  if (tall_regs(mr, kg) > s.regs) {
    *why = "register tile too large for the ISA";
    return false;
  }
  const bool alias_temps = key.c_type != QJ_BF16 && !key.has_beta && s.regs - free0 >= (key.has_bias ? 2 : 1);
  const int treg = alias_temps ? s.regs - 2 : free0;
  const int lanes = key.n_tail ? key.n_tail : 16;

  cg::EpilogueRegs er = emit_bank_prologue(a, s.v(corr), treg);
  a.mov(rsi, ARG(a));
  a.mov(rbx, ARG(c));
  a.mov(rdx, ARG(b));
  const int b_stride = key.param[3] ? static_cast<int>(key.param[3]) : 64;  // bytes per K quad of B
  for (int q = 0; q < kg; ++q) a.vmovdqu32(s.v(breg + q), ptr(rdx, q * b_stride));
  const int first_const = alias_temps ? free0 : free0 + 2;
  cg::emit_resident_consts(a, s, key, er, first_const, s.regs - first_const);
  // The output stage of row i of bank b (C rows in order: rbx walks down C by ldc).
  auto out_row = [&](int b, int i) {
    cg::emit_output_vec(a, s, key, er, bank[b] + i, false, 0, 0, lanes);
    a.add(rbx, r14);
  };
  // The K steps of the bank of rows at rsi into register bank b, with the output stage of the
  // other register bank's rows (out_other) spread over them.
  auto k_bank = [&](int b, bool out_other) {
    for (int i = 0; i < mr; ++i) a.vmovdqa32(s.v(bank[b] + i), s.v(corr));
    int done = 0;
    for (int q = 0; q < kg; ++q) {
      for (int i = 0; i < mr; ++i) {
        const Vec av = s.v(areg);
        a.vpbroadcastd(av, a_row(i, 4 * q, 4));
        a.vpdpbusd(s.v(bank[b] + i), av, s.v(breg + q));
      }
      // rows of the other bank due by this step: evenly over the kg steps
      const int due = out_other ? (q + 1) * mr / kg : 0;
      for (; done < due; ++done) out_row(1 - b, done);
    }
  };
  emit_bank_pipeline(a, mr, k_bank, [&](int b) {
    for (int i = 0; i < mr; ++i) out_row(b, i);
  });
  cg::emit_restore_and_return(a);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Narrow N (flags bit 6; VNNI, u8 A read in place), N = 4 or 8: a column-vectorized tile would
// waste 3/4 or 1/2 of every vpdpbusd, and a row would cost a whole epilogue vector. Here a row's
// accumulator has 2N dwords (ymm for N = 4, zmm for N = 8) and lane 2c + d sums column c over
// quad d of each 8-byte K chunk: the row's next 8 bytes go to every qword (vpbroadcastq straight
// from A) and the plan's B pattern holds, in qword c, the 8 weights of column c at those K
// (GemmPlan::narrow_b). The accumulators start from the plan's column corrections (A zero point)
// in the d = 0 lanes. K runs in 8-byte chunks; when K is not a multiple of 8 the last chunk is
// the row's final 8 bytes and its pattern is zero for the K the previous chunk covered (no read
// past a row, every k counted once). Per pair of rows, vshufps + vpaddd add the two quads of
// each column: chunk q holds [r0 c, r0 c+1, r1 c, r1 c+1] for c = 2q. For N = 4 two pairs are
// joined into one zmm; the epilogue then works on whole vectors of 16 / N rows x N columns (the
// narrow layout of codegen/epilogue.h) with the per-lane arrays of the plan.
// The rows are software-pipelined as in emit_s8_tall (emit_bank_pipeline): while one register
// bank accumulates its rows, the reduction and output stage of the other bank's rows are emitted
// between its chunks (156800 x 4 / 8 x 36: 0.41 / 0.57 -> 0.50 / 0.71 of the VNNI peak).
// key.param[1] = K; key.mr = rows per bank (4 or 8); key.nr = N.
// The kernel runs n_panels banks of mr rows (A rows args.lda apart, C rows ldc apart).
// Supported output stages: not grouped, no weight zero points, no row scale, no beta,
// u8 / s8 / f32 / s32 output (the plan asks for nothing else).
bool emit_s8_narrow(const KernelKey& key, Assembler& a, std::string* why) {
  const cg::Simd s = cg::simd_for(key.isa);
  const int k = static_cast<int>(key.param[1]);
  const int n = key.nr, mr = key.mr;
  if (key.isa < QJ_ISA_AVX512_VNNI || key.a_type != QJ_U8 || k < 8 || mr % 4 != 0 || mr == 0 ||
      mr > 8 || (n != 4 && n != 8)) {
    *why = "narrow-N tiles need avx512_vnni, u8 A, k >= 8, mr 4 or 8 rows per bank and nr 4 or 8";
    return false;
  }
  if (key.granularity == QJ_GRAN_GROUP || key.has_b_zp || key.has_row_scale || key.has_beta ||
      key.n_tail || !(key.c_type == QJ_U8 || key.c_type == QJ_S8 || key.c_type == QJ_F32 || key.c_type == QJ_S32)) {
    *why = "narrow-N tiles: unsupported output stage";
    return false;
  }
  const bool half = n == 4;  // row vectors of 8 dwords
  auto rv = [&](int id) -> Vec { return half ? Vec(ymm(id)) : Vec(zmm(id)); };
  const int vbytes = 8 * n;  // one chunk's B pattern, one row vector
  const int n_full = k / 8, chunks = n_full + (k % 8 != 0 ? 1 : 0);
  const bool unrolled = chunks <= 8;
  const int ng = mr / 4;
  // Registers: two banks of one accumulator per row, the column corrections, the A copy, two
  // temps of the reduction, the output stage's two; then the output stage's constants
  // (emit_resident_consts) and the B patterns of every chunk when K is unrolled and they fit,
  // else one register for the chunk's pattern. On Zen 5 vector loads bound this kernel (about
  // two a cycle): the constants in registers took 0.79 / 0.87 of the time at 156800 x 8 / 4 x
  // 36 (u8 C), B in registers 0.94 / 0.91 of what was left (in one process).
  const int bank[2] = {0, mr}, corr = 2 * mr, areg = corr + 1, treg = areg + 1;
  if (treg + 5 > s.regs) {
    *why = "register tile too large for the ISA";
    return false;
  }

  // (the column corrections sit in the d = 0 lanes)
  cg::EpilogueRegs er = emit_bank_prologue(a, rv(corr), treg + 2);
  const int breg = treg + 4 + cg::emit_resident_consts(a, s, key, er, treg + 4, s.regs - (treg + 5));
  const bool b_resident = unrolled && breg + chunks <= s.regs;
  if (b_resident) {
    a.mov(rdx, ARG(b));
    for (int t = 0; t < chunks; ++t) a.vmovdqu32(rv(breg + t), ptr(rdx, t * vbytes));
  }
  er.narrow_n = n;
  er.ldc1 = r14;
  er.ldc3 = r15;
  er.perm = a.newLabel();

  // One 8-byte chunk of K for the bank of rows at rsi into register bank b: A of row i at
  // a_row(i, a_off), B at [rdx + b_off].
  auto chunk = [&](int b, int a_off, int b_off) {
    const Vec bv = rv(b_resident ? breg + b_off / vbytes : breg);
    if (!b_resident) a.vmovdqu32(bv, ptr(rdx, b_off));  // (EVEX: registers 16-31)
    for (int i = 0; i < mr; ++i) {
      const Vec av = rv(areg);
      a.vpbroadcastq(av, a_row(i, a_off, 8));
      a.emit(Inst::kIdVpdpbusd, rv(bank[b] + i), av, bv);
    }
  };
  // The output of group g (4 rows) of register bank b: per row pair, one vshufps pair and an
  // add sum the two quads of each column (chunk q holds [r0 c, r0 c+1, r1 c, r1 c+1] for
  // c = 2q); then the output stage on whole vectors of 16 / N rows. rbx walks down C.
  auto out_group = [&](int b, int g) {
    const int r = bank[b] + 4 * g;
    const Vec t0 = rv(treg), t1 = rv(treg + 1);
    for (int pr = 0; pr < 2; ++pr) {
      const int r0 = r + pr * 2;
      a.vshufps(t0, rv(r0), rv(r0 + 1), 0x88);  // [r0 d0 of c, r0 d0 of c+1, r1 .., r1 ..]
      a.vshufps(t1, rv(r0), rv(r0 + 1), 0xDD);  // the same for d1
      a.vpaddd(rv(r0), t0, t1);
    }
    if (half) {
      a.vinserti64x4(zmm(r), zmm(r), ymm(r + 2), 1);
      cg::emit_output_vec(a, s, key, er, r, false, 0, 0, s.lanes32);
      a.lea(rbx, ptr(rbx, r14, 2));  // 4 rows on
    } else {
      cg::emit_output_vec(a, s, key, er, r, false, 0, 0, s.lanes32);
      a.lea(rbx, ptr(rbx, r14, 1));
      cg::emit_output_vec(a, s, key, er, r + 2, false, 0, 0, s.lanes32);
      a.lea(rbx, ptr(rbx, r14, 1));
    }
  };
  // All of K for the bank of rows at rsi into register bank b, with the output of the other
  // register bank's groups (out_other) spread between its chunks (emit_bank_pipeline).
  auto k_bank = [&](int b, bool out_other) {
    for (int i = 0; i < mr; ++i) a.vmovdqa32(rv(bank[b] + i), rv(corr));
    int done = 0;
    auto due = [&](int t) {  // groups of the other bank due after chunk t of `chunks`
      const int d = out_other ? (t + 1) * ng / chunks : 0;
      for (; done < d; ++done) out_group(1 - b, done);
    };
    if (unrolled) {
      for (int t = 0; t < n_full; ++t) {
        chunk(b, 8 * t, t * vbytes);
        due(t);
      }
      if (k % 8 != 0) chunk(b, k - 8, n_full * vbytes);  // the row's last 8 bytes
    } else {
      due(chunks - 1);  // long K: the other bank's output first, then the loop over chunks
      Label l_k = a.newLabel();
      a.mov(rdx, ARG(b));
      a.mov(rcx, rsi);
      a.mov(r8, n_full);
      a.bind(l_k);
      chunk(b, 0, 0);
      a.add(rsi, 8);
      if (mr > 4) a.add(r10, 8);
      a.add(rdx, vbytes);
      a.dec(r8);
      a.jnz(l_k);
      if (k % 8 != 0) chunk(b, k % 8 - 8, 0);  // the row's last 8 bytes (rsi is 8 n_full on)
      a.mov(rsi, rcx);
      if (mr > 4) a.lea(r10, ptr(rsi, r12, 2));
    }
    due(chunks - 1);
  };

  // The pipeline over the banks; emitted twice, for contiguous rows of C (one store per vector)
  // and for any ldc.
  auto pipeline = [&]() {
    a.mov(rsi, ARG(a));
    a.mov(rbx, ARG(c));
    a.mov(rdx, ARG(b));
    emit_bank_pipeline(a, mr, k_bank, [&](int b) {
      for (int g = 0; g < ng; ++g) out_group(b, g);
    });
  };
  const Label l_any = a.newLabel(), l_done = a.newLabel();
  a.cmp(r14, n * cg::out_elem_bytes(key));
  a.jne(l_any);
  er.narrow_compact = true;
  pipeline();
  a.jmp(l_done);
  a.bind(l_any);
  er.narrow_compact = false;
  pipeline();
  a.bind(l_done);
  cg::emit_restore_and_return(a);
  cg::emit_narrow_consts(a, er);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Banks of 64 columns (flags bit 6 with nr = 64; VNNI, u8 A read in place, u8 / s8 / f32 / s32 /
// bf16 C): one panel of 64 columns over n_panels banks of 3 rows, software-pipelined as the tall
// kernel (emit_bank_pipeline): two register banks of 3 rows x 4 zmm accumulators alternate, and
// the output stage of one bank's rows (u8 / s8: the packed rows' stage), one row after each of
// the first three K steps, is emitted between the K steps of the next bank's, so that it issues
// beside the multiplies instead of after them, and the ends of a tile (the last multiplies'
// latency, the next tile's first loads) overlap too. B is read per K step (4 zmm, the panel's
// quads 256 bytes apart), each row's quad broadcast once. The ordinary 6 x 64 kernel at 1024 x
// 128 x K, s32 C: K = 128 873 GOPS against 903-909 at K >= 256, and u8 C 846 (2026-12-02).
// key.param[1] = K (a multiple of 4, at least 16); key.mr = 3. The accumulators start from the
// column corrections at args.col_corr (64 columns).
bool emit_s8_banks(const KernelKey& key, Assembler& a, std::string* why) {
  const cg::Simd s = cg::simd_for(key.isa);
  const int k = static_cast<int>(key.param[1]), kg = k / 4, mr = key.mr;
  if (key.isa < QJ_ISA_AVX512_VNNI || key.a_type != QJ_U8 || k % 4 != 0 || kg < 4 || mr != 3 || key.nr != 64 ||
      !(key.c_type == QJ_U8 || key.c_type == QJ_S8 || key.c_type == QJ_F32 || key.c_type == QJ_S32 ||
        key.c_type == QJ_BF16)) {
    *why = "64-column banks need avx512_vnni, u8 A, u8 / s8 / f32 / s32 / bf16 C, K a multiple of 4 from 16, 3 rows";
    return false;
  }
  if (key.granularity == QJ_GRAN_GROUP || key.has_b_zp || key.has_row_scale || key.has_beta || key.n_tail) {
    *why = "64-column banks: unsupported output stage";
    return false;
  }
  // Registers: two banks of 3 x 4 accumulators, B's 4 vectors of a K step, the A broadcast, the
  // output stage's two temporaries.
  const int bank[2] = {0, 12}, breg = 24, areg = 28, treg = 29;
  cg::EpilogueRegs er = emit_bank_prologue(a, s.v(31), treg);  // (r8 = col_corr; zmm31 unused)
  er.pack_perm = a.newLabel();
  a.mov(rsi, ARG(a));
  a.mov(rbx, ARG(c));
  const bool packed = key.c_type == QJ_U8 || key.c_type == QJ_S8;
  auto out_row = [&](int b, int i) {
    if (packed)
      cg::emit_output_row64(a, s, key, er, bank[b] + 4 * i);
    else
      for (int j = 0; j < 4; ++j) cg::emit_output_vec(a, s, key, er, bank[b] + 4 * i + j, false, 0, j, s.lanes32);
    a.add(rbx, r14);
  };
  // One K step of bank b: quad `q` of the rows at r10 (lda apart) with B's 64 columns at rdx.
  auto step = [&](int b, int q) {
    for (int j = 0; j < 4; ++j) a.vmovdqu32(s.v(breg + j), ptr(rdx, 256 * q + 64 * j));
    for (int i = 0; i < mr; ++i) {
      a.vpbroadcastd(s.v(areg), i == 0 ? ptr(r10, 4 * q) : ptr(r10, r12, i - 1, 4 * q));
      for (int j = 0; j < 4; ++j) a.vpdpbusd(s.v(bank[b] + 4 * i + j), s.v(areg), s.v(breg + j));
    }
  };
  // All of K for the bank of rows at rsi into register bank b: the first steps unrolled, one row
  // of the other bank's output after each (out_other), then a loop over the rest.
  const int unroll = mr;
  auto k_bank = [&](int b, bool out_other) {
    for (int i = 0; i < mr; ++i)
      for (int j = 0; j < 4; ++j) a.vmovdqu32(s.v(bank[b] + 4 * i + j), ptr(r8, 64 * j));
    a.mov(rdx, ARG(b));
    a.mov(r10, rsi);
    for (int q = 0; q < unroll; ++q) {
      step(b, q);
      if (out_other) out_row(1 - b, q);
    }
    const Label l_k = a.newLabel();
    a.add(r10, 4 * unroll);
    a.add(rdx, 256 * unroll);
    a.mov(ecx, kg - unroll);
    a.bind(l_k);
    step(b, 0);
    a.add(r10, 4);
    a.add(rdx, 256);
    a.dec(ecx);
    a.jnz(l_k);
  };
  emit_bank_pipeline(a, mr, k_bank, [&](int b) {
    for (int i = 0; i < mr; ++i) out_row(b, i);
  });
  cg::emit_restore_and_return(a);
  if (packed) cg::emit_pack_consts(a, er);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Narrow N, row lanes (flags bit 6, key.param[4] = 1; VNNI, u8 A read in place): N = 4 and a
// short K (16 to 64, a multiple of 4), e.g. FBGEMM's 156800 x 4 x 36. One zmm holds 4 rows x 4
// columns (lane l: row l / 4, column l % 4), so every vpdpbusd lane is a final sum (no pair
// reduction; K / 16 multiplies a row against the narrow kernel's K / 8 256-bit ones) and the
// output stage works on 4 whole rows in row order (EpilogueRegs::narrow_rows). Per group of 4
// rows and set of 4 quads of K, one vector G holds in 128-bit lane r the set's 4 quads of row r;
// vpshufd broadcasts each quad across its lane, and vpdpbusd multiplies it with B_q (lane l: quad
// q of column l % 4). (On Zen 5 vpshufd issues four a cycle beside the multiplies: 0.01 of a
// vpdpbusd's issue slot each in `quantjit-bench peak --only mix`, vpermd 0.16, vpermt2d 0.31,
// vpshufb 0.15.) G comes from one vpermt2d when the rows are K bytes apart and K <= 36 (the 4
// rows, at most 144 bytes, are two 64-byte reads; there a set of one quad, K = 4 mod 16, is
// broadcast by the vpermt2d itself), else from four 16-byte row reads (vinserti32x4). Set s reads
// quads off_s .. off_s + 3 of each row, off_s = min(4 s, K / 4 - 4), so that no read passes a
// row's end (nor the group's: the two 64-byte reads of a set are placed inside its 4 K bytes).
// Intrinsics models of the loop (2026-12-02, 156800 x 4 x 36, u8 C, ns a row): this one
// 0.65-0.66; all 9 quads by vpermt2d 0.71; G from 16-byte reads alone 0.77-0.79; the narrow
// kernel 0.82-0.83. The kernel against the narrow kernel in one process (time ratio, u8 C):
// 156800 x 4 x 36 0.86; rows K bytes apart 20000 x 4 x 16 / 20 / 28 0.87 / 0.95 / 0.88, row reads
// 20000 x 4 x 52 / 60 / 64 0.85 / 0.82 / 0.87-0.89 (src/ops/gemm.h narrow_rows_k: where plans
// take it).
// key.param[1] = K; key.mr = 4 (rows per group); key.nr = 4. B at args.b: K / 4 vectors B_q;
// the accumulators' start, multipliers and bias per lane at args.col_corr / col_mult / col_bias.
// The kernel runs n_panels groups of 4 rows (A rows args.lda apart, C rows ldc apart).
// Supported output stages: as emit_s8_narrow.
bool emit_s8_narrow_rows(const KernelKey& key, Assembler& a, std::string* why) {
  const cg::Simd s = cg::simd_for(key.isa);
  const int k = static_cast<int>(key.param[1]), kg = k / 4;
  if (key.isa < QJ_ISA_AVX512_VNNI || key.a_type != QJ_U8 || k % 4 != 0 || kg < 4 || kg > kNarrowRowsMaxKGroups ||
      key.mr != 4 || key.nr != 4) {
    *why = "row-lane narrow tiles need avx512_vnni, u8 A, K a multiple of 4 from 16 to 4 * kNarrowRowsMaxKGroups, "
           "4 rows and 4 columns";
    return false;
  }
  if (key.granularity == QJ_GRAN_GROUP || key.has_b_zp || key.has_row_scale || key.has_beta ||
      key.n_tail || !(key.c_type == QJ_U8 || key.c_type == QJ_S8 || key.c_type == QJ_F32 || key.c_type == QJ_S32)) {
    *why = "row-lane narrow tiles: unsupported output stage";
    return false;
  }
  const int ns = (kg + 3) / 4;           // sets of 4 quads
  const bool permute = kg <= 9;          // the vpermt2d path exists (rows K bytes apart)
  auto off = [&](int set) { return std::min(4 * set, kg - 4); };  // first quad a set reads
  auto single = [&](int set) { return 4 * set == kg - 1; };      // a set of one quad
  // The contiguous rows' reads of set s: dwords [o, o + 32) of the group (o <= off(s)), the
  // second 16 zero-masked when the group is shorter than 32 dwords.
  auto base = [&](int set) { return kg >= 8 ? std::min(off(set), 4 * kg - 32) : 0; };
  // Registers: B_q, the sets' permutes, the start, three accumulators, G, the broadcast quad,
  // the output stage's two temporaries, then its constants (kg + ns + 8 <= 28 at K = 64).
  const int breg = 0, ireg = kg, corr = ireg + (permute ? ns : 0), acc = corr + 1, nacc = 3, greg = acc + nacc,
            sreg = greg + 1, treg = sreg + 1;
  cg::EpilogueRegs er = emit_bank_prologue(a, s.v(corr), treg);
  cg::emit_resident_consts(a, s, key, er, treg + 2, s.regs - (treg + 2));
  a.mov(rdx, ARG(b));
  for (int q = 0; q < kg; ++q) a.vmovdqu32(s.v(breg + q), ptr(rdx, 64 * q));
  const Label l_idx = a.newLabel();
  if (permute) {
    for (int t = 0; t < ns; ++t) a.vmovdqu32(s.v(ireg + t), ptr(l_idx, 64 * t));
    if (kg < 8) {  // the group's dwords [16, 4 kg) (none when kg = 4)
      a.mov(eax, (1u << (4 * kg - 16)) - 1);
      a.kmovw(k2, eax);
    }
  }
  er.narrow_n = 4;
  er.narrow_rows = true;
  er.ldc1 = r14;
  er.ldc3 = r15;

  // One group of 4 rows at rsi; contiguous: rows K bytes apart (the vpermt2d path).
  auto group = [&](bool contiguous) {
    const Vec g = s.v(greg), b = s.v(sreg);
    for (int i = 0; i < nacc; ++i) {
      if (i == 0)
        a.vmovdqa32(s.v(acc), s.v(corr));
      else
        a.vpxord(s.v(acc + i), s.v(acc + i), s.v(acc + i));
    }
    int t = 0;  // multiplies so far (accumulator t % nacc)
    for (int set = 0; set < ns; ++set) {
      const int o = off(set);
      if (contiguous) {
        const int bo = base(set);
        if (kg >= 8) {
          a.vmovdqu32(g, ptr(rsi, 4 * bo));
          a.vpermt2d(g, s.v(ireg + set), ptr(rsi, 4 * bo + 64));
        } else {
          a.vmovdqu32(g, ptr(rsi));
          if (kg > 4) {
            a.k(k2).z().vmovdqu32(b, ptr(rsi, 64));
            a.vpermt2d(g, s.v(ireg + set), b);
          } else {
            a.vpermd(g, s.v(ireg + set), g);
          }
        }
      } else {
        a.vmovdqu32(xmm(greg), ptr(rsi, 4 * o));  // (EVEX: G may be a register 16-31)
        a.vinserti32x4(g, g, ptr(rsi, r12, 0, 4 * o), 1);
        a.vinserti32x4(g, g, ptr(rsi, r12, 1, 4 * o), 2);
        a.vinserti32x4(g, g, ptr(rsi, r13, 0, 4 * o), 3);
      }
      for (int q = 4 * set; q < std::min(4 * set + 4, kg); ++q, ++t) {
        const int pos = q - o;
        Vec src = b;
        if (contiguous && single(set))
          src = g;  // the permute broadcast the quad
        else
          a.vpshufd(b, g, pos * 0x55);
        a.vpdpbusd(s.v(acc + t % nacc), src, s.v(breg + q));
      }
    }
    a.vpaddd(s.v(acc + 1), s.v(acc + 1), s.v(acc + 2));
    a.vpaddd(s.v(acc), s.v(acc), s.v(acc + 1));
    cg::emit_output_vec(a, s, key, er, acc, false, 0, 0, s.lanes32);
    a.lea(rbx, ptr(rbx, r14, 2));  // 4 rows on
    a.lea(rsi, ptr(rsi, r12, 2));
  };
  // The loop over the groups, for each kind of A rows and C rows.
  auto loop = [&](bool contiguous) {
    const Label l_any = a.newLabel(), l_end = a.newLabel();
    a.cmp(r14, 4 * cg::out_elem_bytes(key));
    a.jne(l_any);
    for (int compact = 1; compact >= 0; --compact) {
      if (!compact) a.bind(l_any);
      er.narrow_compact = compact;
      const Label l_loop = a.newLabel();
      a.bind(l_loop);
      group(contiguous);
      a.dec(r9);
      a.jnz(l_loop);
      if (compact) a.jmp(l_end);
    }
    a.bind(l_end);
  };
  a.mov(rsi, ARG(a));
  a.mov(rbx, ARG(c));
  if (permute) {
    const Label l_strided = a.newLabel(), l_done = a.newLabel();
    a.cmp(r12, k);
    a.jne(l_strided);
    loop(true);
    a.jmp(l_done);
    a.bind(l_strided);
    loop(false);
    a.bind(l_done);
  } else {
    loop(false);
  }
  cg::emit_restore_and_return(a);
  if (permute) {
    // The sets' permutes: lane (r, i) takes dword kg r + off + i of the two reads (all four
    // lanes the quad of a single set).
    a.align(AlignMode::kData, 64);
    a.bind(l_idx);
    for (int set = 0; set < ns; ++set) {
      uint32_t d[16];
      for (int l = 0; l < 16; ++l) {
        const int r = l / 4, i = single(set) ? 3 : l % 4;
        d[l] = static_cast<uint32_t>(kg * r + off(set) + i - base(set));
      }
      a.embed(d, sizeof d);
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Narrow N = 8, row lanes (flags bit 6, key.param[4] = 1, nr = 8; VNNI, u8 A read in place), for
// cores whose 256-bit vpdpbusd issue twice as often as their 512-bit ones (Zen 4: two a cycle
// against one, the same multiplies per cycle). Each row accumulates in a ymm of its own, lane c
// column c, over every K quad: a broadcast of the row's quad times B_q (the 8 columns' quad q), so
// every lane is a final sum (the narrow kernel pads K to whole 8-byte chunks and adds each
// column's two quads at the end). Two rows are then joined (vinserti32x8) into one zmm in row
// order, lane l row l / 8, column l % 8 (EpilogueRegs::narrow_rows), and take the zmm output stage
// once per two rows. Banks of mr rows are software-pipelined as in emit_s8_tall
// (emit_bank_pipeline): the output stage of the last bank's row pairs is spread over this bank's
// K steps. Measured on Zen 4 (2026-12-02, loops of the kernel's instructions, A in L1, cycles per
// two rows at K = 36): the 18 multiplies alone 9.2, with the output stage 11.3-11.8, without its
// vfmadd 9.7-10.0 (beside vpdpbusd a vfmadd / vmulps / vpmulld zmm takes a multiply slot; the
// conversions, vpmaxsd, vpmovusdb and vaddps do not), the A quads by vpshufd from 16-byte
// broadcasts instead 16.5 (vpshufd ymm shares the multiplies' ports). That is the narrow
// kernel's speed at K = 36; below it this kernel is faster (src/ops/gemm.h narrow_rows8_k).
// key.param[1] = K (a multiple of 4, at most 4 * kNarrowRows8MaxKGroups); key.mr = rows per bank
// (even); key.nr = 8. B at args.b: K / 4 vectors B_q of 32 bytes; the accumulators' start at
// args.col_corr (8 columns), the multipliers and bias per lane (column l % 8) at args.col_mult /
// col_bias. The kernel runs n_panels banks of mr rows (A rows args.lda apart, C rows ldc apart).
// Supported output stages: as emit_s8_narrow.
// Its registers with mr rows per bank and kg K quads: the two banks, B, the start, the A broadcast
// and the output stage's two temporaries (gemm_int_narrow_rows8_max_mr also keeps two for the
// multipliers and bias).
int narrow_rows8_regs(int mr, int kg) { return 2 * mr + kg + 4; }
bool emit_s8_narrow_rows8(const KernelKey& key, Assembler& a, std::string* why) {
  const cg::Simd s = cg::simd_for(key.isa);
  const int k = static_cast<int>(key.param[1]), kg = k / 4, mr = key.mr;
  if (key.isa < QJ_ISA_AVX512_VNNI || key.a_type != QJ_U8 || k % 4 != 0 || kg < 1 || kg > kNarrowRows8MaxKGroups ||
      key.nr != 8 || mr < 2 || mr > 8 || mr % 2 != 0) {
    *why = "row-lane narrow tiles of 8 columns need avx512_vnni, u8 A, K a multiple of 4 up to "
           "4 * kNarrowRows8MaxKGroups and an even 2 to 8 rows per bank";
    return false;
  }
  if (key.granularity == QJ_GRAN_GROUP || key.has_b_zp || key.has_row_scale || key.has_beta ||
      key.n_tail || !(key.c_type == QJ_U8 || key.c_type == QJ_S8 || key.c_type == QJ_F32 || key.c_type == QJ_S32)) {
    *why = "row-lane narrow tiles: unsupported output stage";
    return false;
  }
  // Registers: two banks of mr row accumulators, the kg B quads, the start, the A broadcast, the
  // output stage's two temporaries, then its constants in what is left (emit_resident_consts).
  const int bank[2] = {0, mr}, breg = 2 * mr, corr = breg + kg, areg = corr + 1, treg = areg + 1;
  if (narrow_rows8_regs(mr, kg) > s.regs) {
    *why = "register tile too large for the ISA";
    return false;
  }
  cg::EpilogueRegs er = emit_bank_prologue(a, ymm(corr), treg);
  cg::emit_resident_consts(a, s, key, er, treg + 2, s.regs - (treg + 2));
  a.mov(rdx, ARG(b));
  for (int q = 0; q < kg; ++q) a.vmovdqu32(ymm(breg + q), ptr(rdx, 32 * q));
  er.narrow_n = 8;
  er.narrow_rows = true;
  er.ldc1 = r14;
  er.ldc3 = r15;
  const int pairs = mr / 2;
  // Rows 2p and 2p + 1 of register bank b joined and stored; C moves two rows on.
  auto out_pair = [&](int b, int p) {
    const int r0 = bank[b] + 2 * p;
    a.vinserti32x8(zmm(r0), zmm(r0), ymm(r0 + 1), 1);
    cg::emit_output_vec(a, s, key, er, r0, false, 0, 0, s.lanes32);
    a.lea(rbx, ptr(rbx, r14, 1));
  };
  auto k_bank = [&](int b, bool out_other) {
    for (int i = 0; i < mr; ++i) a.vmovdqa32(ymm(bank[b] + i), ymm(corr));
    int done = 0;
    for (int q = 0; q < kg; ++q) {
      for (int i = 0; i < mr; ++i) {
        a.vpbroadcastd(ymm(areg), a_row(i, 4 * q, 4));
        a.evex().vpdpbusd(ymm(bank[b] + i), ymm(areg), ymm(breg + q));
      }
      const int due = out_other ? (q + 1) * pairs / kg : 0;  // the other bank's pairs, spread
      for (; done < due; ++done) out_pair(1 - b, done);
    }
  };
  // C rows contiguous (ldc = 8 elements): one store per pair; else one per row.
  const Label l_any = a.newLabel(), l_end = a.newLabel();
  a.mov(rsi, ARG(a));
  a.mov(rbx, ARG(c));
  a.cmp(r14, 8 * cg::out_elem_bytes(key));
  a.jne(l_any);
  for (int compact = 1; compact >= 0; --compact) {
    if (!compact) a.bind(l_any);
    er.narrow_compact = compact;
    emit_bank_pipeline(a, mr, k_bank, [&](int b) {
      for (int p = 0; p < pairs; ++p) out_pair(b, p);
    });
    if (compact) a.jmp(l_end);
  }
  a.bind(l_end);
  cg::emit_restore_and_return(a);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Decoded weights (S4 / U4 now; codegen/weight_decode.h): the weights are decoded in registers to
// unsigned byte quads d = q + offset and are the unsigned operand; A is packed as s8 quads (the
// signed operand). Per K step (k_per_step values, n_out quads per column):
//   VNNI:      vpdpbusd acc, d, {1to16}[A quad]        (A broadcast straight from memory)
//   AVX-512 / AVX2: vpmaddubsw t, d, A, runs of s16_terms products added as s16 (4-bit: both
//              quads, |sum| <= 2 * 3840; E2M3 one at a time; MXINT8 split into nibbles), each run
//              vpmaddwd t, t, ones (2^hi_shift for MXINT8's high nibbles), vpaddd acc, acc, t
//              (see weight_decode.h).
// At the end of each K group, exact int32 corrections:
//   flags bit 2 (row corr)  acc += row_sum[g][i]            (pack_a gives -z * sum_k a for a
//                                                            constant zero point z = zp + offset)
//   has_b_zp (zp vector)    acc -= row_sum[g][i] * z[g][c]   (z inline in the panel, vpmulld)
//   flags bit 1 (col corr)  acc += col_corr[g][c]            (A zero point terms, from the plan)
// then (grouped) facc = fma(float(acc), scale[g][c], facc) with the scales inline in the panel.
// Panel stream per group: steps, [nr fp32 scales if grouped], [nr int32 z if has_b_zp].
// flags bit 0 (dual): quads of odd index accumulate into a second set (latency at small mr).
// flags bit 3 (scaled, VNNI dual only): the decoder skips its unpacking shift and delivers the odd
// quads times 2^scaled_shift (4-bit: the high nibble masked in place, 16 d); the second set is
// shifted back (vpsrad, exact) before it is added. The plan sets it only when a group's sum
// cannot reach 2^31 / 16.
// flags bit 4 (grouped, dynamic A per group): float(acc) *= row_group_scale[g][i] before the fold.
// flags bit 7 (a_split, VNNI, int8 decoders): A is E3M2's 16v split as 32 hi + lo, per step the
// lo quads then the hi quads (src/ops/mx_act.cpp); each decoded quad o multiplies both, the hi
// products into their own set, which is shifted left by 5 and added at the group's end.
// int16-pair decoders (dec.int16: E3M2, BDR): A is packed as s16 pairs (4 pair rows per 8-K step,
// the same (o * mr + i) * 4 addressing with n_out = 4), each pair row o is decoded to s16 pairs and
// multiplied at once: vpdpwssd acc, d, {1to16}[A pair] (VNNI), or vpbroadcastd + vpmaddwd + vpaddd
// (exact: |a| <= 255, |q| <= 448). Packing A as s16 (rather than widening s8 in registers) keeps
// the broadcast folded into the multiply: widening would add a vpmovsxbw and a broadcast per
// row and pair row, 2 more uops per vpdpwssd at one column vector.

struct DPlan {
  cg::Simd s;
  cg::DecoderInfo dec;
  bool vnni;
  int mr, nr, nrv;
  bool grouped, dual, row_corr, col_corr, zp_vec, scaled, group_a, vbmi, plain_e8m0, a_split;
  bool pairs;  // key.param[3]: int8-form MX codes decoded as quads, widened to s16 pairs
  bool e2m3w;  // pairs, E2M3 on zmm: code words decoded by one vpermi2w (64-word table)
  bool fp6_dense;  // E2M3, E3M2, MX6 on the VNNI tier: 6 bits per code (cg::emit_fp6_unpack / words)
  int quads;   // pairs: quad registers per column vector (MXFP4 2: both from one load; else 1)
  int quad0, pctl;  // pairs: the quad registers; the 2 widening controls
  int acc0, acc1, facc, dec0, cst, dtmp, ones, hi_mult, abc, tmp;
  int ndec;  // decoded-weight registers
  int acc2;  // int16 pairs with dual: pair rows 2 and 3 get their own sets (acc2, acc2 + n_acc)
  int acc_hi;  // a_split with VNNI: the sums of the hi parts of A (shifted left by 5 at the end)
  // key.param[1] = 1 (a one-row tile of 4-bit weights that sit in L2): each A quad is broadcast
  // once into a register, and odd K steps go to a second copy of the int32 sets
  // [acc0, acc0 + kblock), kshift registers up, added in at the end of each group.
  // key.param[1] = 2 (one row of 4-bit weights streamed from DRAM, scaled high nibbles): the
  // decoder's masks read the packed bytes as memory operands (cg::DecodeRegs::mem_operands).
  bool l2_gemv, stream_gemv;
  // key.param[1] = 3 (below VNNI, one row, one column vector a panel): two panels a pass, the
  // second read from r15 = args.panel_bytes on; nrv counts both, nr stays the panel's width.
  bool pair;
  int kblock, kshift;
  int a_units;  // A units (4-byte quads / pairs) per step
};

bool make_dplan(const KernelKey& key, DPlan* p, std::string* why) {
  p->s = cg::simd_for(key.isa);
  // vpermb decoders on zmm kernels of the VNNI tier when the CPU has VBMI (the AVX-512 tier keeps
  // the vpshufb forms, as on the CPUs it stands for).
  p->vbmi = p->s.zmm && key.isa >= QJ_ISA_AVX512_VNNI && (key.flags & 32) != 0;
  p->vnni = key.isa >= QJ_ISA_AVX512_VNNI;
  p->pairs = key.param[3] == 1;
  // pairs: the int8 decoder's VNNI form (MXINT8: d = code ^ 0x80, no nibble split).
  // MXFP6 E2M3 panels of the VNNI tier hold 6 bits per code (PackedWeights::fp6_dense).
  // So do E3M2 and BDR MX6 (int16 pairs).
  p->fp6_dense = (key.b_type == QJ_MXFP6_E2M3 || key.b_type == QJ_MXFP6_E3M2 || key.b_type == QJ_BDR_MX6) &&
                 key.isa >= QJ_ISA_AVX512_VNNI && key.param[4] == 0;
  p->dec = cg::decoder_info(key.b_type, p->vbmi, p->vnni || p->pairs, p->s.zmm, p->fp6_dense);
  if (p->dec.int16 && p->s.zmm) {  // the 512-bit int16 decoders need fewer registers
    p->dec.n_consts = p->dec.zmm_consts;
    p->dec.n_temps = 0;
  }
  if (!p->dec.ok) {
    *why = "no decoder for this weight type";
    return false;
  }
  if (p->pairs) {
    // Int8-form MX weights (MXFP4, E2M3, MXINT8) under s16 A (E3M2 A below the VNNI tier): each
    // step's two quad vectors of decoded bytes d = q + offset (k0..3, k4..7 of every column) are
    // widened by vpshufb into the four s16 pair rows of the int16-pair kernel, in place.
    if (!p->dec.e8m0_scales || p->dec.int16 || p->dec.n_out != 2) {
      *why = "s16 pairs from decoded quads are for the int8-form MX weights";
      return false;
    }
    p->dec.int16 = true;
    p->dec.n_out = 4;
    p->quads = key.b_type == QJ_MXFP4_E2M1 ? 2 : 1;
  }
  p->e2m3w = p->pairs && key.b_type == QJ_MXFP6_E2M3 && p->s.zmm;
  if (p->pairs && p->fp6_dense) {
    *why = "pairs mode reads E2M3 panels of one byte per code (below the VNNI tier)";
    return false;
  }
  if (p->e2m3w) p->dec.n_consts = 2, p->dec.n_temps = 0;  // the two 32-word halves of the table
  if (key.isa < QJ_ISA_AVX2) {
    *why = "no JIT kernel below avx2";
    return false;
  }
  if (!p->vnni && !p->dec.int16 && p->dec.s16_terms == 0) {
    *why = "this weight type needs VNNI (its decoded bytes overflow vpmaddubsw pairs)";
    return false;
  }
  if (p->dec.needs_vbmi && !(key.flags & 32)) {
    *why = "this weight type's decoder needs AVX512-VBMI (vpermb)";
    return false;
  }
  if (p->dec.e8m0_scales && (key.nr < 1 || 64 % key.nr != 0)) {  // scale lines hold 64 / nr groups
    *why = "MX panels need nr dividing 64";
    return false;
  }
  if (p->dec.e8m0_scales && key.granularity != QJ_GRAN_GROUP) {
    *why = "MX weights are grouped (blocks of 32)";
    return false;
  }
  p->mr = key.mr;
  p->nr = key.nr;
  if (p->nr % p->s.lanes32 != 0 || p->mr < 1 || p->nr < 1) {
    *why = "nr must be a multiple of the vector width";
    return false;
  }
  p->nrv = p->nr / p->s.lanes32;
  p->grouped = key.granularity == QJ_GRAN_GROUP;
  p->dual = (key.flags & 1) != 0 && p->vnni;
  p->col_corr = (key.flags & 2) != 0;
  p->row_corr = (key.flags & 4) != 0;
  p->zp_vec = key.has_b_zp != 0;
  p->scaled = (key.flags & 8) != 0;
  p->group_a = (key.flags & 16) != 0;
  p->plain_e8m0 = (key.flags & 64) != 0;
  p->a_split = (key.flags & 128) != 0;
  if (p->a_split && (p->dec.int16 || !p->vnni || p->pairs)) {
    *why = "split A is for the int8 decoders on the VNNI tier";
    return false;
  }
  p->a_units = p->dec.int16 ? p->dec.n_out : p->dec.a_quads * (p->a_split ? 2 : 1);
  p->l2_gemv = key.param[1] == 1;
  p->stream_gemv = key.param[1] == 2;
  p->pair = key.param[1] == 3;
  if (p->pair && (p->vnni || p->mr != 1 || p->nrv != 1 || p->dec.int16 || p->pairs || key.n_tail != 0)) {
    *why = "the pair form (param[1] = 3) is for one-row tiles of int8-decoded panels of one vector below VNNI, no tail";
    return false;
  }
  if (p->pair) p->nrv = 2;
  if (key.param[1] > 3 || (p->l2_gemv && (!p->vnni || p->dec.int16 || p->pairs || p->mr != 1))) {
    *why = "the L2 one-row form (param[1] = 1) is for one-row tiles of the int8 decoders on the VNNI tier";
    return false;
  }
  if (p->stream_gemv && (!p->scaled || p->mr != 1 || (key.b_type != QJ_S4 && key.b_type != QJ_U4))) {
    *why = "the streaming one-row form (param[1] = 2) is for one-row scaled tiles of S4 / U4 weights";
    return false;
  }
  if (p->group_a && (!p->grouped || key.has_row_scale)) {
    *why = "per-group A scales need grouped weights and no row scale";
    return false;
  }
  if (p->scaled && !(p->dual && p->dec.scaled_shift > 0 && p->dec.n_out == 2)) {
    *why = "scaled decoding needs the dual accumulator sets, VNNI and a decoder that has it";
    return false;
  }
  if (p->row_corr && p->zp_vec) {
    *why = "row correction and zero-point vector are exclusive";
    return false;
  }
  const int n_acc = p->mr * p->nrv;
  int used = 0;
  p->acc0 = used, used += n_acc;
  p->acc1 = used, used += p->dual ? n_acc : 0;
  // Few rows on the int16 path: one set per pair row, 4 independent vpdpwssd chains per output
  // vector (a step issues 4 dependent updates otherwise; M = 1 MX4 measured 76-90 GOPS against
  // 61-87 with two sets on the shared machine).
  p->acc2 = -1;
  if (p->dual && p->dec.int16) p->acc2 = used, used += 2 * n_acc;
  p->acc_hi = -1;
  if (p->a_split && p->vnni) p->acc_hi = used, used += n_acc;
  p->kblock = p->kshift = 0;
  if (p->l2_gemv) p->kblock = p->kshift = used - p->acc0, used += p->kblock;
  p->facc = used, used += p->grouped ? n_acc : 0;
  // int16 pairs: each decoded vector is consumed before the next pair row is decoded; two sets
  // alternate so a decode can overlap the previous multiplies.
  p->ndec = p->dec.int16 ? 2 * p->nrv : p->dec.n_out * p->nrv;
  p->dec0 = used, used += p->ndec;
  p->quad0 = p->pctl = -1;
  if (p->pairs) p->quad0 = used, used += p->quads * p->nrv, p->pctl = used, used += 2;
  p->cst = used, used += p->dec.n_consts + (p->scaled ? p->dec.scaled_consts : 0);
  p->ones = p->hi_mult = p->abc = p->tmp = -1;
  if (!p->vnni && p->dec.int16) {  // vpbroadcastd A pair, vpmaddwd product
    // A pair row is decoded before its multiplies, after the previous row's: the decoder's
    // temporaries share the A broadcast and product registers (AVX2 E2M3 under E3M2 A: 3 rows
    // instead of 2).
    p->abc = used, used += 1;
    p->tmp = used, used += 1;
    p->dtmp = p->abc;
    if (p->dec.n_temps > 2) used += p->dec.n_temps - 2;
  } else if (!p->vnni) {
    // vpmaddubsw products: the step's A quads broadcast, one or two temporaries; the decoder's
    // temporaries are free by then and share those registers.
    p->ones = used, used += 1;
    if (p->dec.hi_shift) p->hi_mult = used, used += 1;
    // One product per sum (E2M3): each A quad is broadcast just before its products, into one
    // register (AVX2: frees a register for a fourth row).
    const int nabc = p->dec.s16_terms > 1 ? p->a_units : 1;
    p->abc = used, used += nabc;
    const int ntmp = p->dec.s16_terms > 1 ? 2 : 1;
    p->tmp = used, used += ntmp;
    p->dtmp = p->abc;
    if (p->dec.n_temps > nabc + ntmp) used += p->dec.n_temps - nabc - ntmp;
  } else {
    p->dtmp = used, used += p->dec.n_temps;
    // Tiles of two rows or more with two column vectors or more: each A quad broadcast once into
    // abc (the decoder's first temporary, free once the step is decoded), then register
    // vpdpbusd, rather than an embedded {1to16} in each of them. On Zen 5 the embedded form costs
    // more (2026-12-01, EPYC family 0x1A, warm, GOPS, f32 A, embedded -> register; VNNI peak
    // 1089): S4 16 / 64 / 256 x 4096 x 4096 777-791 / 755-763 / 734-745 -> 886-899 / 868-894 /
    // 844-845; MXFP4 677-679 / 667-687 / 634-637 -> 733-736 / 693-707 / 683-700; MXINT8
    // 559-567 / 571-579 / 554-573 -> 595-653 / 638-663 / 624-656; E2M3 504-532 / 470-480 /
    // 559-561 -> 516-553 / 532-559 / 683-692. The GEMV (one row) keeps the embedded form: in
    // three alternating rounds the register form ran S4 from L2 faster (1 x 1024 x 1024 553-581 ->
    // 620-635) but from L3 slower (1 x 11008 x 4096 212-256 -> 159-196), and MXFP4 from L2 slower
    // (426-429 -> 384-417). The L2 one-row form of 4-bit weights (param[1]) takes the register
    // form with its second accumulator copy (src/ops/gemm.cpp has the figures).
    if (p->s.zmm && (p->mr >= 2 || p->l2_gemv) && p->nrv >= 2 && !p->dec.int16) {
      if (p->dec.n_temps > 0) p->abc = p->dtmp;
      else if (used < p->s.regs) p->abc = used++;
    }
  }
  if (used > p->s.regs || p->ndec < p->nrv + 1) {
    *why = "register tile too large for the ISA";
    return false;
  }
  return true;
}

// Pairs mode (E2M3, MXINT8): quad qi (0: k0..3, 1: k4..7) of the column vector at src into dst:
// MXINT8 d = code ^ 0x80; E2M3 on zmm the raw codes (the vpermi2w after the widening decodes
// them); E2M3 on ymm d = 8v + 60 by the shared byte decoder.
void emit_pair_quad(Assembler& a, const DPlan& p, int b_type, const Mem& src, int qi, int dst) {
  const cg::Simd& s = p.s;
  Mem m = src;
  m.addOffset(qi * s.bytes);
  const Vec d = s.v(dst);
  if (b_type == QJ_MXINT8) {
    if (s.zmm)
      a.vpxord(d, s.v(p.cst), m);
    else
      a.vpxor(d, s.v(p.cst), m);
  } else if (p.e2m3w) {
    a.vmovdqu32(d, m);
  } else {
    const Vec c = s.v(p.dtmp);
    a.vmovdqu(c, m);
    cg::emit_e2m3_bytes_ymm(a, d, c, s.v(p.dtmp + 1), s.v(p.cst), s.v(p.cst + 1));
    a.vpaddb(d, d, s.v(p.cst + 2));
  }
}

bool emit_decoded(const KernelKey& key, Assembler& a, std::string* why) {
  DPlan p;
  if (!make_dplan(key, &p, why)) return false;
  const cg::Simd& s = p.s;
  const int n_acc = p.mr * p.nrv;
  const int n_out = p.dec.n_out;
  // A units of a step: s8 quads (DecoderInfo::a_quads; output o multiplies quad o % a_quads, and
  // with a_split quad a_quads + o % a_quads too, the hi parts) or, on the int16 path, s16 pairs
  // (one per pair row).
  const int a_units = p.a_units, aq = p.dec.a_quads;
  const int step_bytes = p.nr * p.dec.bytes_per_col_step;
  const int col_bytes = p.dec.bytes_per_col_step * s.lanes32;  // one column vector of a step
  const bool mx = p.dec.e8m0_scales;  // E8M0 bytes in the panel's scale lines (r15), no inline params
  const int param_bytes = mx ? 0 : (p.grouped ? p.nr * 4 : 0) + (p.zp_vec ? p.nr * 4 : 0);
  cg::DecodeRegs dr;
  dr.consts = p.cst;
  dr.temps = p.dtmp;
  dr.vbmi = p.vbmi;
  dr.fp6_dense = p.fp6_dense;
  dr.vnni = p.vnni || p.pairs;  // as decoder_info was asked
  dr.mem_operands = p.stream_gemv;

  // The pair form's panel stride: r15, or with MX weights (whose scale-line pointer r15 is, and
  // whose unrolled groups need no K counter) r8, reloaded for each pair (the output stage takes r8).
  const Gp pstride = mx ? r8 : r15;
  // Column vector j of the panel data at byte `off` (vectors `stride` bytes apart); the pair
  // form's second vector is the same place in the next panel.
  auto b_vec = [&](int off, int j, int stride) {
    return p.pair && j == 1 ? ptr(rdx, pstride, 0, off) : ptr(rdx, off + j * stride);
  };

  cg::emit_save_callee_regs(a);
  if (p.e2m3w) {
    // Word table of d = q + 60 (q = 8v) for the 64 E2M3 codes: vpermi2w index bit 5 (the sign)
    // selects the second half.
    const int8_t* q = qj::cg::kE2m3Ints.data();
    for (int h = 0; h < 2; ++h) {
      uint8_t t[64];
      for (int i = 0; i < 32; ++i) {
        const uint16_t w = static_cast<uint16_t>(q[32 * h + i] + 60);
        std::memcpy(t + 2 * i, &w, 2);
      }
      cg::store_red_zone_table(a, t, 64, rax);
      a.vmovdqu32(s.v(p.cst + h), zmmword_ptr(rsp, cg::kRedZoneTable));
    }
  } else {
    cg::emit_decoder_setup(a, s, key.b_type, dr, rax, p.scaled);
  }
  if (p.pairs) {
    // vpshufb controls (per 128-bit lane) widening quad dword bytes b0..b3 to the s16 pairs
    // (b0, b1) and (b2, b3); through the red-zone table area, which the decoder has read by now
    // (the MX scale constants below sit above its first 32 bytes).
    uint8_t ctl[32];
    for (int i = 0; i < 4; ++i)
      for (int h = 0; h < 2; ++h) {
        uint8_t* c = ctl + 16 * h + 4 * i;
        c[0] = static_cast<uint8_t>(4 * i + 2 * h), c[1] = 0x80, c[2] = static_cast<uint8_t>(4 * i + 2 * h + 1), c[3] = 0x80;
      }
    cg::store_red_zone_table(a, ctl, 32, rax);
    for (int h = 0; h < 2; ++h) {
      if (s.zmm)
        a.vbroadcasti32x4(s.v(p.pctl + h), xmmword_ptr(rsp, cg::kRedZoneTable + 16 * h));
      else
        a.vbroadcasti128(s.v(p.pctl + h), xmmword_ptr(rsp, cg::kRedZoneTable + 16 * h));
    }
  }
  // MX scale-decode constants in the red zone (above the decoder tables, which are loaded by now):
  // zmm: dwords 1, 0xfe, 0x400000 at rsp-16.. (embedded broadcasts); ymm: whole vectors at rsp-96.
  const int mx_c1 = s.zmm ? -16 : -96, mx_cfe = s.zmm ? -12 : -64, mx_c4 = s.zmm ? -8 : -32;
  if (mx) {
    const uint32_t vals[3] = {1u, 0xfeu, 0x400000u};
    const int offs[3] = {mx_c1, mx_cfe, mx_c4};
    for (int c = 0; c < 3; ++c)
      for (int l = 0; l < (s.zmm ? 1 : 8); ++l) a.mov(dword_ptr(rsp, offs[c] + 4 * l), vals[c]);
  }
  if (!p.vnni && !p.dec.int16) {
    // s16 ones for vpmaddwd (and 2^hi_shift for the decoder's high outputs)
    const int wreg[2] = {p.ones, p.hi_mult};
    const uint32_t wval[2] = {0x00010001u, 0x00010001u << p.dec.hi_shift};
    for (int w = 0; w < 2 && wreg[w] >= 0; ++w) {
      a.mov(eax, wval[w]);
      if (s.zmm) {
        a.vpbroadcastd(s.v(wreg[w]), eax);
      } else {
        a.vmovd(xmm(wreg[w]), eax);
        a.vpbroadcastd(s.v(wreg[w]), xmm(wreg[w]));
      }
    }
  }
  a.mov(rdx, ARG(b));
  a.mov(rcx, ARG(c));
  a.mov(r9, ARG(n_panels));
  a.xor_(ebp, ebp);
  a.mov(r13, ARG(col_corr));
  if (p.pair && !mx) a.mov(pstride, ARG(panel_bytes));

  Label l_panel = a.newLabel();
  a.bind(l_panel);
  if (p.pair && mx) a.mov(pstride, ARG(panel_bytes));
  a.mov(rsi, ARG(a));
  a.mov(r11, rbp);
  a.mov(r12, ARG(row_sum));
  if (p.group_a) a.mov(r14, ARG(row_group_scale));
  if (mx) a.mov(r15, rdx);  // 64-byte aligned: the first group takes the panel's first scale line
  if (p.grouped) {
    zero_regs(a, s, p.facc, n_acc);
    a.mov(r10, ARG(groups));
  }
  Label l_group = a.newLabel();
  a.bind(l_group);
  if (mx) {
    // r15 at a line boundary: the current scale line is used up (int_weights.h: each 64-byte
    // line holds the scale bytes of 64 / nr groups, followed by their steps).
    Label l_line = a.newLabel();
    a.test(r15d, 63);
    a.jnz(l_line);
    a.mov(r15, rdx);
    a.add(rdx, 64);
    a.bind(l_line);
  }
  if (p.row_corr) {
    // The row correction starts the sum (a broadcast load, no vector-pipe uop; int32 addition
    // is exact in any order).
    for (int i = 0; i < p.mr; ++i)
      for (int j = 0; j < p.nrv; ++j) a.vpbroadcastd(s.v(p.acc0 + i * p.nrv + j), dword_ptr(r12, i * 4));
  } else {
    zero_regs(a, s, p.acc0, n_acc);
  }
  if (p.dual) zero_regs(a, s, p.acc1, n_acc);
  if (p.acc2 >= 0) zero_regs(a, s, p.acc2, 2 * n_acc);
  if (p.acc_hi >= 0) zero_regs(a, s, p.acc_hi, n_acc);
  if (p.kblock) zero_regs(a, s, p.acc0 + p.kshift, p.kblock);

  // One K step at byte offsets u * (A quads / pairs of a step) and u * step_bytes.
  auto emit_step = [&](int u) {
    const int a_off = u * a_units * p.mr * 4, b_off = u * step_bytes;
    // Weight prefetch (simd.h), key.param[5] bytes ahead (the plan's choice). The pair form reads
    // panels 2i and 2i + 1: the second stream prefetches its own panel (running on into panel
    // 2i + 2), the first the next pair's first panel, two panels on (running on into 2i + 3), so
    // that every line is fetched ahead once, none in a panel already being read.
    if (key.param[5] != 0 && !p.pair) {
      cg::emit_weight_prefetch(a, rdx, b_off, step_bytes, static_cast<int>(key.param[5]));
    } else if (key.param[5] != 0) {
      const int ahead = static_cast<int>(key.param[5]);
      cg::emit_weight_prefetch(a, rdx, pstride, 1, b_off, step_bytes, ahead);  // rdx + 2 * panel_bytes
      cg::emit_weight_prefetch(a, rdx, pstride, 0, b_off, step_bytes, ahead);
    }
    if (p.dec.int16) {
      // Pair row o of the step: decode it for every column vector, then every row's A pair (s16
      // x 2, broadcast) multiplies it: vpdpwssd (VNNI) or vpmaddwd + vpaddd (exact in int32).
      for (int o = 0; o < n_out; ++o) {
        const int d0 = p.dec0 + (o & 1) * p.nrv;
        for (int j = 0; j < p.nrv; ++j) {
          const Mem src = ptr(rdx, b_off + j * col_bytes);
          if (p.pairs) {
            // Pair rows 0, 1 come from quad 0 (k0..3), rows 2, 3 from quad 1 (k4..7): MXFP4 decodes
            // both from one load at row 0, the byte types each quad when its first row comes.
            const int qreg = p.quad0 + p.quads * j;
            int from = qreg;
            if (p.quads == 2) {
              const int outs[2] = {qreg, qreg + 1};
              if (o == 0) cg::emit_decode(a, s, key.b_type, src, dr, outs, false);
              from = qreg + o / 2;
            } else if (o % 2 == 0) {
              emit_pair_quad(a, p, key.b_type, src, o / 2, qreg);
            }
            a.vpshufb(s.v(d0 + j), s.v(from), s.v(p.pctl + (o & 1)));
            if (p.e2m3w) a.vpermi2w(s.v(d0 + j), s.v(p.cst), s.v(p.cst + 1));  // code -> d
          } else {
            cg::emit_decode16(a, s, key.b_type, src, o, dr, d0 + j);
          }
        }
        int set = (p.dual && (o & 1)) ? p.acc1 : p.acc0;
        if (p.acc2 >= 0 && o >= 2) set = p.acc2 + (o - 2) * n_acc;
        for (int i = 0; i < p.mr; ++i) {
          const Mem ap = dword_ptr(rsi, a_off + (o * p.mr + i) * 4);
          if (p.vnni) {
            for (int j = 0; j < p.nrv; ++j) a.vpdpwssd(s.v(set + i * p.nrv + j), s.v(d0 + j), ap._1to16());
          } else {
            a.vpbroadcastd(s.v(p.abc), ap);
            for (int j = 0; j < p.nrv; ++j) {
              Vec c = s.v(set + i * p.nrv + j);
              a.vpmaddwd(s.v(p.tmp), s.v(d0 + j), s.v(p.abc));
              a.vpaddd(c, c, s.v(p.tmp));
            }
          }
        }
      }
      return;
    }
    int outs[8];
    for (int j = 0; j < p.nrv; ++j) {
      for (int o = 0; o < n_out; ++o) outs[o] = p.dec0 + o * p.nrv + j;
      cg::emit_decode(a, s, key.b_type, b_vec(b_off, j, col_bytes), dr, outs, p.scaled);
    }
    auto quad = [&](int i, int q) { return dword_ptr(rsi, a_off + (q * p.mr + i) * 4); };
    if (p.vnni) {
      // Quad o of every row before quad o + 1: dependent updates of one accumulator are spread.
      for (int o = 0; o < n_out; ++o)
        for (int part = 0; part < (p.a_split ? 2 : 1); ++part)
          for (int i = 0; i < p.mr; ++i) {
            const Mem aq_mem = quad(i, part * aq + o % aq);
            if (p.abc >= 0) a.vpbroadcastd(s.v(p.abc), aq_mem);
            const Operand av = p.abc >= 0 ? Operand(s.v(p.abc)) : Operand(aq_mem._1to16());
            for (int j = 0; j < p.nrv; ++j) {
              const int set = (part ? p.acc_hi : (p.dual && (o & 1)) ? p.acc1 : p.acc0) + (u & 1) * p.kshift;
              a.emit(Inst::kIdVpdpbusd, s.v(set + i * p.nrv + j), s.v(p.dec0 + o * p.nrv + j), av);
            }
          }
    } else {
      // Runs of s16_terms products added in s16, each run widened by vpmaddwd (ones, or
      // 2^hi_shift for outputs o >= a_quads) into the accumulator.
      const int terms = p.dec.s16_terms;
      const Vec t0 = s.v(p.tmp), t1 = s.v(p.tmp + (terms > 1 ? 1 : 0));
      for (int i = 0; i < p.mr; ++i) {
        if (terms > 1)
          for (int q = 0; q < a_units; ++q) a.vpbroadcastd(s.v(p.abc + q), quad(i, q));
        for (int o0 = 0; o0 < n_out; o0 += terms) {
          if (terms == 1) a.vpbroadcastd(s.v(p.abc), quad(i, o0 % aq));
          const int q0 = terms > 1 ? o0 % aq : 0;
          for (int j = 0; j < p.nrv; ++j) {
            a.vpmaddubsw(t0, s.v(p.dec0 + o0 * p.nrv + j), s.v(p.abc + q0));
            for (int o = o0 + 1; o < o0 + terms; ++o) {
              a.vpmaddubsw(t1, s.v(p.dec0 + o * p.nrv + j), s.v(p.abc + o % aq));
              a.vpaddw(t0, t0, t1);
            }
            a.vpmaddwd(t0, t0, s.v(o0 >= aq ? p.hi_mult : p.ones));
            Vec c = s.v(p.acc0 + i * p.nrv + j);
            a.vpaddd(c, c, t0);
          }
        }
      }
    }
  };
  if (mx && !p.dec.int16) {
    // OCP MX blocks are 32 K: a fixed count of steps per group, unrolled (no K loop). (The int16
    // types, E3M2 and the 16-K BDR blocks, keep the loop.)
    const int steps = 32 / p.dec.k_per_step;
    for (int u = 0; u < steps; ++u) emit_step(u);
    a.add(rsi, steps * a_units * p.mr * 4);
    a.add(rdx, steps * step_bytes);
  } else if (p.kblock) {
    // Steps in pairs (the second into the other sets), then the odd one left.
    Label l_k = a.newLabel(), l_odd = a.newLabel(), l_done = a.newLabel();
    a.mov(r8, ARG(k_groups));
    a.shr(r8, 1);
    a.jz(l_odd);
    a.bind(l_k);
    emit_step(0);
    emit_step(1);
    a.add(rsi, 2 * a_units * p.mr * 4);
    a.add(rdx, 2 * step_bytes);
    a.dec(r8);
    a.jnz(l_k);
    a.bind(l_odd);
    a.test(byte_ptr(rdi, static_cast<int32_t>(offsetof(GemmIntArgs, k_groups))), 1);
    a.jz(l_done);
    emit_step(0);
    a.add(rsi, a_units * p.mr * 4);
    a.add(rdx, step_bytes);
    a.bind(l_done);
  } else {
    // At the AVX2 tier, steps in fours where the group has them (then one at a time): fewer
    // pointer and counter updates between the vector uops. (Zen 3, warm, S4 group 128 f32 A, GOPS,
    // three alternating runs, one step / four: 1 x 1024 x 2048 131.6-132.3 / 134.9-136.3, 1 x 4096
    // x 4096 132.8-134.5 / 134.8-136.8; M = 4 / 16 / 64 and MX9 within noise. The zmm tiers,
    // not measured with it, keep one step a loop.)
    const int unroll = s.zmm ? 1 : 4;
    Label l_k = a.newLabel(), l_one = a.newLabel(), l_done = a.newLabel();
    a.mov(r8, ARG(k_groups));
    if (unroll > 1) {
      Label l_u = a.newLabel();
      a.cmp(r8, unroll);
      a.jb(l_one);
      a.bind(l_u);
      for (int u = 0; u < unroll; ++u) emit_step(u);
      a.add(rsi, unroll * a_units * p.mr * 4);
      a.add(rdx, unroll * step_bytes);
      a.sub(r8, unroll);
      a.cmp(r8, unroll);
      a.jae(l_u);
      a.bind(l_one);
      a.test(r8, r8);
      a.jz(l_done);
    }
    a.bind(l_k);
    emit_step(0);
    a.add(rsi, a_units * p.mr * 4);
    a.add(rdx, step_bytes);
    a.dec(r8);
    a.jnz(l_k);
    a.bind(l_done);
  }
  for (int r = 0; r < p.kblock; ++r)
    a.vpaddd(s.v(p.acc0 + r), s.v(p.acc0 + r), s.v(p.acc0 + p.kshift + r));
  if (p.acc2 >= 0)
    for (int r = 0; r < n_acc; ++r) {
      a.vpaddd(s.v(p.acc2 + r), s.v(p.acc2 + r), s.v(p.acc2 + n_acc + r));
      a.vpaddd(s.v(p.acc0 + r), s.v(p.acc0 + r), s.v(p.acc2 + r));
    }
  if (p.acc_hi >= 0)
    for (int r = 0; r < n_acc; ++r) {
      a.vpslld(s.v(p.acc_hi + r), s.v(p.acc_hi + r), 5);  // 32 * (sum of hi * d): exact
      a.vpaddd(s.v(p.acc0 + r), s.v(p.acc0 + r), s.v(p.acc_hi + r));
    }
  if (p.dual)
    for (int r = 0; r < n_acc; ++r) {
      if (p.scaled) a.vpsrad(s.v(p.acc1 + r), s.v(p.acc1 + r), p.dec.scaled_shift);
      a.vpaddd(s.v(p.acc0 + r), s.v(p.acc0 + r), s.v(p.acc1 + r));
    }

  // Exact int32 corrections of this group (decoded registers are free now; the row correction
  // was the sums' starting value).
  if (p.zp_vec) {
    const int zoff = p.grouped ? p.nr * 4 : 0;
    for (int j = 0; j < p.nrv; ++j) load_vec(a, s, p.dec0 + j, b_vec(zoff, j, s.bytes));
    const Vec prod = s.v(p.vnni ? p.dec0 + p.nrv : p.tmp);
    for (int i = 0; i < p.mr; ++i) {
      if (!s.zmm) a.vpbroadcastd(s.v(p.abc), dword_ptr(r12, i * 4));
      for (int j = 0; j < p.nrv; ++j) {
        if (s.zmm)
          a.vpmulld(prod, s.v(p.dec0 + j), dword_ptr(r12, i * 4)._1to16());
        else
          a.vpmulld(prod, s.v(p.dec0 + j), s.v(p.abc));
        Vec c = s.v(p.acc0 + i * p.nrv + j);
        a.vpsubd(c, c, prod);
      }
    }
  }
  if (p.col_corr)
    for (int i = 0; i < p.mr; ++i)
      for (int j = 0; j < p.nrv; ++j) {
        Vec c = s.v(p.acc0 + i * p.nrv + j);
        a.vpaddd(c, c, ptr(r13, r11, 0, j * s.bytes));
      }
  if (mx) {
    // Block scales 2^(b - 127) from the E8M0 bytes, exactly: bits = b << 23, and for b = 0
    // (2^-127, subnormal) and b = 0xff (NaN) OR in 0x400000: special <=> ((b + 1) & 0xfe) == 0.
    // flags bit 6: the plan saw no such byte in these weights: the shift alone.
    const Vec t = s.v(p.dec0 + p.nrv);
    for (int j = 0; j < p.nrv; ++j) {
      const Vec sc = s.v(p.dec0 + j);
      if (p.plain_e8m0) {
        if (s.zmm)
          a.vpmovzxbd(sc, xmmword_ptr(r15, j * s.lanes32));
        else
          a.vpmovzxbd(sc, p.pair && j == 1 ? qword_ptr(r15, pstride) : qword_ptr(r15, j * s.lanes32));
        a.vpslld(sc, sc, 23);
      } else if (s.zmm) {
        a.vpmovzxbd(sc, xmmword_ptr(r15, j * s.lanes32));
        a.vpaddd(t, sc, dword_ptr(rsp, mx_c1)._1to16());
        a.vptestnmd(k1, t, dword_ptr(rsp, mx_cfe)._1to16());
        a.vpslld(sc, sc, 23);
        a.k(k1).vpord(sc, sc, dword_ptr(rsp, mx_c4)._1to16());
      } else {
        a.vpmovzxbd(sc, p.pair && j == 1 ? qword_ptr(r15, pstride) : qword_ptr(r15, j * s.lanes32));
        a.vpaddd(t, sc, ymmword_ptr(rsp, mx_c1));
        a.vpand(t, t, ymmword_ptr(rsp, mx_cfe));
        a.vpsubd(t, t, ymmword_ptr(rsp, mx_c1));  // -1 exactly for the special bytes, else 1..253
        a.vpsrad(t, t, 31);
        a.vpand(t, t, ymmword_ptr(rsp, mx_c4));
        a.vpslld(sc, sc, 23);
        a.vpor(sc, sc, t);
      }
    }
    for (int i = 0; i < n_acc; ++i) {
      Vec c = s.v(p.acc0 + i);
      a.vcvtdq2ps(c, c);
      if (p.group_a) {
        const Mem rg = dword_ptr(r14, (i / p.nrv) * 4);
        if (s.zmm) {
          a.vmulps(c, c, rg._1to16());
        } else {
          if (i % p.nrv == 0) a.vbroadcastss(t, rg);
          a.vmulps(c, c, t);
        }
      }
      a.vfmadd231ps(s.v(p.facc + i), c, s.v(p.dec0 + i % p.nrv));
    }
    a.add(r15, p.nr);
  } else if (p.grouped) {
    for (int i = 0; i < n_acc; ++i) {
      Vec c = s.v(p.acc0 + i);
      a.vcvtdq2ps(c, c);
      if (p.group_a) {
        const Mem rg = dword_ptr(r14, (i / p.nrv) * 4);
        if (s.zmm) {
          a.vmulps(c, c, rg._1to16());
        } else {
          if (i % p.nrv == 0) a.vbroadcastss(s.v(p.dec0), rg);
          a.vmulps(c, c, s.v(p.dec0));
        }
      }
      a.vfmadd231ps(s.v(p.facc + i), c, b_vec(0, i % p.nrv, s.bytes));
    }
  }
  if (param_bytes) a.add(rdx, param_bytes);
  if (p.grouped) {
    a.add(r11, ARG(col_stride));
    a.add(r12, p.mr * 4);
    if (p.group_a) a.add(r14, p.mr * 4);
    a.dec(r10);
    a.jnz(l_group);
  }
  if (mx) {  // next panel: at this panel's 64-byte padded end
    a.add(rdx, 63);
    a.and_(rdx, -64);
  }

  if (p.pair) a.add(rdx, pstride);  // past the second panel
  emit_panel_output(a, s, key, p.mr, p.pair ? 2 * p.nr : p.nr, p.nrv, p.grouped ? p.facc : p.acc0, p.grouped,
                    p.dec0, p.dec0 + 1, l_panel);
  return true;
}

bool emit(const KernelKey& key, Assembler& a, std::string* why) {
  if (key.b_type == QJ_S8) {
    if (key.flags & 64)
      return key.nr == 16       ? emit_s8_tall(key, a, why)
             : key.nr == 64      ? emit_s8_banks(key, a, why)
             : key.param[4] == 1 ? (key.nr == 8 ? emit_s8_narrow_rows8(key, a, why) : emit_s8_narrow_rows(key, a, why))
                                 : emit_s8_narrow(key, a, why);
    return emit_s8(key, a, why);
  }
  return emit_decoded(key, a, why);
}

const char* dt(int t) { return qj_dtype_name(static_cast<qj_dtype>(t)); }

std::string name(const KernelKey& key) {
  const bool vnni = key.isa >= QJ_ISA_AVX512_VNNI;
  char buf[240];
  if (key.b_type != QJ_S8) {
    // Decoded weights: gemm_<A as the kernel reads it><weight type>_..., c<K per step>.
    const cg::DecoderInfo dec = cg::decoder_info(key.b_type);
    std::snprintf(buf, sizeof buf, "gemm_%s%s_acc32_%s_%s%s%s%s%s%s%s%s%s__%s_%dx%dc%d%s%s%s%s%s%s%s%s",
                  dec.int16 || key.param[3] == 1 ? "s16" : dt(key.a_type), dt(key.b_type),
                  key.c_type == QJ_S32 ? "raw" : (key.c_type == QJ_U8 || key.c_type == QJ_S8) ? (key.epilogue ? "reqb" : "req") : "deq",
                  dt(key.c_type), key.granularity == QJ_GRAN_GROUP ? "_grp" : "",
                  key.has_b_zp ? "_bzp" : "", (key.flags & 4) ? "_rc" : "", (key.flags & 2) ? "_cc" : "",
                  key.has_bias ? "_bias" : "", key.activation == QJ_ACT_RELU ? "_relu" : "",
                  key.has_row_scale ? "_dyn" : (key.flags & 16) ? "_dyng" : "", key.has_beta ? "_beta" : "", isa_suffix(key.isa),
                  key.mr, key.nr, dec.k_per_step,
                  key.n_tail ? ("_t" + std::to_string(key.n_tail)).c_str() : "",
                  (key.flags & 8) ? "_dualsc" : (key.flags & 1) ? "_dual" : "",
                  (key.flags & 64) ? "_e8plain" : "", (key.flags & 32) ? "_vbmi" : "",
                  (key.flags & 128) ? "_asplit" : "", key.param[3] == 1 ? "_q2p" : key.param[4] == 1 ? "_b8" : "",
                  key.param[1] == 1 ? "_l2" : key.param[1] == 2 ? "_stream" : key.param[1] == 3 ? "_pair" : "", key.param[5] ? ("_pf" + std::to_string(key.param[5])).c_str() : "");
    return buf;
  }
  const uint32_t stage = key.param[2];
  // B as the kernel reads it: s8 quads (VNNI), s8 pairs widened in the kernel (AVX2), s16 pairs
  const char* b_name = vnni || gemm_int_s8_bytes(static_cast<qj_isa>(key.isa)) ? "s8" : "s16";
  if (stage == 1 || stage == 2) {  // K blocks before the last: raw sums, no output stage
    std::snprintf(buf, sizeof buf, "gemm_%s%s_acc32_kblock_%s__%s_%dx%dc%d%s", vnni ? "u8" : "s16", b_name,
                  stage == 1 ? "first" : "next", isa_suffix(key.isa), key.mr, key.nr, vnni ? 4 : 2,
                  (key.flags & 1) ? "_dual" : "");
    return buf;
  }
  std::snprintf(buf, sizeof buf, "gemm_%s%s_acc32_%s_%s%s%s%s%s%s%s__%s_%dx%dc%d%s%s%s%s%s%s",
                vnni ? "u8" : "s16", b_name,
                key.c_type == QJ_S32 ? "raw" : (key.c_type == QJ_U8 || key.c_type == QJ_S8) ? (key.epilogue ? "reqb" : "req") : "deq",
                dt(key.c_type), key.granularity == QJ_GRAN_GROUP ? "_grp" : "",
                key.has_b_zp ? "_bzp" : "", key.has_bias ? "_bias" : "",
                key.activation == QJ_ACT_RELU ? "_relu" : "", key.has_row_scale ? "_dyn" : "",
                key.has_beta ? "_beta" : "", isa_suffix(key.isa), key.mr, key.nr, vnni ? 4 : 2,
                key.n_tail ? ("_t" + std::to_string(key.n_tail)).c_str() : "",
                (key.flags & 64) ? (key.nr == 16 ? "_tall" : key.nr == 64 ? "_banks" : key.param[4] == 1 ? "_narrowrows" : "_narrow")
                : (key.flags & 1) ? "_dual" : "",
                key.param[0] ? ("_lda" + std::to_string(key.param[0])).c_str()
                : (key.flags & 64) ? ("_k" + std::to_string(key.param[1]) +
                                      (key.param[3] ? "_bs" + std::to_string(key.param[3]) : "")).c_str()
                                   : "",
                stage == 3 ? "_klast" : "", key.param[1] == 3 && !(key.flags & 64) ? "_pair" : "",
                key.param[5] ? ("_pf" + std::to_string(key.param[5])).c_str() : "");
  return buf;
}

}  // namespace

int gemm_int_tall_max_mr(int64_t k, int cap) {
  const int kg = static_cast<int>(k / 4);
  for (int mr = cap; mr >= 1; --mr)
    if (tall_regs(mr, kg) <= 32) return mr;
  return 0;
}

int gemm_int_narrow_rows8_max_mr(int64_t k, int cap) {
  const int kg = static_cast<int>(k / 4);
  for (int mr = cap & ~1; mr >= 2; mr -= 2)
    if (narrow_rows8_regs(mr, kg) + 2 <= 32) return mr;
  return 0;
}

int gemm_int_max_mr(const KernelKey& key_in, int cap) {
  KernelKey key = key_in;
  std::string why;
  for (int mr = cap; mr >= 1; --mr) {
    key.mr = static_cast<uint8_t>(mr);
    if (key.b_type == QJ_S8) {
      Plan p;
      if (make_plan(key, &p, &why)) return mr;
    } else {
      DPlan p;
      if (make_dplan(key, &p, &why)) return mr;
    }
  }
  return 0;
}

const KernelFamily& gemm_int_family() {
  static const KernelFamily f{emit, name, [](const KernelKey& key) -> uint32_t {
                                return (key.flags & 32) ? uint32_t{kJitExtraVbmi} : 0u;  // flags bit 5
                              }};
  return f;
}

}  // namespace qj
