// Emitter of the float-weight GEMM microkernels declared in gemm_float.h.
//
// Register plan (System V: the argument pointer arrives in rdi and stays there):
//   rsi  A tile pointer   rdx  B pointer (runs through all panels)   rcx  C of the current panel
//   r8   K loop counter   r9   panel counter   rbp  panel column offset (bytes into the fp32
//   per-column arrays)    rbx  C row (epilogue)   rax scratch; r10/r11 in the epilogue.
//   MXFP8: rbx = the block's E8M0 bytes and r10 = the inner loop counter during the K loop.
//   Direct A: rows 3j, 3j+1, 3j+2 at [base_j], [base_j + r11], [base_j + 2 r11] with r11 = lda
//   bytes and base_j = rsi, r12, r13, r14, r15 (rows 0..14), all advanced along K together.
// Vector registers: [0, sets*mr*nrv) accumulators, then the converted weight vectors (nrv for
// f16, 2*nrv for bf16: k and k+1), the bf16 high-half mask, the AVX2 A broadcast register.
// MXFP8 adds the per-block totals or the scale vectors, a zero vector and the E4M3 mask (Plan).
//
// Measured on the Zen 4 host (docs: PERF.md has Intel numbers): vfmadd231ps zmm 1/cycle, latency
// 4; vcvtph2ps zmm 0.75/cycle and it competes with the FMAs (8 FMA + 8 cvt: 12.7 cycles, 8 FMA +
// 4 cvt: 8 cycles), so one conversion per 2 or more FMAs (mr >= 2) is free; the bf16 shift
// (1/cycle) likewise. At mr = 1 the f16 conversion caps a GEMV at ~0.65 of the FMA peak.
#include "codegen/gemm_float.h"

#include <algorithm>
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

#define ARG(field) qword_ptr(rdi, static_cast<int32_t>(offsetof(GemmFloatArgs, field)))

// Where an MX panel's weights come from (the layouts of src/ops/int_weights.h):
//   kFp8       kMxFp8 E4M3 / E5M2 codes, per k nr bytes
//   kBdrPair   kMx16, BDR MX9 / MX6 / MX4 in place (the int16-pair kernels' layout, blocks of
//              16 k): MX9 / MX6 as kE3m2Pair with int8 q (MX9: q or q / 2, and per pair row a
//              mask of 2 * lanes "doubled" bits after the step's codes); MX4 one dword per column
//              holding the nibble q + 8 of k0 + 2o + r at bits 16 r + 4 o
//   kInt8Quad  kMxByte, MXINT8 codes in place: per 8-k step and column vector, lanes dwords of
//              k0..3 then of k4..7 (the int8 kernels' layout)
//   kFp4Nibble kMxNibble, MXFP4 codes in place: per 8-k step, nr dwords, byte r of a column's
//              dword holds k0 + r (low nibble) and k0 + 4 + r (high nibble)
//   kE2m3Quad  kMxByte, MXFP6 E2M3 codes in place (the layout of kInt8Quad): each chunk of lanes
//              dwords is decoded once to the int8 integer forms q = 8v, then read as kInt8Quad
//   kE3m2Pair  kMx16, MXFP6 E3M2 codes in place: per 8-k step and column vector, for pair row o
//              lanes words (codes of k0 + 2o, k0 + 2o + 1), each word's byte e = k % 2
//   (kE3m2Pair and kBdrPair MX6 on the VNNI tier: the same codes, 6 bits each, cg::emit_fp6_words)
enum class MxSrc { kFp8, kBdrPair, kInt8Quad, kFp4Nibble, kE2m3Quad, kE3m2Pair };

struct Plan {
  cg::Simd s;
  bool bf16, direct;
  int mr, nr, nrv, sets;
  int acc, bvec, mask, abc;
  // MX blocks (b_type MXFP8 E4M3 / E5M2, or any integer-form MX / BDR type read in its integer
  // kernels' layout): see the MX section below.
  bool mx = false, e4m3 = false;
  MxSrc src = MxSrc::kFp8;
  int bdr = 0;            // kBdrPair: the BDR type
  int block = 32;         // k per block (BDR: 16)
  int shift = 0;          // value = element * 2^(b - 127 - shift) (FP8: 0; E4M3's 2^8 is col_mult)
  int step_bytes = 0;     // bytes of 8 k of a panel
  int upi = 1;            // K units per inner-loop iteration (a step of 8 for the in-place
                          // layouts, MX9 zmm a block of 16; MXFP8: sets)
  int tbl = -1, smask = -1, tmp = -1;  // kFp4Nibble: value table; AVX2: sign mask and a temporary
  // kBdrPair: MX9 / MX6 dq the nrv decoded pair rows (s16, a dword per column); MX4 zmm tbl the
  // 16 values u - 8, ymm smask 0x80000000; MX9 ymm tbl the word bit selector and tmp.
  // kE2m3Quad: dq the nrv decoded chunks; with VBMI (key.flags bit 2, zmm) one 64-byte table of q
  // in tbl, else tbl / tbl + 1 the 16-byte tables of |q| (magnitudes 0..15, 16..31) and temps
  // from tmp (zmm: the codes; ymm: the codes and one more); zmm without VBMI also the byte
  // constants 0x10, 0x20, zero and 0x3f at cst. VNNI tier (fp6_dense): the codes are dense (6 bits
  // each, cg::emit_fp6_unpack), its idx at fp6 and, multishift form, its ctl at fp6 + 1 (the
  // shuffle form reads it from the table after the code).
  bool vbmi = false, fp6_dense = false;
  int dq = -1, cst = -1, fp6 = -1;
  Label data;  // the tables after the code (l_fp4 in emit)
  bool blockacc = false;  // key.flags bit 1: per-block accumulators (else scaled weight vectors)
  bool pair = false;      // nrv even: vectors decoded in pairs by vpunpck{l,h}bw
  int sc = -1;            // scaled weights: the nrv block-scale vectors
  int tot = -1;           // per-block accumulators: the mr * nrv totals
  int zero = -1, emask = -1;  // zero vector (pairs); E4M3 word mask 0xbfff
};

// Dense E2M3 codes (VNNI tier): the unpack's vpmultishiftqb form (VBMI) for tiles of up to 4 rows, else
// its shuffle form. Measured 4096 x 4096 under MXFP8 A (GOPS; one byte per code before): M = 1
// multishift 39, shuffle 29 (30-32 before); M = 256 multishift 77, shuffle 99 (105 before): this
// kernel is FMA-bound from a few rows on, and vpmultishiftqb takes an FMA pipe slot.
bool fp6_multishift(const Plan& p) { return p.fp6_dense && p.vbmi && p.mr <= 4; }

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
  const int bt = key.b_type;
  p->mx = true;
  if (bt == QJ_MXFP8_E4M3 || bt == QJ_MXFP8_E5M2) {
    p->src = MxSrc::kFp8;
  } else if (bt == QJ_BDR_MX9 || bt == QJ_BDR_MX6 || bt == QJ_BDR_MX4) {
    p->src = MxSrc::kBdrPair;
    p->bdr = bt;
    p->block = 16;
    p->shift = bt == QJ_BDR_MX9 ? 7 : bt == QJ_BDR_MX6 ? 4 : 2;
  } else if (bt == QJ_MXINT8) {
    p->src = MxSrc::kInt8Quad;
    p->shift = 6;
  } else if (bt == QJ_MXFP4_E2M1) {
    p->src = MxSrc::kFp4Nibble;
  } else if (bt == QJ_MXFP6_E2M3) {
    p->src = MxSrc::kE2m3Quad;
    p->shift = 3;
  } else if (bt == QJ_MXFP6_E3M2) {
    p->src = MxSrc::kE3m2Pair;
  } else {
    p->mx = false;
    if (bt != QJ_F16 && bt != QJ_BF16) {
      *why = "weights must be f16, bf16 or an MX / BDR type";
      return false;
    }
  }
  p->bf16 = key.b_type == QJ_BF16;
  p->e4m3 = key.b_type == QJ_MXFP8_E4M3;
  p->blockacc = p->mx && (key.flags & 2) != 0;
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
  if (p->mx && 64 % p->nr != 0) {  // scale lines (int_weights.h) hold the bytes of 64 / nr groups
    *why = "MX panels need nr dividing 64";
    return false;
  }
  p->nrv = p->nr / p->s.lanes32;
  int used = 0;
  p->acc = used, used += p->sets * p->mr * p->nrv;
  if (p->blockacc) p->tot = used, used += p->mr * p->nrv;
  // Weight vectors; at least two, because the epilogue borrows two of them as scratch. Block
  // accumulators decode the scales into them at the block end, with one more as a temporary.
  p->bvec = used, used += std::max(2, p->nrv * (p->bf16 ? 2 : 1) + (p->blockacc ? 1 : 0));
  p->mask = p->bf16 ? used++ : -1;
  if (p->mx) {
    p->pair = p->nrv % 2 == 0 && p->src == MxSrc::kFp8;
    if (!p->blockacc) p->sc = used, used += p->nrv;
    if (p->pair) p->zero = used++;
    if (p->e4m3) p->emask = used++;
    if (p->src == MxSrc::kFp4Nibble) {
      p->tbl = used++;
      if (!p->s.zmm) p->smask = used++, p->tmp = used++;
    }
    if (p->src == MxSrc::kE2m3Quad) {
      p->vbmi = p->s.zmm && (key.flags & 4) != 0;
      p->dq = used, used += p->nrv;
      p->tbl = used, used += p->vbmi ? 1 : 2;
      if (!p->vbmi) p->tmp = used, used += p->s.zmm ? 1 : 2;
      p->fp6_dense = p->s.zmm && key.isa >= QJ_ISA_AVX512_VNNI;  // PackedWeights::fp6_dense
      if (!p->vbmi && p->s.zmm) p->cst = used, used += p->fp6_dense ? 4 : 3;
      if (p->fp6_dense) p->fp6 = used, used += fp6_multishift(*p) ? 2 : 1;  // the shuffle form's ctl: l_fp4
    }
    // Dense E3M2 / MX6 (VNNI tier, PackedWeights::fp6_dense): a pair row unpacked once into dq
    // (cg::emit_fp6_words), its idx, cnt (and without VBMI shuf) at fp6.
    const bool words6 = p->s.zmm && key.isa >= QJ_ISA_AVX512_VNNI &&
                        (p->src == MxSrc::kE3m2Pair || (p->src == MxSrc::kBdrPair && p->bdr == QJ_BDR_MX6));
    if (words6) {
      p->fp6_dense = true;
      p->vbmi = (key.flags & 4) != 0;
      p->fp6 = used, used += p->vbmi ? 2 : 3;
      if (p->src == MxSrc::kE3m2Pair) {
        // E3M2 then to its integer form q = 16 v (the int16-pair kernels' vpermi2w table, in
        // tbl, tbl + 1) and on as MX6: value = q * 2^-4.
        p->dq = used, used += p->nrv;
        p->tbl = used, used += 2;
        p->shift = 4;
      }
    }
    if (p->src == MxSrc::kE3m2Pair && !words6) p->tbl = used++;  // 0x9fff words
    if (p->src == MxSrc::kBdrPair) {
      if (p->bdr != QJ_BDR_MX4) p->dq = used, used += p->nrv;
      if (p->bdr == QJ_BDR_MX4) (p->s.zmm ? p->tbl : p->smask) = used++;
      if (p->bdr == QJ_BDR_MX9 && !p->s.zmm) p->tbl = used++, p->tmp = used++;
    }
    const bool quad = p->src != MxSrc::kFp8;
    const int col_step = p->src == MxSrc::kFp4Nibble || p->bdr == QJ_BDR_MX4 ? 4
                         : p->bdr == QJ_BDR_MX9 ? 9
                         : p->fp6_dense ? 6 : 8;
    p->step_bytes = col_step * p->nr;
    p->upi = quad ? 8 : p->sets;
    // MX9 (zmm): a whole block (2 steps) per iteration, so that each pair row's mask can be
    // loaded while the previous one is decoded without reading past the block (k2..k5: pair
    // row parity x column vector, so at most two column vectors).
    if (p->src == MxSrc::kBdrPair && p->bdr == QJ_BDR_MX9 && p->s.zmm) {
      if (p->nrv > 2) {
        *why = "MX9 weights: at most two column vectors (mask registers)";
        return false;
      }
      p->upi = p->block;
    }
    if (p->block % p->upi != 0 || p->upi % p->sets != 0) {
      *why = "accumulator sets must divide the units of a block";
      return false;
    }
  }
  // A's element for row i: at zmm from memory in each FMA ({1to16}), or (key.flags bit 3, two
  // or more column vectors) broadcast into abc once, then FMAs from registers; at ymm always
  // abc. src/ops/gemm.cpp sets bit 3 on Zen 5, where an FMA with an embedded broadcast costs
  // more than a register FMA, so two of them per A element lost to one vbroadcastss
  // (2026-12-01, EPYC family 0x1A, warm 512 x 512, GFLOPS, embedded -> register; FMA peak 262):
  // f16 M = 8 / 64 / 119 215-222 -> 254-256 / 228-234 -> 252-259 / 231-235 -> 253-259, M = 1
  // 120 -> 140; bf16 (whose tile is then 13 rows, not 14) M = 64 228 -> 256, M = 1 116-125 ->
  // 163; MXFP8 E4M3 / E5M2 M = 64 210 / 211-214 -> 230 / 245, M = 1-8 within 2% (or +10% E5M2).
  p->abc = p->s.zmm && !(p->nrv >= 2 && (key.flags & 8)) ? -1 : used++;
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
  if (s.zmm && p.abc < 0)
    a.vfmadd231ps(s.v(acc), s.v(b), m._1to16());
  else
    a.vfmadd231ps(s.v(acc), s.v(b), s.v(p.abc));
}

// ---- MX blocks ----
// MXFP8 weights: per k, nr code bytes (kMxFp8, src/ops/int_weights.h). A code becomes an fp16
// word in registers, then fp32 (vcvtph2ps), exactly:
//   E5M2 is the top byte of an fp16: word = code << 8 (vpunpck{l,h}bw with a zero vector as the
//        low bytes, or vpmovzxbw + vpsllw 8); Inf and NaN codes become fp16 Inf / NaN.
//   E4M3: word = sign << 15 | (code & 0x7f) << 7 = (code << 8 arithmetically shifted right by 1)
//        & 0xbfff is an fp16 of value * 2^-8 (exponent 4 -> 5 bits with bias 7 -> 15 is the 2^-8;
//        E4M3 subnormals land on fp16 subnormals, also exact). The 2^8 is in col_mult (the plan);
//        the NaN codes, which this mapping does not keep, carry a NaN block scale (the packer).
// Block scales 2^(b - 127) from the E8M0 bytes of the panel's scale lines (rbx), as gemm_int does:
// bits = b << 23, with 0x400000 OR-ed in for b = 0 (2^-127) and b = 0xff (NaN).
// Two ways to apply them (key.flags bit 1):
//   scaled weights (0): every decoded weight vector is multiplied by its column scales (exact: a
//     power of two times a value with 4 significant bits, far from the fp32 range limits except
//     for weights that are beyond it anyway), then the FMAs accumulate as for f16. One vmulps per
//     weight vector, shared by the mr rows.
//   per-block accumulators (1): the 32 k of a block accumulate unscaled (zeroed per block), then
//     total = fma(block sum, scale, total): no vmulps per k, but twice the accumulators (small mr).
// The other MX weights, all under MXFP8 A (src/ops/gemm.cpp), decoded exactly:
//   BDR MX9 / MX6 in the int16-pair layout (kBdrPair, read in place): a pair row to s16 once
//     (vpmovsxbw; MX9 doubled under its mask: zmm a masked vpaddw, ymm the word bits compared),
//     then each k's word to the dword (vpslld 16 + vpsrad 16, or vpsrad 16) and vcvtdq2ps; MX4
//     the dword shifted so the nibble is at bits 0..3, then vpermps from the 16 values u - 8
//     (ymm: shifted to the top, bit 31 flipped, vpsrad 28: u - 8 as int32; vcvtdq2ps);
//   MXINT8 in the int8 kernels' quad layout (kInt8Quad, read in place): byte r of each dword to
//     the top (vpslld 24 - 8r) and back sign-extended (vpsrad 24), then vcvtdq2ps;
//   MXFP4 in its nibble layout (kFp4Nibble, read in place): the dword shifted right so the
//     wanted nibble is at bits 0..3, then vpermps from a register of the 16 code values (zmm:
//     vpermps reads the index's low 4 bits, so no mask; ymm reads 3 bits: the 8 magnitudes, and
//     bit 3 moved to the sign (vpslld 28, vpand 0x80000000, vxorps)).
//   MXFP6 E2M3 in the quad layout (kE2m3Quad, read in place): a chunk to q = 8v once
//     (emit_e2m3_chunk), then as MXINT8.
//   MXFP6 E3M2 in the int16-pair kernels' layout (kE3m2Pair, read in place): through fp16 as
//     value * 2^-12, the 2^12 in col_mult (see emit_mx_int_decode). Dense (6 bits, the VNNI
//     tier): a pair row's codes to words once (cg::emit_fp6_words), to q = 16 v by the vpermi2w
//     table, then as MX6 (value = q * 2^-4); dense MX6 takes each k's word from the code at the
//     word's top (vpsrad 26).
//     Measured against one byte per value (4096 x 4096, MXFP8 E4M3 A, GOPS): E3M2 M = 1 34
//     against 36-37, M = 16 88-89 against 101-103, M = 256 102-103 against 109; MX6 35 against 40-41,
//     99-100 against 98-99, 104 against 104 (shifts and vcvtdq2ps share a pipe on Zen 4).
//   These layouts hold 8 k per step, so their inner loop runs one step (8 units) per
//   iteration (MX9 with zmm: its block of two, see make_plan). Where value = element * 2^-shift (MXINT8 6, E2M3 3; BDR m), the scale vectors are
//   multiplied by 2^-shift (exact: 2^(b - 127 - shift) >= 2^-134, an fp32 subnormal at worst).
// Red-zone constants (dwords 1, 0xfe, 0x400000, 2^-shift; zmm: one each at rsp-16.., ymm: vectors
// at rsp-128).
constexpr int kC1Zmm = -16, kCfeZmm = -12, kC4Zmm = -8, kCshZmm = -4;
constexpr int kC1Ymm = -96, kCfeYmm = -64, kC4Ymm = -32, kCshYmm = -128;

// FP4 (E2M1) code values, the table of kFp4Nibble (placed after the code, label l_fp4).
constexpr float kFp4Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                  -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// The dense E2M3 unpack's ctl operand: a register (multishift form) or the table after the
// code (offset 128, see emit).
Operand fp6_ctl(const Plan& p) {
  if (fp6_multishift(p)) return p.s.v(p.fp6 + 1);
  return zmmword_ptr(p.data, 128);
}

// E2M3 codes of one chunk (lanes dwords of 4 codes) at m -> their integer forms q = 8v (int8) in q
// (zmm: tmp clobbered).
void emit_e2m3_chunk(Assembler& a, const Plan& p, const Mem& m, const Vec& q, const Vec& tmp) {
  const cg::Simd& s = p.s;
  if (p.vbmi) {  // one vpermb over the 64-entry table (index bits 0..5: the whole code)
    if (p.fp6_dense)
      cg::emit_fp6_unpack(a, fp6_multishift(p), q, m, s.v(p.fp6), fp6_ctl(p), tmp);
    else
      a.vmovdqu32(q, m);
    a.vpermb(q, q, s.v(p.tbl));
    return;
  }
  // Without VBMI the int8 kernels' decoders (codegen/weight_decode.h), with tables of |q| and
  // zmm's negative side 0 - |q|.
  const Vec c = s.v(p.tmp);
  if (s.zmm) {
    if (p.fp6_dense) {
      cg::emit_fp6_unpack(a, false, c, m, s.v(p.fp6), fp6_ctl(p), q);
      a.vpandd(c, c, s.v(p.cst + 3));
    } else {
      a.vmovdqu32(c, m);
    }
    cg::emit_e2m3_bytes_zmm(a, q, c, s.v(p.tbl), s.v(p.tbl + 1), s.v(p.cst), s.v(p.cst + 1), s.v(p.cst + 2));
    return;
  }
  a.vmovdqu(c, m);
  cg::emit_e2m3_bytes_ymm(a, q, c, s.v(p.tmp + 1), s.v(p.tbl), s.v(p.tbl + 1));
}

// MX9 (zmm): the mask register of pair row pr of the block for column vector j (see make_plan).
KReg mx9_mask(int pr, int j) { return KReg(2 + (pr % 2) * 2 + j); }

// zmm: v = the 16-entry table lookup (vpermps: index bits 0..3) of the dwords at m >> sh.
void emit_nibble_lut_zmm(Assembler& a, const Vec& v, const Mem& m, int sh, const Vec& tbl) {
  if (sh)
    a.vpsrld(v, m, sh);
  else
    a.vmovdqu32(v, m);
  a.vpermps(v, v, tbl);
}

// Weight vector j of unit u from the integer forms or the in-place quad layouts into v.
void emit_mx_int_decode(Assembler& a, const Plan& p, int u, int j, const Vec& v) {
  const cg::Simd& s = p.s;
  if (p.src == MxSrc::kBdrPair || (p.src == MxSrc::kE3m2Pair && p.fp6_dense)) {
    const int o = (u % 8) / 2, r = u % 2, st = (u / 8) * p.step_bytes;  // st: step of the unit
    if (p.bdr == QJ_BDR_MX4) {
      const Mem m = ptr(rdx, j * s.lanes32 * 4);
      const int sh = 16 * r + 4 * o;
      if (s.zmm) {
        emit_nibble_lut_zmm(a, v, m, sh, s.v(p.tbl));
        return;
      }
      a.vmovdqu(v, m);
      if (sh != 28) a.vpslld(v, v, 28 - sh);
      a.vpxor(v, v, s.v(p.smask));  // u ^ 8 as a 4-bit two's complement is u - 8
      a.vpsrad(v, v, 28);
      a.vcvtdq2ps(v, v);
      return;
    }
    const int col_bytes = (p.bdr == QJ_BDR_MX9 ? 9 : p.fp6_dense ? 6 : 8) * s.lanes32;
    const Vec q = s.v(p.dq + j);
    if (r == 0) {  // the pair row's 2 * lanes codes to s16 (a dword per column), once
      if (p.fp6_dense) {  // 6 bits: MX6's codes at the words' tops, E3M2's codes to q = 16 v
        const bool e3m2 = p.src == MxSrc::kE3m2Pair;
        cg::emit_fp6_words(a, p.vbmi, e3m2 ? cg::Fp6Words::kCode : cg::Fp6Words::kTop, q,
                           ptr(rdx, st + j * col_bytes), o, s.v(p.fp6), s.v(p.fp6 + 2), s.v(p.fp6 + 1));
        if (e3m2) a.vpermi2w(q, s.v(p.tbl), s.v(p.tbl + 1));
      } else {
        a.vpmovsxbw(q, ptr(rdx, st + j * col_bytes + o * 2 * s.lanes32, s.bytes / 2));
      }
      if (p.bdr == QJ_BDR_MX9) {
        const int flags = st + j * col_bytes + 8 * s.lanes32 + o * s.lanes32 / 4;  // 2 * lanes bits
        if (s.zmm) {
          // Pair row P of the block (P = u / 2): its mask was loaded while pair row P - 1 was
          // decoded (P = 0: before the block's loop, emit_mx_main), so the load is off the
          // decode's critical path (M = 256, 4096^2: 95 against 83 GOPS loading it here).
          const int pr = u / 2;
          if (pr + 1 < p.block / 2) {
            const int nf = pr % 4 == 3 ? st + p.step_bytes + j * col_bytes + 8 * s.lanes32  // next step's
                                       : flags + s.lanes32 / 4;
            a.kmovd(mx9_mask(pr + 1, j), dword_ptr(rdx, nf));
          }
          a.k(mx9_mask(pr, j)).vpaddw(q, q, q);
        } else {
          const Vec t = s.v(p.tmp);
          a.vpbroadcastw(t, word_ptr(rdx, flags));
          a.vpand(t, t, s.v(p.tbl));
          a.vpcmpeqw(t, t, s.v(p.tbl));  // 0xffff where the element is doubled
          a.vpand(t, t, q);
          a.vpaddw(q, q, t);
        }
      }
    }
    // The word of this k sign-extended to its dword (dense MX6: from the word's top 6 bits, one
    // shift fewer than sign-extending the words first; shifts share a pipe with vcvtdq2ps)
    const int top = p.fp6_dense && p.src == MxSrc::kBdrPair ? 26 : 16;
    if (r == 0) {
      a.vpslld(v, q, 16);
      a.vpsrad(v, v, top);
    } else {
      a.vpsrad(v, q, top);
    }
    a.vcvtdq2ps(v, v);
    return;
  }
  if (p.src == MxSrc::kInt8Quad || p.src == MxSrc::kE2m3Quad) {
    const int b = u % 4;
    const bool dense = p.src == MxSrc::kE2m3Quad && p.fp6_dense;  // chunks of 64 codes in 48 bytes
    const Mem m = dense ? ptr(rdx, j * 2 * cg::kFp6VectorBytes + (u / 4) * cg::kFp6VectorBytes)
                        : ptr(rdx, j * 8 * s.lanes32 + (u / 4) * s.lanes32 * 4);
    if (p.src == MxSrc::kE2m3Quad) {  // the chunk's q bytes, decoded by its first unit
      const Vec q = s.v(p.dq + j);
      if (b == 0) emit_e2m3_chunk(a, p, m, q, v);  // v is written after it
      if (b != 3) {
        a.vpslld(v, q, 24 - 8 * b);
        a.vpsrad(v, v, 24);
      } else {
        a.vpsrad(v, q, 24);
      }
    } else if (s.zmm) {  // EVEX shifts take the memory operand
      if (b == 3) {
        a.vpsrad(v, m, 24);
      } else {
        a.vpslld(v, m, 24 - 8 * b);
        a.vpsrad(v, v, 24);
      }
    } else {
      a.vmovdqu(v, m);
      if (b != 3) a.vpslld(v, v, 24 - 8 * b);
      a.vpsrad(v, v, 24);
    }
    a.vcvtdq2ps(v, v);
    return;
  }
  if (p.src == MxSrc::kE3m2Pair) {
    // The code as an fp16 of value * 2^-12 (exponent bias 3 -> 15; subnormals land on fp16
    // subnormals): sign << 15 | (code & 0x1f) << 8 = ((code << 10) >> 2 arithmetically) & 0x9fff,
    // the high byte first moved down; then vcvtph2ps. The 2^12 is in col_mult (the plan), as
    // E4M3's 2^8 (a vmulps per vector here measured 0.8x at M = 1 and 256, zmm).
    const Vec h = s.half(v.id());
    const Mem m = ptr(rdx, j * 8 * s.lanes32 + (u / 2) * 2 * s.lanes32, s.bytes / 2);
    if (u % 2 == 0) {
      if (s.zmm) {
        a.vpsllw(h, m, 10);
      } else {
        a.vmovdqu(h, m);
        a.vpsllw(h, h, 10);
      }
    } else {
      if (s.zmm) {
        a.vpsrlw(h, m, 8);
      } else {
        a.vmovdqu(h, m);
        a.vpsrlw(h, h, 8);
      }
      a.vpsllw(h, h, 10);
    }
    a.vpsraw(h, h, 2);
    if (s.zmm)
      a.vpandd(h, h, s.half(p.tbl));
    else
      a.vpand(h, h, s.half(p.tbl));
    a.vcvtph2ps(v, h);
    return;
  }
  // kFp4Nibble
  const int sh = 8 * (u % 4) + 4 * (u / 4);
  const Mem m = ptr(rdx, j * s.lanes32 * 4);
  if (s.zmm) {
    emit_nibble_lut_zmm(a, v, m, sh, s.v(p.tbl));
    return;
  }
  const Vec t = s.v(p.tmp);
  a.vmovdqu(t, m);
  if (sh) a.vpsrld(t, t, sh);
  a.vpermps(v, t, s.v(p.tbl));
  a.vpslld(t, t, 28);
  a.vpand(t, t, s.v(p.smask));
  a.vxorps(v, v, t);
}

// Weight vector j (and j + 1 in pair mode) of unit u: fp32 weights (unscaled) in bvec + j.
void emit_mx_decode(Assembler& a, const Plan& p, int u, int j) {
  const cg::Simd& s = p.s;
  if (p.src != MxSrc::kFp8) {
    const Vec v = s.v(p.bvec + j);
    emit_mx_int_decode(a, p, u, j, v);
    if (!p.blockacc) a.vmulps(v, v, s.v(p.sc + j));
    return;
  }
  const int base = u * p.nr;
  int regs[2] = {p.bvec + j, p.bvec + j + 1};
  int n = 1;
  if (p.pair) {
    n = 2;
    const int off = base + (j / 2) * 2 * s.lanes32;
    Mem m = s.zmm ? ymmword_ptr(rdx, off) : xmmword_ptr(rdx, off);
    a.vpunpcklbw(s.half(regs[0]), s.half(p.zero), m);
    a.vpunpckhbw(s.half(regs[1]), s.half(p.zero), m);
  } else {
    const int off = base + j * s.lanes32;
    Mem m = s.zmm ? xmmword_ptr(rdx, off) : qword_ptr(rdx, off);
    a.vpmovzxbw(s.half(regs[0]), m);
    a.vpsllw(s.half(regs[0]), s.half(regs[0]), 8);
  }
  for (int r = 0; r < n; ++r) {
    const Vec h = s.half(regs[r]);
    if (p.e4m3) {
      a.vpsraw(h, h, 1);
      if (s.zmm)
        a.vpandd(h, h, s.half(p.emask));
      else
        a.vpand(h, h, s.half(p.emask));
    }
    a.vcvtph2ps(s.v(regs[r]), h);
    if (!p.blockacc) a.vmulps(s.v(regs[r]), s.v(regs[r]), s.v(p.sc + j + r));
  }
}

// Scale vector j of the current block (E8M0 bytes at rbx) into register dst; tmp is clobbered.
void emit_mx_scales(Assembler& a, const Plan& p, int dst, int tmp, int j) {
  const cg::Simd& s = p.s;
  const Vec sc = s.v(dst), t = s.v(tmp);
  if (s.zmm) {
    a.vpmovzxbd(sc, xmmword_ptr(rbx, j * s.lanes32));
    a.vpaddd(t, sc, dword_ptr(rsp, kC1Zmm)._1to16());
    a.vptestnmd(k1, t, dword_ptr(rsp, kCfeZmm)._1to16());  // (b + 1) & 0xfe == 0: b = 0 or 0xff
    a.vpslld(sc, sc, 23);
    a.k(k1).vpord(sc, sc, dword_ptr(rsp, kC4Zmm)._1to16());
    if (p.shift) a.vmulps(sc, sc, dword_ptr(rsp, kCshZmm)._1to16());
  } else {
    a.vpmovzxbd(sc, qword_ptr(rbx, j * s.lanes32));
    a.vpaddd(t, sc, ymmword_ptr(rsp, kC1Ymm));
    a.vpand(t, t, ymmword_ptr(rsp, kCfeYmm));
    a.vpsubd(t, t, ymmword_ptr(rsp, kC1Ymm));  // -1 exactly for the special bytes, else 1..253
    a.vpsrad(t, t, 31);
    a.vpand(t, t, ymmword_ptr(rsp, kC4Ymm));
    a.vpslld(sc, sc, 23);
    a.vpor(sc, sc, t);
    if (p.shift) a.vmulps(sc, sc, ymmword_ptr(rsp, kCshYmm));
  }
}

// One K unit (f16: one k; bf16: one pair; MX: one k) into accumulator set `set`; A and B at
// offsets of unit u.
void emit_unit(Assembler& a, const Plan& p, int set, int u) {
  const cg::Simd& s = p.s;
  const int acc = p.acc + set * p.mr * p.nrv;
  if (p.mx) {
    for (int j = 0; j < p.nrv; j += p.pair ? 2 : 1) emit_mx_decode(a, p, u, j);
    for (int i = 0; i < p.mr; ++i) {
      if (p.abc >= 0) a.vbroadcastss(s.v(p.abc), a_mem(p, i, u, 0));
      for (int j = 0; j < p.nrv; ++j) fma_bcast(a, p, acc + i * p.nrv + j, p.bvec + j, a_mem(p, i, u, 0));
    }
    return;
  }
  if (!p.bf16) {
    for (int j = 0; j < p.nrv; ++j)
      a.vcvtph2ps(s.v(p.bvec + j), ptr(rdx, u * p.nr * 2 + j * s.lanes32 * 2));
    for (int i = 0; i < p.mr; ++i) {
      if (p.abc >= 0) a.vbroadcastss(s.v(p.abc), a_mem(p, i, u, 0));
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
      if (p.abc >= 0) a.vbroadcastss(s.v(p.abc), a_mem(p, i, u, half));
      for (int j = 0; j < p.nrv; ++j)
        fma_bcast(a, p, acc + i * p.nrv + j, p.bvec + half * p.nrv + j, a_mem(p, i, u, half));
    }
}

// Sum the accumulator sets into set 0 (pairwise: (0 + 1) + (2 + 3)).
void sum_sets(Assembler& a, const Plan& p) {
  const cg::Simd& s = p.s;
  const int n_acc = p.mr * p.nrv;
  if (p.sets == 4)
    for (int r = 0; r < n_acc; ++r) {
      a.vaddps(s.v(p.acc + r), s.v(p.acc + r), s.v(p.acc + n_acc + r));
      a.vaddps(s.v(p.acc + 2 * n_acc + r), s.v(p.acc + 2 * n_acc + r), s.v(p.acc + 3 * n_acc + r));
      a.vaddps(s.v(p.acc + r), s.v(p.acc + r), s.v(p.acc + 2 * n_acc + r));
    }
  else if (p.sets == 2)
    for (int r = 0; r < n_acc; ++r) a.vaddps(s.v(p.acc + r), s.v(p.acc + r), s.v(p.acc + n_acc + r));
}

// The K loop of one MX panel: k_main blocks of p.block k, each p.block / upi iterations of `upi`
// units; leaves the result in set 0 (scaled weights) or in the totals (block accumulators) and rdx
// at the next panel (this panel's 64-byte aligned end).
template <class Advance>
void emit_mx_main(Assembler& a, const Plan& p, const Advance& advance_a, int unit_a) {
  const cg::Simd& s = p.s;
  const int n_acc = p.mr * p.nrv;
  // rbx: the current block's E8M0 bytes in the panel's scale lines (int_weights.h); aligned at
  // first, so the first block takes the panel's first line.
  a.mov(rbx, rdx);
  zero_regs(a, s, p.blockacc ? p.tot : p.acc, p.blockacc ? n_acc : p.sets * n_acc);
  Label l_block = a.newLabel(), l_inner = a.newLabel(), l_end = a.newLabel();
  a.mov(r8, ARG(k_main));
  a.test(r8, r8);
  a.jz(l_end);
  a.bind(l_block);
  Label l_line = a.newLabel();
  a.test(ebx, 63);  // at a line boundary: the scale line is used up, the next one comes
  a.jnz(l_line);
  a.mov(rbx, rdx);
  a.add(rdx, 64);
  a.bind(l_line);
  if (p.blockacc)
    zero_regs(a, s, p.acc, p.sets * n_acc);
  else
    for (int j = 0; j < p.nrv; ++j) emit_mx_scales(a, p, p.sc + j, p.bvec, j);
  a.mov(r10d, p.block / p.upi);
  if (p.src == MxSrc::kBdrPair && p.bdr == QJ_BDR_MX9 && s.zmm)  // pair row 0's masks
    for (int j = 0; j < p.nrv; ++j) a.kmovd(mx9_mask(0, j), dword_ptr(rdx, j * 9 * s.lanes32 + 8 * s.lanes32));
  a.bind(l_inner);
  for (int u = 0; u < p.upi; ++u) emit_unit(a, p, u % p.sets, u);
  advance_a(p.upi * unit_a);
  a.add(rdx, p.step_bytes * p.upi / 8);
  a.dec(r10d);
  a.jnz(l_inner);
  if (p.blockacc) {
    sum_sets(a, p);
    for (int j = 0; j < p.nrv; ++j) emit_mx_scales(a, p, p.bvec + j, p.bvec + p.nrv, j);
    for (int r = 0; r < n_acc; ++r)
      a.vfmadd231ps(s.v(p.tot + r), s.v(p.acc + r), s.v(p.bvec + r % p.nrv));
  }
  a.add(rbx, p.nr);
  a.dec(r8);
  a.jnz(l_block);
  a.bind(l_end);
  if (!p.blockacc) sum_sets(a, p);
  a.add(rdx, 63);
  a.and_(rdx, -64);
}

bool emit(const KernelKey& key, Assembler& a, std::string* why) {
  Plan p;
  if (!make_plan(key, &p, why)) return false;
  const cg::Simd& s = p.s;
  const int n_acc = p.mr * p.nrv;
  const int unit_b = gemm_float_unit_bytes(key.b_type, p.nr);  // B bytes per K unit (f16 / bf16)
  // A bytes per K unit: a packed tile holds mr floats per k; direct A moves each row pointer by k.
  const int unit_a = (p.bf16 ? 2 : 1) * (p.direct ? 1 : p.mr) * 4;

  cg::emit_save_callee_regs(a);
  const int n_bases = p.direct ? (p.mr + 2) / 3 : 1;
  auto advance_a = [&](int bytes) {
    for (int b = 0; b < n_bases; ++b) a.add(kBases[b], bytes);
  };
  Label l_fp4 = a.newLabel();  // the FP4 value table, or E2M3's tables (after the code)
  p.data = l_fp4;
  if (p.mx) {
    const uint32_t vals[4] = {1u, 0xfeu, 0x400000u, static_cast<uint32_t>(127 - p.shift) << 23};  // 2^-shift
    const int offs[4] = {s.zmm ? kC1Zmm : kC1Ymm, s.zmm ? kCfeZmm : kCfeYmm, s.zmm ? kC4Zmm : kC4Ymm,
                         s.zmm ? kCshZmm : kCshYmm};
    for (int c = 0; c < (p.shift ? 4 : 3); ++c)
      for (int l = 0; l < (s.zmm ? 1 : 8); ++l) a.mov(dword_ptr(rsp, offs[c] + 4 * l), vals[c]);
    if (p.pair) zero_regs(a, s, p.zero, 1);
    if (p.src == MxSrc::kE2m3Quad) {
      if (p.fp6_dense) {
        const bool ms = fp6_multishift(p);
        cg::emit_fp6_unpack_setup(a, ms, s.v(p.fp6), ms ? Operand(s.v(p.fp6 + 1)) : Operand(), rax);
      }
      if (p.vbmi) {
        a.vmovdqu32(s.v(p.tbl), ptr(l_fp4));
      } else if (s.zmm) {
        a.vbroadcasti32x4(s.v(p.tbl), ptr(l_fp4, 64));
        a.vbroadcasti32x4(s.v(p.tbl + 1), ptr(l_fp4, 80));
        const uint32_t bytes[3] = {0x10101010u, 0x20202020u, 0x3f3f3f3fu};  // (0x3f: dense codes)
        for (int c = 0; c < (p.fp6_dense ? 3 : 2); ++c) {
          a.mov(eax, bytes[c]);
          a.vpbroadcastd(s.v(p.cst + (c == 2 ? 3 : c)), eax);
        }
        zero_regs(a, s, p.cst + 2, 1);
      } else {
        a.vbroadcasti128(s.v(p.tbl), ptr(l_fp4, 64));
        a.vbroadcasti128(s.v(p.tbl + 1), ptr(l_fp4, 80));
      }
    }
    if (p.fp6_dense && p.src != MxSrc::kE2m3Quad)
      cg::emit_fp6_words_setup(a, p.vbmi, p.src == MxSrc::kBdrPair ? cg::Fp6Words::kTop : cg::Fp6Words::kCode,
                               s.v(p.fp6), s.v(p.fp6 + 2), s.v(p.fp6 + 1), rax);
    if (p.src == MxSrc::kE3m2Pair && p.fp6_dense) {
      const int16_t* q = qj::cg::kE3m2Ints.data();  // q = 16 v; vpermi2w: index bit 5 picks tbl + 1
      for (int h = 0; h < 2; ++h) {
        uint8_t t[64];
        std::memcpy(t, q + 32 * h, 64);
        cg::store_red_zone_table(a, t, 64, rax);
        a.vmovdqu32(s.v(p.tbl + h), zmmword_ptr(rsp, cg::kRedZoneTable));
      }
    } else if (p.src == MxSrc::kE3m2Pair) {
      a.mov(eax, 0x9fff9fffu);  // the word mask
      if (s.zmm) {
        a.vpbroadcastd(s.v(p.tbl), eax);
      } else {
        a.vmovd(xmm(p.tbl), eax);
        a.vpbroadcastd(s.v(p.tbl), xmm(p.tbl));
      }
    }
    if (p.src == MxSrc::kBdrPair && p.bdr == QJ_BDR_MX4) {
      if (s.zmm) {
        a.vmovups(s.v(p.tbl), ptr(l_fp4));  // u - 8 for the 16 nibbles
      } else {
        a.vpcmpeqd(s.v(p.smask), s.v(p.smask), s.v(p.smask));
        a.vpslld(s.v(p.smask), s.v(p.smask), 31);
      }
    }
    if (p.src == MxSrc::kBdrPair && p.bdr == QJ_BDR_MX9 && !s.zmm) a.vmovdqu(s.v(p.tbl), ptr(l_fp4));
    if (p.src == MxSrc::kFp4Nibble) {
      a.vmovups(s.v(p.tbl), ptr(l_fp4));  // ymm: the first 8 values, the magnitudes
      if (!s.zmm) {
        a.vpcmpeqd(s.v(p.smask), s.v(p.smask), s.v(p.smask));
        a.vpslld(s.v(p.smask), s.v(p.smask), 31);
      }
    }
    if (p.e4m3) {
      a.mov(eax, 0xbfffbfffu);
      if (s.zmm) {
        a.vpbroadcastd(s.v(p.emask), eax);
      } else {
        a.vmovd(xmm(p.emask), eax);
        a.vpbroadcastd(s.v(p.emask), xmm(p.emask));
      }
    }
  }
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
  if (p.mx) {
    emit_mx_main(a, p, advance_a, unit_a);
  } else {
    zero_regs(a, s, p.acc, p.sets * n_acc);
    Label l_main = a.newLabel(), l_rem = a.newLabel(), l_rem_loop = a.newLabel(), l_done = a.newLabel();
    a.mov(r8, ARG(k_main));
    a.test(r8, r8);
    a.jz(l_rem);
    a.bind(l_main);
    // Weight prefetch (simd.h), key.param[1] bytes ahead (src/ops/gemm.cpp chooses it).
    if (key.param[1] != 0) cg::emit_weight_prefetch(a, rdx, 0, p.sets * unit_b, static_cast<int>(key.param[1]));
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
    sum_sets(a, p);
  }

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
  pe.acc = p.blockacc ? p.tot : p.acc;
  pe.acc_is_float = true;
  pe.ldc_off = static_cast<int32_t>(offsetof(GemmFloatArgs, ldc));
  pe.last_is_tail_off = static_cast<int32_t>(offsetof(GemmFloatArgs, last_is_tail));
  pe.l_panel = l_panel;
  cg::emit_panel_end(a, s, key, er, pe);
  cg::emit_restore_and_return(a);
  if (p.src == MxSrc::kFp4Nibble) {
    a.align(AlignMode::kData, 64);
    a.bind(l_fp4);
    a.embed(kFp4Values, sizeof kFp4Values);
  }
  if (p.src == MxSrc::kBdrPair && (p.bdr == QJ_BDR_MX4 || (p.bdr == QJ_BDR_MX9 && !s.zmm))) {
    // MX4: the values u - 8 of the 16 nibbles; MX9 (ymm): words 1 << w, the bit of word w of a
    // 16-bit mask
    a.align(AlignMode::kData, 64);
    a.bind(l_fp4);
    if (p.bdr == QJ_BDR_MX4) {
      float t[16];
      for (int u = 0; u < 16; ++u) t[u] = static_cast<float>(u - 8);
      a.embed(t, sizeof t);
    } else {
      uint16_t t[16];
      for (int w = 0; w < 16; ++w) t[w] = static_cast<uint16_t>(1u << w);
      a.embed(t, sizeof t);
    }
  }
  if (p.src == MxSrc::kE2m3Quad) {
    // q of the 64 codes, then |q| of the magnitudes 0..31, then (32 bytes on) the dense unpack's
    // shuffle-form ctl
    uint8_t t[192] = {};
    const int8_t* q = qj::cg::kE2m3Ints.data();
    for (int c = 0; c < 64; ++c) t[c] = static_cast<uint8_t>(q[c]);
    for (int c = 0; c < 32; ++c) t[64 + c] = static_cast<uint8_t>(q[c]);  // codes 0..31: q >= 0
    uint8_t idx[64];
    cg::fp6_unpack_tables(false, idx, t + 128);
    a.align(AlignMode::kData, 64);
    a.bind(l_fp4);
    a.embed(t, sizeof t);
  }
  return true;
}

std::string name(const KernelKey& key) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "gemm_f32%s_accf32_%s%s%s%s%s%s%s%s__%s_%dx%d%s%s%s",
                qj_dtype_name(static_cast<qj_dtype>(key.b_type)),
                qj_dtype_name(static_cast<qj_dtype>(key.c_type)), key.has_bias ? "_bias" : "",
                key.activation == QJ_ACT_RELU ? "_relu" : "", key.has_beta ? "_beta" : "",
                (key.flags & 1) ? "_da" : "", (key.flags & 2) ? "_ba" : "", (key.flags & 4) ? "_vbmi" : "",
                (key.flags & 8) ? "_rb" : "", isa_suffix(key.isa), key.mr, key.nr,
                key.n_tail ? ("_t" + std::to_string(key.n_tail)).c_str() : "",
                key.param[0] > 1 ? ("_k" + std::to_string(key.param[0])).c_str() : "",
                key.param[1] ? ("_pf" + std::to_string(key.param[1])).c_str() : "");
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
  static const KernelFamily f{emit, name, [](const KernelKey& key) -> uint32_t {
                                return (key.flags & 4) ? uint32_t{kJitExtraVbmi} : 0u;  // flags bit 2
                              }};
  return f;
}

}  // namespace qj
