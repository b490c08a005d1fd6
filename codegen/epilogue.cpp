#include "codegen/epilogue.h"

#include <cstddef>

namespace qj::cg {

using namespace asmjit;
using namespace asmjit::x86;

int out_elem_bytes(const KernelKey& key) {
  switch (key.c_type) {
    case QJ_U8:
    case QJ_S8: return 1;
    case QJ_BF16:
    case QJ_F16: return 2;
    default: return 4;
  }
}

namespace {

// dst = op(dst, c) where c is a 32-bit constant of EpilogueConsts in every lane: an embedded
// broadcast on AVX-512, a broadcast into `tmp` first on AVX2.
void op_const(Assembler& a, const Simd& s, InstId inst, const Vec& dst, const EpilogueRegs& r,
              size_t off, int tmp) {
  Mem m = dword_ptr(r.consts, static_cast<int32_t>(off));
  if (s.zmm) {
    a.emit(inst, dst, dst, m._1to16());
  } else {
    a.vpbroadcastd(s.v(tmp), m);
    a.emit(inst, dst, dst, s.v(tmp));
  }
}

// Stores the low `bytes` bytes of xmm register x to [base + off], in 8/4/2/1-byte pieces.
void store_partial_xmm(Assembler& a, const Xmm& x, const Gp& base, int off, int bytes) {
  while (bytes > 0) {
    if (bytes >= 8) {
      a.vmovq(qword_ptr(base, off), x);
      a.vpsrldq(x, x, 8);
      off += 8, bytes -= 8;
    } else if (bytes >= 4) {
      a.vmovd(dword_ptr(base, off), x);
      a.vpsrldq(x, x, 4);
      off += 4, bytes -= 4;
    } else if (bytes >= 2) {
      a.vpextrw(word_ptr(base, off), x, 0);
      a.vpsrldq(x, x, 2);
      off += 2, bytes -= 2;
    } else {
      a.vpextrb(byte_ptr(base, off), x, 0);
      off += 1, bytes -= 1;
    }
  }
}

// Narrow-N stores (see EpilogueRegs; zmm only). A holds the final 32-bit values (fp32 or int32):
// vpermd puts them in row order (unless they are: narrow_rows), then one store of N dwords per
// row.
void store_narrow_dwords(Assembler& a, const EpilogueRegs& r, const Vec& A) {
  if (!r.narrow_rows) {
    const Vec P = zmm(r.t1);
    a.vmovdqu32(P, ptr(r.perm));
    a.vpermd(A, P, A);
  }
  if (r.narrow_compact) {
    a.vmovdqu32(ptr(r.c_row), A);
  } else if (r.narrow_n == 4) {
    a.vmovdqu(ptr(r.c_row), xmm(A.id()));
    a.vextracti32x4(ptr(r.c_row, r.ldc1, 0), A, 1);
    a.vextracti32x4(ptr(r.c_row, r.ldc1, 1), A, 2);
    a.vextracti32x4(ptr(r.c_row, r.ldc3, 0), A, 3);
  } else {
    a.vmovdqu(ptr(r.c_row), ymm(A.id()));
    a.vextracti64x4(ptr(r.c_row, r.ldc1, 0), A, 1);
  }
}

// u8 / s8: the in-range int32 values narrowed to bytes (lane order), put in row order by
// vpshufb (unless they are: narrow_rows), then one store of N bytes per row.
void store_narrow_bytes(Assembler& a, const KernelKey& key, const EpilogueRegs& r, const Vec& A) {
  const Xmm xa = xmm(A.id());
  if (!(key.epilogue & kEpiBoundedY))
    a.vpmovdb(xa, A);
  else if (key.c_type == QJ_U8)
    a.vpmovusdb(xa, A);
  else
    a.vpmovsdb(xa, A);
  if (!r.narrow_rows) a.vpshufb(xa, xa, ptr(r.perm, 64));
  if (r.narrow_compact) {
    a.vmovdqu(ptr(r.c_row), xa);
  } else if (r.narrow_n == 4) {
    a.vmovd(ptr(r.c_row), xa);
    a.vpextrd(ptr(r.c_row, r.ldc1, 0), xa, 1);
    a.vpextrd(ptr(r.c_row, r.ldc1, 1), xa, 2);
    a.vpextrd(ptr(r.c_row, r.ldc3, 0), xa, 3);
  } else {
    a.vmovq(ptr(r.c_row), xa);
    a.vpextrq(ptr(r.c_row, r.ldc1, 0), xa, 1);
  }
}

}  // namespace

void emit_narrow_consts(Assembler& a, const EpilogueRegs& r) {
  // Row-order position row * N + col takes the lane holding (row, col).
  a.align(AlignMode::kData, 64);
  a.bind(r.perm);
  uint32_t d[16];
  uint8_t b[16];
  for (int l = 0; l < 16; ++l) {
    const int pos = narrow_lane_row(r.narrow_n, l) * r.narrow_n + narrow_lane_col(r.narrow_n, l);
    d[pos] = static_cast<uint32_t>(l);
    b[pos] = static_cast<uint8_t>(l);
  }
  a.embed(d, sizeof d);  // [perm, perm + 64): dword permutation (vpermd)
  a.embed(b, sizeof b);  // [perm + 64, perm + 80): byte shuffle (vpshufb)
}

bool packed_rows(const Simd& s, const KernelKey& key, int nrv) {
  return s.zmm && nrv == 4 && (key.c_type == QJ_U8 || key.c_type == QJ_S8);
}

void emit_pack_consts(Assembler& a, const EpilogueRegs& r) {
  // After vpackssdw / vpackuswb of vectors v0..v3, dword 4 l + v holds columns [4 l, 4 l + 4) of
  // vector v; column order wants it at 4 v + l.
  a.align(AlignMode::kData, 64);
  a.bind(r.pack_perm);
  uint32_t d[16];
  for (int v = 0; v < 4; ++v)
    for (int l = 0; l < 4; ++l) d[4 * v + l] = static_cast<uint32_t>(4 * l + v);
  a.embed(d, sizeof d);
}

namespace {

// y of vector j of `row`: float(acc) [* row_scale[row]], then * mult (+ bias), per column.
void scale_vec(Assembler& a, const Simd& s, const KernelKey& key, const EpilogueRegs& r, const Vec& A,
               bool acc_is_float, int row, int j) {
  const Vec T0 = s.v(r.t0), T1 = s.v(r.t1);
  const int col_bytes = j * s.bytes;
  if (!acc_is_float) a.vcvtdq2ps(A, A);
  if (key.has_row_scale) {
    if (s.zmm) {
      a.vmulps(A, A, dword_ptr(r.row_scale, row * 4)._1to16());
    } else {
      a.vbroadcastss(T1, dword_ptr(r.row_scale, row * 4));
      a.vmulps(A, A, T1);
    }
  }
  if (r.mult_v >= 0 && j == 0) {
    if (key.has_bias)
      a.vfmadd213ps(A, s.v(r.mult_v), s.v(r.bias_v));  // A = A * mult + bias
    else
      a.vmulps(A, A, s.v(r.mult_v));
  } else if (key.has_bias) {
    a.vmovups(T0, ptr(r.mult, col_bytes));
    a.vfmadd213ps(A, T0, ptr(r.bias, col_bytes));  // A = A * mult + bias
  } else {
    a.vmulps(A, A, ptr(r.mult, col_bytes));
  }
}

// u8 / s8: y rounded half even to int32, clamped first to the bounds less the zero point unless
// the plan bounded y (see epilogue.h); the zero point is not added yet.
void round_q(Assembler& a, const Simd& s, const KernelKey& key, const EpilogueRegs& r, const Vec& A) {
  if (!(key.epilogue & kEpiBoundedY)) {
    op_const(a, s, Inst::kIdVmaxps, A, r, offsetof(EpilogueConsts, f_lo), r.t0);
    op_const(a, s, Inst::kIdVminps, A, r, offsetof(EpilogueConsts, f_hi), r.t0);
  }
  if (s.zmm) {
    a.rn_sae().vcvtps2dq(A, A);  // embedded round-to-nearest-even, whatever MXCSR says
  } else {
    a.vroundps(A, A, 8);  // round to nearest even, no exceptions, whatever MXCSR says
    a.vcvttps2dq(A, A);   // exact: A holds integers
  }
}

// One whole u8 / s8 row of four zmm vectors acc..acc+3 (see packed_rows).
void emit_output_row_packed(Assembler& a, const Simd& s, const KernelKey& key, const EpilogueRegs& r,
                            int acc, bool acc_is_float, int row) {
  for (int j = 0; j < 4; ++j) {
    scale_vec(a, s, key, r, s.v(acc + j), acc_is_float, row, j);
    round_q(a, s, key, r, s.v(acc + j));
  }
  const Vec A0 = s.v(acc), A2 = s.v(acc + 2), P = s.v(r.t0);
  a.vpackssdw(A0, A0, s.v(acc + 1));  // int16, saturated: the bounds are inside its range
  a.vpackssdw(A2, A2, s.v(acc + 3));
  // (word instructions take no embedded broadcast: the int16 constants go through T1)
  const Vec W = s.v(r.t1);
  a.vpbroadcastd(W, dword_ptr(r.consts, static_cast<int32_t>(offsetof(EpilogueConsts, c_zp_w))));
  a.vpaddsw(A0, A0, W);
  a.vpaddsw(A2, A2, W);
  if ((key.epilogue & kEpiBoundedY) && key.activation == QJ_ACT_RELU) {
    // bounded y skipped the float clamp: the ReLU bound (zero point) in int16; the type's own
    // bounds are the packs' saturation
    a.vpbroadcastd(W, dword_ptr(r.consts, static_cast<int32_t>(offsetof(EpilogueConsts, q_lo_w))));
    a.vpmaxsw(A0, A0, W);
    a.vpmaxsw(A2, A2, W);
  }
  if (key.c_type == QJ_U8)
    a.vpackuswb(A0, A0, A2);
  else
    a.vpacksswb(A0, A0, A2);
  a.vmovdqu32(P, ptr(r.pack_perm));
  a.vpermd(A0, P, A0);
  a.vmovdqu8(ptr(r.c_row, 0), A0);
}

}  // namespace

void emit_output_row64(Assembler& a, const Simd& s, const KernelKey& key, const EpilogueRegs& r, int acc) {
  emit_output_row_packed(a, s, key, r, acc, false, 0);
}

void emit_output_vec(Assembler& a, const Simd& s, const KernelKey& key, const EpilogueRegs& r,
                     int acc, bool acc_is_float, int row, int j, int lanes) {
  if (lanes <= 0) return;
  const Vec A = s.v(acc), T0 = s.v(r.t0), T1 = s.v(r.t1);
  const int eb = out_elem_bytes(key);
  const int c_off = j * s.lanes32 * eb;
  const bool partial = lanes < s.lanes32;
  const int tail_mask_off = static_cast<int>(offsetof(EpilogueConsts, tail_mask)) + j * s.bytes;
  if (partial && s.zmm) {
    a.mov(r.tmp.r32(), (1u << lanes) - 1);
    a.kmovw(k1, r.tmp.r32());
  }

  // Narrow-N tiles (zmm): the vector is whole rows x all N columns (j = 0).
  if (key.c_type == QJ_S32 && r.narrow_n) {
    store_narrow_dwords(a, r, A);
    return;
  }
  if (key.c_type == QJ_S32) {
    if (!partial) {
      if (s.zmm)
        a.vmovdqu32(ptr(r.c_row, c_off), A);
      else
        a.vmovdqu(ptr(r.c_row, c_off), A);
    } else if (s.zmm) {
      a.k(k1).vmovdqu32(ptr(r.c_row, c_off), A);
    } else {
      a.vmovdqu(T1, ptr(r.consts, tail_mask_off));
      a.vpmaskmovd(ptr(r.c_row, c_off), T1, A);
    }
    return;
  }

  scale_vec(a, s, key, r, A, acc_is_float, row, j);

  if (key.c_type == QJ_F32 || key.c_type == QJ_BF16) {
    if (key.activation == QJ_ACT_RELU) op_const(a, s, Inst::kIdVmaxps, A, r, offsetof(EpilogueConsts, zero), r.t0);
    if (key.c_type == QJ_F32 && r.narrow_n) {  // (no beta: the plan does not ask for it)
      store_narrow_dwords(a, r, A);
      return;
    }
    if (key.c_type == QJ_F32) {
      if (key.has_beta) {
        if (!partial) {
          a.vmovups(T0, ptr(r.c_row, c_off));
        } else if (s.zmm) {
          a.k(k1).z().vmovups(T0, ptr(r.c_row, c_off));
        } else {
          a.vmovdqu(T1, ptr(r.consts, tail_mask_off));
          a.vmaskmovps(T0, T1, ptr(r.c_row, c_off));
        }
        if (s.zmm) {
          a.vfmadd231ps(A, T0, dword_ptr(r.consts, offsetof(EpilogueConsts, beta))._1to16());
        } else {
          a.vbroadcastss(T1, dword_ptr(r.consts, offsetof(EpilogueConsts, beta)));
          a.vfmadd231ps(A, T0, T1);
        }
      }
      if (!partial) {
        a.vmovups(ptr(r.c_row, c_off), A);
      } else if (s.zmm) {
        a.k(k1).vmovups(ptr(r.c_row, c_off), A);
      } else {
        a.vmovdqu(T1, ptr(r.consts, tail_mask_off));
        a.vmaskmovps(ptr(r.c_row, c_off), T1, A);
      }
      return;
    }
    // bf16: round to nearest even on the bits: (x + 0x7fff + ((x >> 16) & 1)) >> 16; a NaN is
    // first quietened and its low half cleared (the add then cannot carry into the sign), giving
    // src/formats/half.h's (x >> 16) | 0x40. The fix-up is branched over when the vector holds
    // no NaN (3 ops per vector cost 9% at 256 x 1024 x 64, the test 4%), and left out where no
    // NaN can arise: integer weights (S8 / S4 / U4) have finite scales, A is integer or checked
    // finite, the bias is checked finite, so y is finite or +-inf (a group fold's fma with an
    // exact finite product keeps an inf; GemmInt8.GroupFoldsOverflowingInBf16).
    const bool int_weights = key.b_type == QJ_S8 || key.b_type == QJ_S4 || key.b_type == QJ_U4;
    const Label l_no_nan = a.newLabel();
    if (int_weights) {
      // (nothing to fix)
    } else if (s.zmm) {
      // k1, the output stage's one mask register: kernels keep others across their panels'
      // output stages (docs/kernel-contract.md); a partial vector's store mask is set again below.
      a.vcmpps(k1, A, A, 3);  // unordered: NaN
      a.kortestw(k1, k1);
      a.jz(l_no_nan);
      a.k(k1).vpord(A, A, dword_ptr(r.consts, offsetof(EpilogueConsts, bf16_quiet))._1to16());
      a.k(k1).vpandd(A, A, dword_ptr(r.consts, offsetof(EpilogueConsts, hi16))._1to16());
    } else {
      a.vcmpps(T0, A, A, 3);  // all ones in NaN lanes
      a.vptest(T0, T0);
      a.jz(l_no_nan);
      a.vpsrld(T1, T0, 16);
      a.vpandn(A, T1, A);     // low half cleared
      a.vpsrld(T0, T0, 31);
      a.vpslld(T0, T0, 22);
      a.vpor(A, A, T0);       // quiet bit
    }
    a.bind(l_no_nan);
    if (partial && s.zmm && !int_weights) {
      a.mov(r.tmp.r32(), (1u << lanes) - 1);
      a.kmovw(k1, r.tmp.r32());
    }
    a.vpsrld(T0, A, 16);
    a.vpslld(T0, T0, 31);
    a.vpsrld(T0, T0, 31);
    a.vpaddd(A, A, T0);
    if (s.zmm)
      a.vpternlogd(T1, T1, T1, 0xff);  // all ones (EVEX vpcmpeqd writes a mask register)
    else
      a.vpcmpeqd(T1, T1, T1);
    a.vpsrld(T1, T1, 17);
    a.vpaddd(A, A, T1);
    a.vpsrld(A, A, 16);
    if (s.zmm) {
      if (partial)
        a.k(k1).vpmovdw(ptr(r.c_row, c_off), A);
      else
        a.vpmovdw(ptr(r.c_row, c_off), A);
    } else {
      Xmm xa = xmm(acc), xt = xmm(r.t0);
      a.vextracti128(xt, A.as<Ymm>(), 1);
      a.vpackusdw(xa, xa, xt);
      if (partial)
        store_partial_xmm(a, xa, r.c_row, c_off, lanes * 2);
      else
        a.vmovdqu(ptr(r.c_row, c_off), xa);
    }
    return;
  }

  // u8 / s8 requantization: clamp to the output range less the zero point (NaN becomes the low
  // bound: vmaxps returns its second source), round half even, add the zero point. The value is
  // then in range, so the narrowing store needs no saturation. Bounded y (kEpiBoundedY): round,
  // add the zero point, raise to the lower bound; the saturating store caps it (|y| < 2^30: the
  // conversion and the add cannot overflow, and y is never NaN).
  const bool bounded = (key.epilogue & kEpiBoundedY) != 0;
  round_q(a, s, key, r, A);
  if (r.zp_v >= 0)
    a.vpaddd(A, A, s.v(r.zp_v));
  else
    op_const(a, s, Inst::kIdVpaddd, A, r, offsetof(EpilogueConsts, c_zp), r.t0);
  if (bounded && r.lo_v >= 0)
    a.vpmaxsd(A, A, s.v(r.lo_v));
  else if (bounded)
    op_const(a, s, Inst::kIdVpmaxsd, A, r, offsetof(EpilogueConsts, q_lo), r.t0);
  if (r.narrow_n) {
    store_narrow_bytes(a, key, r, A);
    return;
  }
  if (s.zmm) {
    const InstId narrow = !bounded ? Inst::kIdVpmovdb
                          : key.c_type == QJ_U8 ? Inst::kIdVpmovusdb : Inst::kIdVpmovsdb;
    if (partial)
      a.k(k1).emit(narrow, ptr(r.c_row, c_off), A);
    else
      a.emit(narrow, ptr(r.c_row, c_off), A);
  } else {
    Xmm xa = xmm(acc), xt = xmm(r.t0);
    a.vextracti128(xt, A.as<Ymm>(), 1);
    a.vpackssdw(xa, xa, xt);  // saturating packs: bounded y may exceed the upper bound
    if (key.c_type == QJ_U8)
      a.vpackuswb(xa, xa, xa);
    else
      a.vpacksswb(xa, xa, xa);
    if (partial)
      store_partial_xmm(a, xa, r.c_row, c_off, lanes);
    else
      a.vmovq(ptr(r.c_row, c_off), xa);
  }
}

int emit_resident_consts(Assembler& a, const Simd& s, const KernelKey& key, EpilogueRegs& r, int first,
                         int count) {
  if (!s.zmm || key.c_type == QJ_S32) return 0;
  int used = 0;
  const int mb = key.has_bias ? 2 : 1;  // scale_vec takes the multipliers and bias both or neither
  if (count >= mb) {
    r.mult_v = first;
    a.vmovups(s.v(r.mult_v), ptr(r.mult));
    if (key.has_bias) {
      r.bias_v = first + 1;
      a.vmovups(s.v(r.bias_v), ptr(r.bias));
    }
    used = mb;
  }
  auto bcst = [&](int& field, size_t off) {
    if (used == count) return;
    field = first + used++;
    a.vpbroadcastd(s.v(field), dword_ptr(r.consts, static_cast<int32_t>(off)));
  };
  if (key.c_type == QJ_U8 || key.c_type == QJ_S8) {
    bcst(r.zp_v, offsetof(EpilogueConsts, c_zp));
    if (key.epilogue & kEpiBoundedY) bcst(r.lo_v, offsetof(EpilogueConsts, q_lo));
  }
  return used;
}

namespace {
const Gp kCalleeSaved[] = {rbx, rbp, r12, r13, r14, r15};
}

void emit_save_callee_regs(Assembler& a) {
  for (const Gp& g : kCalleeSaved) a.push(g);
}

void emit_restore_and_return(Assembler& a) {
  a.vzeroupper();
  for (int i = 5; i >= 0; --i) a.pop(kCalleeSaved[i]);
  a.ret();
}

void emit_panel_end(Assembler& a, const Simd& s, const KernelKey& key, const EpilogueRegs& r,
                    const PanelEnd& pe) {
  const bool packed = packed_rows(s, key, pe.nrv) && !r.narrow_n && r.pack_perm.isValid();
  auto stores = [&](int n_live) {
    a.mov(rbx, rcx);
    for (int i = 0; i < pe.mr; ++i) {
      if (packed && n_live == pe.nr) {
        emit_output_row_packed(a, s, key, r, pe.acc + i * pe.nrv, pe.acc_is_float, i);
        if (i + 1 < pe.mr) a.add(rbx, qword_ptr(rdi, pe.ldc_off));
        continue;
      }
      for (int j = 0; j < pe.nrv; ++j) {
        int lanes = n_live - j * s.lanes32;
        lanes = lanes < 0 ? 0 : (lanes > s.lanes32 ? s.lanes32 : lanes);
        emit_output_vec(a, s, key, r, pe.acc + i * pe.nrv + j, pe.acc_is_float, i, j, lanes);
      }
      if (i + 1 < pe.mr) a.add(rbx, qword_ptr(rdi, pe.ldc_off));
    }
  };
  Label l_next = a.newLabel();
  if (key.n_tail) {
    Label l_full = a.newLabel();
    a.cmp(r9, 1);
    a.jne(l_full);
    a.cmp(qword_ptr(rdi, pe.last_is_tail_off), 0);
    a.je(l_full);
    stores(key.n_tail);
    a.jmp(l_next);
    a.bind(l_full);
  }
  stores(pe.nr);
  a.bind(l_next);
  a.add(rcx, pe.nr * out_elem_bytes(key));
  a.add(rbp, pe.nr * 4);
  a.dec(r9);
  a.jnz(pe.l_panel);
}

}  // namespace qj::cg
