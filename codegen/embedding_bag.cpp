// Emitter of the embedding-bag kernels declared in embedding_bag.h (key fields documented there).
//
// Exact arithmetic: the kernels perform, lane by lane, the fp32 operations of src/ref/
// embedding_bag_ref.h in the same order, so every tier matches the reference bit for bit:
//   float rows:  acc = fma(w, x, acc)  (vfmadd231ps; unweighted vaddps, the same value)
//   fused rows:  acc = fma(q, w*s, acc) (vfmadd231ps), bsum = bsum + w*b once per row, acc +
//                bsum once per bag; gather: fma(q, w*s, w*b). Pooled rows compute w*s, w*b and
//                bsum with scalar instructions in lane 0 (vmulss / vaddss: the same fp32
//                operations as a lane of vmulps / vaddps) and broadcast w*s once per row.
//   MX rows:     x = value(code) * X, then the float-row step
//   mean: acc * (1.0f / len); bf16 out by integer round-to-nearest-even (as half.h), fp16 out by
//   vcvtps2ph imm 0 (round to nearest even, independent of MXCSR).
//
// Loop structure (one call = `count` bags): for each bag, for each column block (a block holds up
// to param[3] accumulator vectors), for each index of the bag: load the index, compute the row
// address, broadcast the weight and the row's scale/bias, decode and accumulate. The first block
// of a bag also prefetches the whole row `distance` indices ahead (bounded by prefetch_limit, so
// the index read stays inside the array); later blocks find the bag's rows in L2. Blocks after
// the first that are identical run as a run-time loop (r15 = byte offset of the block in the row;
// MX rows unroll them instead, r15 being their scale temporary); the last, partial block is
// emitted with constant offsets.
//
// Tails: dims that are not a multiple of the vector width load exactly the bytes of the row
// (AVX-512: k-masked loads; AVX2: vmaskmovps or a vmovd/vpinsr* sequence of the exact byte count)
// and store exactly the output elements (k-masked stores; AVX2: vmaskmovps or vmovq/vmovd/vpextr*):
// nothing outside a row or an output row is read or written (tests run against guard pages).
//
// 4-bit and 2-bit rows (and MXFP4) decode whole bytes: byte k of a 16-byte (zmm) / 8-byte (ymm)
// group is zero-extended into dword lane k, and the 2 (4) codes it holds are split by shifts into
// 2 (4) accumulator vectors, so accumulator m holds elements m, m + G, m + 2G, ... of the group.
// At AVX-512 a vpermps of a 16-entry float table turns the low 4 bits of each lane into the code's
// value (mask and conversion in one instruction). The accumulators are interleaved back into
// element order once per bag, before the store.
//
// Registers (System V; rdi = EmbArgs* throughout):
//   rsi table, rdx indices, rcx i (current index), rax bag start, r8 bag end, r9 row address,
//   r10 prefetch row (SPLIT MX: then the row's scale bytes), r11 row stride, r12 prefetch limit,
//   r13 weights (positional: minus start), r14 remap, r15 block byte offset (block loop) or the
//   E8M0 temporary (MX), rbx output row, rbp bags left.
//   Stack: [rsp] offsets cursor, [rsp+8] block output byte offset, [rsp+16] blocks left; with
//   next-bag prefetch [rsp+24] row steps to its next prefetch, [rsp+32] its next index position;
//   MX rows then (at [rsp+40], else [rsp+24]) an unfolded block's scale bits and, 16 bytes on,
//   MXFP4 / MXFP8 rows the table of folded scales X' per E8M0 byte (emit_mx_group).
//   Vectors: accumulators from 0; temps at the top (S, B, W, T, T2, M, Bsum); pooled 8-bit, 4-bit
//   and float rows at the ymm tier keep fewer temps there (lean_fixed_registers, make_cfg).
#include "codegen/embedding_bag.h"

#include <asmjit/x86.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace qj {
namespace {

using namespace asmjit;
using namespace asmjit::x86;

#define ARG(field) qword_ptr(rdi, static_cast<int32_t>(offsetof(EmbArgs, field)))

struct Cfg {
  bool z = false;  // zmm (AVX-512) or ymm (AVX2)
  int V = 8;       // fp32 lanes per vector
  int regs = 16;
  qj_dtype rt = QJ_F32, out = QJ_F32;
  int bits = 0;    // fused bits, 0 for float rows
  int eb = 4;      // float rows: bytes per element
  int isz = 4, osz = 4;
  bool lengths = false, weighted = false, positional = false, remap = false, sbf = false;
  int pooling = QJ_POOL_SUM;
  int64_t dim = 0;
  int pf = 0;
  int BV = 0;      // accumulator vectors per block
  int G = 1;       // vectors per decode group
  int E = 8;       // elements per group
  int Bg = 32;     // input bytes per full group
  int64_t data_off = 0, sb_off = 0;
  int sb_bytes = 0;
  int out_bytes = 4;
  bool fp32_sb = false;
  // vector register numbers
  int rS, rB, rW, rT, rT2, rM, rBs;
  int rM1 = -1;  // 2-bit rows at AVX-512: the table of the second code, (i >> 2) & 3
  int hint = 0;    // prefetch: 0 t0, 1 t1, 2 t2, 3 nta
  // MX rows: QJ_MXFP4_E2M1 (FBGEMM MX4 rows: per 32 elements 16 data bytes + the E8M0 byte) or
  // QJ_MXINT8 / QJ_MXFP8_E4M3 / QJ_MXFP8_E5M2 (SPLIT: 32 code bytes per block in the row, the
  // E8M0 bytes in a separate [rows][blocks] array). 0 for other rows.
  int mx = 0;
  int64_t mx_blocks = 0;
  bool deint = false;  // accumulators hold de-interleaved elements (4/2-bit, MXFP4)
  bool next_bag = false;  // key.param[5] bit 0: every column block also prefetches next-bag rows
  bool block_pf = false;  // key.param[5] bit 1: later column blocks prefetch their own bytes
};

int64_t div_up(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Pooled 8-bit / 4-bit fused and float rows at the ymm tier take a lean register map (make_cfg):
// the number of fixed registers it keeps, 0 for the full map of seven.
int lean_fixed_registers(const KernelKey& k) {
  if (k.isa >= QJ_ISA_AVX512 || k.param[1] == QJ_POOL_NONE) return 0;
  switch (k.a_type) {
    case QJ_FUSED_8BIT: return 4;
    case QJ_FUSED_4BIT: return 5;
    case QJ_F32:
    case QJ_F16:
    case QJ_BF16: return 3;
    default: return 0;
  }
}

// The vector registers below the kernel's fixed ones: the most accumulators a column block has.
int accumulator_registers(const KernelKey& k) {
  const int lean = lean_fixed_registers(k);
  return (k.isa >= QJ_ISA_AVX512 ? 32 : 16) - (lean ? lean : 7);
}

// MX rows' folded blocks (see emit_mx_group): the E8M0 bytes 0..hi take X' = 2^(e - 127 + f)
// (subnormal below e = 1 - f), read from a table; hi keeps the largest element times X' finite
// wherever the reference's element (value times X) is.
struct MxFold {
  int hi, f;
};
MxFold mx_fold(int mx) {
  return mx == QJ_MXINT8       ? MxFold{253, -6}
         : mx == QJ_MXFP8_E4M3 ? MxFold{134, 120}
         : mx == QJ_MXFP8_E5M2 ? MxFold{239, 0}
                               : MxFold{252, 0};  // MXFP4
}

bool make_cfg(const KernelKey& k, Cfg* c, std::string* why) {
  if (k.isa < QJ_ISA_AVX2) {
    *why = "no embedding JIT below avx2";
    return false;
  }
  c->z = k.isa >= QJ_ISA_AVX512;
  c->V = c->z ? 16 : 8;
  c->regs = c->z ? 32 : 16;
  c->rt = static_cast<qj_dtype>(k.a_type);
  c->out = static_cast<qj_dtype>(k.c_type);
  switch (c->rt) {
    case QJ_F32: c->eb = 4; break;
    case QJ_F16:
    case QJ_BF16: c->eb = 2; break;
    case QJ_FUSED_8BIT: c->bits = 8; break;
    case QJ_FUSED_4BIT: c->bits = 4; break;
    case QJ_FUSED_2BIT: c->bits = 2; break;
    case QJ_MXFP4_E2M1:
    case QJ_MXINT8:
    case QJ_MXFP8_E4M3:
    case QJ_MXFP8_E5M2: c->mx = c->rt; break;
    default: *why = "row type not supported by the embedding JIT"; return false;
  }
  if (c->out != QJ_F32 && c->out != QJ_F16 && c->out != QJ_BF16) {
    *why = "output type must be f32, f16 or bf16";
    return false;
  }
  c->out_bytes = c->out == QJ_F32 ? 4 : 2;
  if (k.b_type != 32 && k.b_type != 64) {
    *why = "index width must be 32 or 64";
    return false;
  }
  c->isz = k.b_type / 8;
  c->osz = (k.flags & kEmbOffsets64) ? 8 : 4;
  c->lengths = k.flags & kEmbLengths;
  c->weighted = k.flags & kEmbWeighted;
  c->positional = k.flags & kEmbPositional;
  c->remap = k.flags & kEmbRemap;
  c->sbf = k.flags & kEmbSbFirst;
  c->dim = k.param[0];
  c->pooling = static_cast<int>(k.param[1]);
  c->pf = static_cast<int>(k.param[2]);
  c->BV = static_cast<int>(k.param[3]);
  c->next_bag = k.param[5] & 1;
  c->block_pf = k.param[5] & 2;
  if (k.param[5] > 3 || (k.param[5] && (c->pf == 0 || c->pooling == QJ_POOL_NONE))) {
    *why = "next-bag and block prefetch (param[5] bits 0, 1) need a prefetch distance and pooled bags";
    return false;
  }
  if (c->dim < 1) {
    *why = "dim must be >= 1";
    return false;
  }
  if (c->pooling != QJ_POOL_SUM && c->pooling != QJ_POOL_MEAN && c->pooling != QJ_POOL_NONE) {
    *why = "unknown pooling";
    return false;
  }
  if (c->pf < 0 || c->pf > 4096) {
    *why = "prefetch distance out of [0, 4096]";
    return false;
  }
  c->G = c->bits == 4 ? 2 : c->bits == 2 ? 4 : 1;
  c->E = c->G * c->V;
  c->Bg = c->bits ? c->V : c->V * c->eb;
  c->deint = c->bits == 4 || c->bits == 2;
  if (c->mx) {
    // one group = one 32-element MX block: 2 zmm or 4 ymm vectors
    c->G = c->z ? 2 : 4;
    c->E = 32;
    c->Bg = c->mx == QJ_MXFP4_E2M1 ? 17 : 32;
    c->mx_blocks = div_up(c->dim, 32);
    c->deint = c->mx == QJ_MXFP4_E2M1;
    if (c->sbf) {
      *why = "scale/bias-first applies to fused rows only";
      return false;
    }
  }
  if (c->bits) {
    c->fp32_sb = c->bits == 8 && !c->sbf;
    c->sb_bytes = c->fp32_sb ? 8 : 4;
    const int64_t data = div_up(c->dim * c->bits, 8);
    c->data_off = c->sbf ? c->sb_bytes : 0;
    c->sb_off = c->sbf ? 0 : data;
  } else if (c->sbf) {
    *why = "scale/bias-first applies to fused rows only";
    return false;
  }
  const int lean = lean_fixed_registers(k);
  if (lean == 4 || lean == 5) {
    // Pooled 8-bit rows at the ymm tier: no table, and the per-row scalars (the weight, w * b)
    // need only lane 0 of the two temporaries before the row's decode, so four registers serve
    // and twelve hold accumulators instead of nine: fewer column blocks, each of which walks the
    // bag's indices, scales and rows again. Zen 3 (AVX2 only), 4M-row tables, i32, both plans in
    // one process, calls alternating, paired time ratio 12 / 9 (2026-12-07 ~16:45 UTC): warm
    // dims 256 / 512 / 1024 0.90 / 0.99 / 0.95 (weighted 0.91 / 0.98 / 0.96), rows flushed 0.98
    // / 0.90 / 0.87.
    // Pooled 4-bit rows (lean == 5): the same map plus the nibble mask, eleven accumulators (ten:
    // groups of two vectors) instead of nine (eight). Dims 512 / 1024 take 7 / 13 column blocks
    // instead of 8 / 16 (dims up to 256, none fewer). Zen 3, 4M-row tables, i32, paired time
    // ratio 10 / 8 in one process (2026-12-07 ~17:10 UTC): warm 0.97 / 0.96 (weighted 0.95 /
    // 0.95), rows flushed 0.94 / 0.93.
    c->rS = 15;
    c->rT = 14;
    c->rT2 = 13;
    c->rM = lean == 5 ? 12 : -1;
    c->rBs = lean == 5 ? 11 : 12;
    c->rW = c->rT;
    c->rB = c->rT2;
  } else if (lean == 3) {
    // Pooled float rows at the ymm tier: the weight's broadcast and the two temporaries (a
    // converted vector, the AVX2 tail mask); the mean's reciprocal and its temporary (rS, rB)
    // live only in the store, after the last row. Thirteen accumulators instead of nine. Zen 3,
    // 4M-row tables, i32, paired time ratio 13 / 9 in one process (2026-12-07 ~17:05 UTC): f16
    // dims 96 / 256 / 512 / 1024 warm 0.90 / 1.01 / 0.96 / 0.96 (weighted, 96 / 256 / 1024: 0.82
    // / 0.98 / 0.95), rows flushed 0.76 / 0.78 / - / 0.89; bf16 weighted warm 0.93 / 0.95 / 0.93,
    // flushed 0.73 / 0.75 / - / 0.80; f32 (bound by the bytes) dim 96 warm 0.79, dims 256-1024
    // warm and dim 256 flushed 0.99-1.00.
    c->rW = 15;
    c->rT = 14;
    c->rT2 = 13;
    c->rS = c->rW;
    c->rB = c->rT;
    c->rBs = -1;
    c->rM = -1;
  } else {
    c->rS = c->regs - 1;
    c->rB = c->regs - 2;
    c->rW = c->regs - 3;
    c->rT = c->regs - 4;
    c->rT2 = c->regs - 5;
    c->rM = c->regs - 6;
    c->rBs = c->regs - 7;
  }
  if (c->bits == 2 && c->z) c->rM1 = c->regs - 8;  // BV is a multiple of 4: at most regs - 8
  c->hint = static_cast<int>(k.param[4]);
  if (c->hint < 0 || c->hint > 3) {
    *why = "unknown prefetch hint";
    return false;
  }
  if (c->BV < c->G || c->BV % c->G != 0 || c->BV > accumulator_registers(k) ||
      (c->rM1 >= 0 && c->BV > c->rM1)) {
    *why = "block of accumulator vectors does not fit the registers";
    return false;
  }
  return true;
}

int64_t row_bytes(const Cfg& c) {
  if (c.mx) return c.mx_blocks * c.Bg;
  return c.bits ? div_up(c.dim * c.bits, 8) + c.sb_bytes : c.dim * c.eb;
}

// ---- constants --------------------------------------------------------------------------------

struct Consts {
  Label pool;
  std::vector<uint8_t> bytes;
  // Adds `n` bytes (a multiple of 4) aligned to `align`, returns their offset in the pool.
  int add(const void* p, int n, int align) {
    while (bytes.size() % align) bytes.push_back(0);
    int off = static_cast<int>(bytes.size());
    bytes.insert(bytes.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
    return off;
  }
  int add_dwords(std::vector<uint32_t> v, int align = 64) {
    return add(v.data(), static_cast<int>(v.size() * 4), align);
  }
  Mem at(int off) const { return ptr(pool, off); }
};

// ---- the emitter ------------------------------------------------------------------------------

class Emitter {
 public:
  Emitter(Assembler& a, const Cfg& c) : a_(a), c_(c) {}

  bool emit_bag_kernel();
  bool emit_check_kernel(int isz);

 private:
  Assembler& a_;
  const Cfg& c_;
  Consts k_;
  int c_one_i = -1, c_7fff = -1, c_40 = -1, c_one_f = -1, c_mask = -1, c_mask1 = -1, c_il = -1, c_ftail = -1,
      c_otail = -1;
  // MX constants (full-width vectors) and the out-of-line E8M0 special cases
  int c_sign = -1, c_p2m6 = -1, c_p2p120 = -1, c_qnan = -1, c_xtab = -1;
  int c_e4m3 = -1, c_b7f = -1, c_d7f = -1, c_dff = -1;
  struct E8m0Stub {
    Label nan, zero, back;
  };
  std::vector<E8m0Stub> stubs_;
  // E4M3: a row with NaN codes, out of line; per block of the row (in this column block) its
  // byte offset and first accumulator.
  struct NanCodeStub {
    Label go, back;
    std::vector<std::pair<int64_t, int>> blocks;
  };
  std::vector<NanCodeStub> nan_stubs_;
  std::vector<std::pair<int64_t, int>> row_e4m3_blocks_;  // the current row's, for its stub
  // MX rows: a block whose scale is outside the folded range, out of line (see emit_mx_group).
  struct UnfoldedStub {
    Label go, back;
    int64_t g;
    int acc0;
    bool set;
  };
  std::vector<UnfoldedStub> unfolded_stubs_;
  int full(uint32_t val) { return k_.add_dwords(std::vector<uint32_t>(16, val)); }
  // all ones: zmm(r) in AVX-512 kernels (EVEX for registers 16-31), else ymm(r)
  void all_ones(int r) {
    if (c_.z)
      a_.vpternlogd(zmm(r), zmm(r), zmm(r), 0xff);
    else
      a_.vpcmpeqd(ymm(r), ymm(r), ymm(r));
  }
  void emit_mx_group(int64_t g_abs, int acc0, bool set);
  void emit_mx_block(int64_t g, int acc0, bool set, bool folded);
  void mx_acc(int q, int acc, bool set, bool folded);

  Vec v(int i) const { return c_.z ? Vec(zmm(i)) : Vec(ymm(i)); }
  Vec hv(int i) const { return c_.z ? Vec(ymm(i)) : Vec(xmm(i)); }  // half width
  Xmm x(int i) const { return xmm(i); }
  // A dword constant as a full-width memory operand (zmm: embedded broadcast of one dword).
  Mem cvec(int off) const { return c_.z ? k_.at(off)._1to16() : k_.at(off); }
  int splat(uint32_t val) { return k_.add_dwords(std::vector<uint32_t>(c_.z ? 1 : 8, val), c_.z ? 4 : 32); }

  void zero(int r) {
    if (c_.z)
      a_.vpxord(v(r), v(r), v(r));
    else
      a_.vpxor(v(r), v(r), v(r));
  }
  void vand(int d, int s, int m) {
    if (c_.z)
      a_.vpandd(v(d), v(s), v(m));
    else
      a_.vpand(v(d), v(s), v(m));
  }
  void prefetch(const Mem& m, int hint) {
    switch (hint) {
      case 0: a_.prefetcht0(m); break;
      case 1: a_.prefetcht1(m); break;
      case 2: a_.prefetcht2(m); break;
      default: a_.prefetchnta(m); break;
    }
  }
  // Loads exactly n bytes (1 <= n < 16) at m into xmm(r), zeroing the rest (AVX2 tails).
  void load_bytes_exact(int r, Mem m, int n) {
    int p = 0;
    if (n >= 8) {
      a_.vmovq(x(r), m);
      p = 8;
    } else if (n >= 4) {
      a_.vmovd(x(r), m);
      p = 4;
    } else {
      a_.vpxor(x(r), x(r), x(r));
    }
    if (n - p >= 4) {
      Mem q = m;
      q.addOffset(p);
      a_.vpinsrd(x(r), x(r), q, p / 4);
      p += 4;
    }
    if (n - p >= 2) {
      Mem q = m;
      q.addOffset(p);
      a_.vpinsrw(x(r), x(r), q, p / 2);
      p += 2;
    }
    if (n - p >= 1) {
      Mem q = m;
      q.addOffset(p);
      a_.vpinsrb(x(r), x(r), q, p);
    }
  }
  // Stores the low n bytes (1 <= n < 16) of xmm(r) at m (xmm(r) is clobbered).
  void store_bytes_exact(int r, Mem m, int n) {
    int p = 0;
    if (n >= 8) {
      a_.vmovq(m, x(r));
      a_.vpsrldq(x(r), x(r), 8);
      p = 8;
    }
    if (n - p >= 4) {
      Mem q = m;
      q.addOffset(p);
      a_.vmovd(q, x(r));
      a_.vpsrldq(x(r), x(r), 4);
      p += 4;
    }
    if (n - p >= 2) {
      Mem q = m;
      q.addOffset(p);
      a_.vpextrw(q, x(r), 0);
      a_.vpsrldq(x(r), x(r), 2);
      p += 2;
    }
    if (n - p >= 1) {
      Mem q = m;
      q.addOffset(p);
      a_.vpextrb(q, x(r), 0);
    }
  }

  Mem data_mem(bool loop, int64_t off) const {
    return loop ? ptr(r9, r15, 0, static_cast<int32_t>(off)) : ptr(r9, static_cast<int32_t>(off));
  }
  void emit_block(bool loop, int64_t base_group, int ngroups, int64_t block_elems, bool pf);
  void emit_prefetch(int hint);
  void emit_row(bool loop, int64_t base_group, int ngroups, int64_t block_elems, bool pf);
  void emit_next_bag_prefetch();
  void emit_block_prefetch(bool loop, int64_t base_group, int64_t block_elems);
  void emit_prefetch_row_at(const Gp& pos, int32_t disp);
  int64_t nan_pending_ = -1;  // E4M3, zmm: a block whose NaN-code test waits for its neighbour
  int passes_ = 0;  // column blocks per bag when they prefetch the next bag's rows (else 0)
  int scale_slot_ = 24;  // [rsp + scale_slot_]: MX rows' unfolded block scale bits
  int xtab_off_ = 40;    // [rsp + xtab_off_]: MX rows' table of folded scales, X' per E8M0 byte
  void emit_group(bool loop, int64_t g_abs, int acc0, int valid_elems, bool set);
  void emit_mx_scale_prefetch();
  void emit_store(bool loop, int64_t base_group, int ngroups, int64_t block_elems);
  void bf16_round(int r);
  void store_vec(int r, Mem m, int lanes);
};

// Decodes one group (valid_elems of c_.E elements; g_abs is its index in the row) and adds it to
// (or, set = gather mode, writes it into) accumulators acc0 .. acc0 + G - 1.
void Emitter::emit_group(bool loop, int64_t g_abs, int acc0, int valid, bool set) {
  const Cfg& c = c_;
  if (c.mx) {
    emit_mx_group(g_abs, acc0, set);
    return;
  }
  const int64_t base_elem = g_abs * c.E;  // element index of the group's first element
  if (c.bits == 0) {
    const int64_t off = base_elem * c.eb;
    Mem m = data_mem(loop, off);
    const int acc = acc0;
    const bool full = valid == c.V;
    int src = c.rT;
    bool src_mem = false;
    if (c.rt == QJ_F32) {
      if (full) {
        src_mem = true;
      } else if (c.z) {
        a_.k(k1).z().vmovups(v(c.rT), m);
      } else {
        a_.vmovups(v(c.rT2), k_.at(c_ftail));
        a_.vmaskmovps(v(c.rT), v(c.rT2), m);
      }
    } else {
      // f16 / bf16: a half-width register of 16-bit elements first
      if (full) {
        if (c.rt == QJ_F16)
          a_.vcvtph2ps(v(c.rT), m);
        else
          a_.vpmovzxwd(v(c.rT), m);
      } else {
        if (c.z)
          a_.k(k1).z().vmovdqu16(hv(c.rT), m);
        else
          load_bytes_exact(c.rT, m, valid * 2);
        if (c.rt == QJ_F16)
          a_.vcvtph2ps(v(c.rT), hv(c.rT));
        else
          a_.vpmovzxwd(v(c.rT), hv(c.rT));
      }
      if (c.rt == QJ_BF16) a_.vpslld(v(c.rT), v(c.rT), 16);
    }
    if (set) {
      if (c.weighted) {
        if (src_mem)
          a_.vmulps(v(acc), v(c.rW), m);
        else
          a_.vmulps(v(acc), v(c.rW), v(src));
      } else {
        if (src_mem)
          a_.vmovups(v(acc), m);
        else
          a_.vmovaps(v(acc), v(src));
      }
    } else if (c.weighted) {
      if (src_mem)
        a_.vfmadd231ps(v(acc), v(c.rW), m);
      else
        a_.vfmadd231ps(v(acc), v(c.rW), v(src));
    } else {
      if (src_mem)
        a_.vaddps(v(acc), v(acc), m);
      else
        a_.vaddps(v(acc), v(acc), v(src));
    }
    return;
  }
  // Fused rows: bytes of this group.
  const int64_t off = c.data_off + g_abs * c.Bg;
  Mem m = data_mem(loop, off);
  const int nbytes = static_cast<int>(div_up(static_cast<int64_t>(valid) * c.bits, 8));
  if (nbytes == c.Bg) {
    a_.vpmovzxbd(v(c.rT), m);
  } else {
    if (c.z)
      a_.k(k1).z().vmovdqu8(x(c.rT), m);
    else
      load_bytes_exact(c.rT, m, nbytes);
    a_.vpmovzxbd(v(c.rT), x(c.rT));
  }
  for (int s = 0; s < c.G; ++s) {
    // code vector s: (bytes >> (s * bits)) & mask, as fp32. AVX-512: vpermps reads only the low 4
    // bits of each index, so a 16-entry table of floats (i for 4-bit, i & 3 for 2-bit; for the
    // second 2-bit code i >> 2) does the mask and the int-to-float conversion in one instruction.
    // The top code of the byte needs no mask: a shift and vcvtdq2ps, which leave the shuffle
    // units to the tables and the byte widening (Zen 5 issues vpermps / vpmovzxbd on two pipes,
    // one of them an FMA pipe; shifts and conversions go to the other two). Synthetic loops of
    // 24 vectors from L1 (2026-12-01, Zen 5), cycles per vector: 4-bit 0.98-0.99 -> 0.87-0.89;
    // 2-bit 0.93-0.95 -> 0.81-0.82 (all four codes by vpermps from one table: the former form).
    // The kernels (bench embedding, i32 unweighted, ns per row, four alternating runs), rows in
    // L1 (48-row tables): 2-bit dims 256 / 512 / 1024 4.2-4.4 / 8.2-8.5 / 16.0-16.9 -> 3.8-3.9 /
    // 7.3-7.6 / 13.7-14.9, 4-bit 4.1-4.7 / 8.2-8.7 / 16.4-17.1 -> 3.9-4.1 / 7.8-8.1 / 15.4-15.6;
    // from DRAM (fresh, 1M rows, two runs) 2-bit dims 512 / 1024 13.5-13.6 / 23.7-24.2 -> 12.6-12.7
    // / 22.5-22.8, 4-bit and 2-bit dim 256 within the noise.
    const int acc = acc0 + s;
    const int q = set ? acc : c.rT2;
    if (c.G == 1) {
      a_.vcvtdq2ps(v(q), v(c.rT));
    } else if (c.z) {
      if (s == c.G - 1) {
        a_.vpsrld(v(c.rT2), v(c.rT), s * c.bits);
        a_.vcvtdq2ps(v(q), v(c.rT2));
      } else if (s == 0) {
        a_.vpermps(v(q), v(c.rT), v(c.rM));
      } else if (s == 1 && c.rM1 >= 0) {
        a_.vpermps(v(q), v(c.rT), v(c.rM1));  // 2-bit: index bits 2-3
      } else {
        a_.vpsrld(v(c.rT2), v(c.rT), s * c.bits);
        a_.vpermps(v(q), v(c.rT2), v(c.rM));
      }
    } else {
      if (s == c.G - 1) {
        a_.vpsrld(v(c.rT2), v(c.rT), s * c.bits);  // the top field needs no mask
      } else if (s == 0) {
        vand(c.rT2, c.rT, c.rM);
      } else {
        a_.vpsrld(v(c.rT2), v(c.rT), s * c.bits);
        vand(c.rT2, c.rT2, c.rM);
      }
      a_.vcvtdq2ps(v(q), v(c.rT2));
    }
    if (set)
      a_.vfmadd213ps(v(acc), v(c.rS), v(c.rB));  // fma(q, sw, bw)
    else
      a_.vfmadd231ps(v(acc), v(q), v(c.rS));     // fma(q, sw, acc); the bias goes to bsum
  }
}

// One MX block (32 elements) of the current row: the E8M0 scale X (r15 as a temporary; MX rows
// never use the block loop), then per vector v = value(code) * X and the float-row step
// acc = fma(w, v, acc) (set: acc = w * v). value(code) is exact: MXFP4 by a table (vpermps),
// MXINT8 by vpmovsxbd + vcvtdq2ps with X * 2^-6 (exact) as the factor, E5M2 through fp16 (it is
// the top byte of an fp16), E4M3 by its bits placed into an fp32's, which reads value * 2^-120.
//
// Folded blocks: for scale bytes e where every product value * X is exactly representable in
// fp32 (subnormals included: the values' lowest bits, at least 2^-16 for E5M2, are far enough
// above 2^-149 * 2^127; the largest products must stay finite) and X times the decode's constant
// factor (2^120 for E4M3, 2^-6 for MXINT8, 1 for E5M2 and MXFP4) is an fp32 power of two (normal
// or, MXFP4 / E5M2 at e = 0, subnormal: the products' lowest bits stay above 2^-149, and the FMA
// takes subnormal operands exactly, without DAZ), that factor is folded into the broadcast
// scale, X' = 2^(e - 127 + f) (MXFP4 / MXFP8: read from a table of X' per byte that the kernel
// keeps on its stack, one load per block instead of the bits' arithmetic), and an unweighted
// sum adds the product with one vfmadd231ps: fma(x, X', acc) rounds value * X + acc once, and
// value * X is exact, so it equals the reference's add of the rounded product (the reference's
// fma(1, v, acc), which also keeps v's NaN over the accumulator's, as the FMA does). Ranges (the
// top one: the largest value times 2^(e - 127) stays below FLT_MAX; beyond it the reference's
// product is inf, which the fused add would not produce): E4M3 [0, 134] (X' = 2^(e - 7) finite up
// to 134; the products would allow 246), E5M2 [0, 239] (57344), MXFP4 [0, 252] (6), MXINT8 [7,
// 253] (|-128|; its X' is computed per block and kept normal). The other scale bytes (the top
// ones, 0xFF; MXINT8's lowest) run the unfolded block, out of line.
void Emitter::mx_acc(int q, int acc, bool set, bool folded) {
  const Cfg& c = c_;
  if (folded && !set && !c.weighted) {
    a_.vfmadd231ps(v(acc), v(q), v(c.rS));  // acc = value * X + acc, one rounding (exact product)
    return;
  }
  a_.vmulps(v(q), v(q), v(c.rS));  // v = value * X
  if (set) {
    if (c.weighted)
      a_.vmulps(v(acc), v(c.rW), v(q));
    else
      a_.vmovaps(v(acc), v(q));
  } else if (c.weighted) {
    a_.vfmadd231ps(v(acc), v(c.rW), v(q));
  } else {
    a_.vaddps(v(acc), v(acc), v(q));
  }
}

void Emitter::emit_mx_group(int64_t g, int acc0, bool set) {
  const Cfg& c = c_;
  const int64_t base = g * c.Bg;
  {
    UnfoldedStub us{a_.newLabel(), a_.newLabel(), g, acc0, set};
    if (c.mx == QJ_MXFP4_E2M1)
      a_.movzx(r15d, byte_ptr(r9, static_cast<int32_t>(g * 17 + 16)));
    else
      a_.movzx(r15d, byte_ptr(r10, static_cast<int32_t>(g)));
    a_.cmp(r15d, mx_fold(c.mx).hi);
    a_.ja(us.go);
    // X' from the stack table: broadcast from memory, a load with no shuffle (16 elements per block
    // of 2 zmm vectors; vmovd + vpbroadcastd took one shuffle per block). Measured (2026-12-01, Zen
    // 5, bench embedding, 48-row tables, i32 unweighted, ns per row, alternating): against the bits
    // computed per block (add, shl) and broadcast by vmovd + vpbroadcastd, through a stack slot for
    // MXFP4 / MXFP8: MXFP4 dims 64 / 256 / 1024 1.41-1.45 / 4.3-4.6 / 17.2-18.3 -> 1.21-1.24 /
    // 4.05-4.09 / 16.2-16.3, E5M2 dim 64 1.88-1.92 -> 1.67-1.74, E4M3 within 5%; before the slot
    // (vmovd + vpbroadcastd for every type) MXFP4 dims 256 / 1024 were 4.85-5.0 / 19.2-19.8, E5M2
    // 7.2-7.5 / 29.0-30.4. MXINT8 through memory: dims 256 / 1024 4.7-5.0 / 18.9-19.9 -> 5.1-5.4 /
    // 20.5-21.0. From DRAM (fresh, 1M rows, two runs), the table against the slot: MXFP4 dims 256 /
    // 512 / 1024 11.6-18.1 / 20.8-22.2 / 35.4-38.4 -> 10.6 / 17.6-17.9 / 30.4-31.1 (fewer
    // instructions per row in flight), E5M2 dims 256 / 512 14.3-14.5 / 26.6-27.8 -> 13.0-13.1 /
    // 24.0-24.3, E4M3 within the noise. MXINT8 kept the bits computed (add, shl, vmovd,
    // vpbroadcastd; bytes 7..253 folded) until the two forms ran in one process with their calls
    // interleaved (medians of 2700 calls each, ns per row): rows in L1 / L2 dims 64 / 128 / 256 /
    // 512 / 1024 3.15-3.19 / 5.00-5.02 / 8.39-8.40 / 18.1-18.2 / 35.4-35.8 -> 2.74-2.78 / 4.31-4.33
    // / 6.87-6.90 / 15.1-15.2 / 29.4-29.5; from DRAM (1M rows, the same distance +-1 both ways)
    // dims 128 / 256 / 512 / 1024 13.2-13.3 / 24.6 / 42.7-42.8 / 72.6 -> 12.0-12.8 / 21.3-24.2 /
    // 33.6-33.9 / 63.8-64.5. (The runs above, in separate processes, had read the table form 6-8%
    // slower.) The block's FMAs reading X' from the table with an embedded {1to16} broadcast, no
    // vbroadcastss (unweighted sums; 2026-12-01 ~23:14 UTC, both forms in one process, calls
    // alternating, ns per row): warm slower, MXINT8 dims 64 / 256 / 1024 2.40 / 7.7 / 46 -> 2.77
    // / 9.4 / 51, MXFP4 1.72 / 4.70 / 27.3 -> 2.05 / 5.91 / 31.8, E4M3 / E5M2 5-15%; from DRAM
    // within 1-5% either way. Not taken.
    a_.vbroadcastss(v(c.rS), dword_ptr(rsp, r15, 2, xtab_off_));
    emit_mx_block(g, acc0, set, true);
    a_.bind(us.back);
    unfolded_stubs_.push_back(us);
  }
  if (c.mx == QJ_MXFP8_E4M3) {
    // NaN codes (0x7f, 0xff: low 7 bits all ones): rB keeps the running byte minimum of
    // ~code & 0x7f (rM holds 0x7f bytes), which reaches 0 at a NaN code; the row's end tests it
    // once (emit_row) and, if so, an out-of-line stub makes those elements' accumulator lanes NaN,
    // as NaN * X (* w) added to anything would. A test per block cost DRAM-resident rows more
    // than its ops suggest (dim 1024 fresh, ns per row: 180-190 with a compare and branch per
    // block, 125 with no test at all, 150-173 with this form; which part of the per-block test
    // costs was not isolated: a per-block vector form without a branch measured 183-189).
    // zmm: one test for each two neighbouring blocks of the row pass (64 bytes), an odd last block
    // by itself (emit_row); ymm (AVX2): one per block. Measured against one ymm test per block
    // (2026-12-01, Zen 5, the two forms' plans in one process, calls interleaved, medians of 2700
    // calls each, i32 unweighted, ns per row): rows in L1 / L2 dims 64 / 256 / 1024 3.41 / 8.96 /
    // 36.9-37.5 -> 3.32 / 8.30 / 35.0-35.5; from DRAM (1M rows, new indices every call, the same
    // distance +-1 both ways) dim 128 9.82 -> 9.70, dim 256 16.1 -> 15.1-15.5, dim 512 29.0 ->
    // 28.3, dim 1024 2-4% faster. (Separate processes had shown no gain: their noise, 10-30% from
    // DRAM.)
    if (!c.z) {
      a_.vmovdqu(ymm(c.rT), ymmword_ptr(r9, static_cast<int32_t>(base)));
      a_.vpandn(ymm(c.rT), ymm(c.rT), ymm(c.rM));  // ~code & 0x7f
      a_.vpminub(ymm(c.rB), ymm(c.rB), ymm(c.rT));
    } else if (nan_pending_ < 0) {
      nan_pending_ = base;
    } else {
      a_.vpternlogd(zmm(c.rT), zmm(c.rM), zmmword_ptr(r9, static_cast<int32_t>(nan_pending_)), 0x44);
      a_.vpminub(zmm(c.rB), zmm(c.rB), zmm(c.rT));
      nan_pending_ = -1;
    }
    row_e4m3_blocks_.push_back({base, acc0});
  }
}

// The scale and the decode of one MX block (see emit_mx_group). folded: rS already holds the
// folded scale X'.
void Emitter::emit_mx_block(int64_t g, int acc0, bool set, bool folded) {
  const Cfg& c = c_;
  if (!folded) {
    // E8M0 -> fp32 bits: b << 23, with 0x00 -> 2^-127 (0x00400000) and 0xFF -> NaN out of line.
    E8m0Stub st{a_.newLabel(), a_.newLabel(), a_.newLabel()};
    if (c.mx == QJ_MXFP4_E2M1)
      a_.movzx(r15d, byte_ptr(r9, static_cast<int32_t>(g * 17 + 16)));
    else
      a_.movzx(r15d, byte_ptr(r10, static_cast<int32_t>(g)));
    a_.cmp(r15d, 255);
    a_.je(st.nan);
    a_.test(r15d, r15d);
    a_.jz(st.zero);
    a_.shl(r15d, 23);
    a_.bind(st.back);
    stubs_.push_back(st);
  }
  if (!folded) {  // (folded blocks: X' is in rS, from the stack table)
    a_.mov(dword_ptr(rsp, scale_slot_), r15d);
    a_.vbroadcastss(v(c.rS), dword_ptr(rsp, scale_slot_));
    if (c.mx == QJ_MXINT8) a_.vmulps(v(c.rS), v(c.rS), k_.at(c_p2m6));  // X * 2^-6, exact
  }
  const int64_t base = g * c.Bg;
  if (c.mx == QJ_MXFP4_E2M1) {
    const int halves = c.z ? 1 : 2;  // zmm: 16 bytes at once; ymm: two halves of 8 bytes
    for (int h = 0; h < halves; ++h) {
      a_.vpmovzxbd(v(c.rT), ptr(r9, static_cast<int32_t>(base + 8 * h)));
      const int ae = acc0 + 2 * h, ao = acc0 + 2 * h + 1;
      if (c.z) {
        a_.vpsrld(v(c.rT2), v(c.rT), 4);
        a_.vpermps(v(c.rT), v(c.rT), v(c.rM));    // even elements: the low nibbles
        a_.vpermps(v(c.rT2), v(c.rT2), v(c.rM));  // odd elements: the high nibbles
      } else {
        // vpermps ymm reads 3 index bits: the magnitude; the sign is the code's bit 3
        a_.vpsrld(v(c.rT2), v(c.rT), 4);
        a_.vpslld(v(c.rB), v(c.rT), 28);
        a_.vpand(v(c.rB), v(c.rB), k_.at(c_sign));
        a_.vpermps(v(c.rT), v(c.rT), v(c.rM));
        a_.vpxor(v(c.rT), v(c.rT), v(c.rB));
        a_.vpslld(v(c.rB), v(c.rT2), 28);
        a_.vpand(v(c.rB), v(c.rB), k_.at(c_sign));
        a_.vpermps(v(c.rT2), v(c.rT2), v(c.rM));
        a_.vpxor(v(c.rT2), v(c.rT2), v(c.rB));
      }
      mx_acc(c.rT, ae, set, folded);
      mx_acc(c.rT2, ao, set, folded);
    }
    return;
  }
  for (int q = 0; q < c.G; ++q) {
    const Mem m = ptr(r9, static_cast<int32_t>(base + q * c.V));
    if (c.mx == QJ_MXINT8) {
      a_.vpmovsxbd(v(c.rT), m);
      a_.vcvtdq2ps(v(c.rT), v(c.rT));
    } else if (c.mx == QJ_MXFP8_E5M2) {
      a_.vpmovzxbw(hv(c.rT), m);
      a_.vpsllw(hv(c.rT), hv(c.rT), 8);
      a_.vcvtph2ps(v(c.rT), hv(c.rT));
    } else {
      // E4M3: the sign-extended code shifted left by 20 is s...s eeee mmm 0...0 (20 zero bits);
      // keeping the sign bit, the exponent and the mantissa (0x87F00000) leaves the fp32 bits of
      // value * 2^-120, exact: a normal code's exponent field e in 1..15 becomes fp32's, and a
      // subnormal one (e = 0) an fp32 subnormal, m/8 * 2^-126 (the kernels run without DAZ, see
      // src/core/fp_env.h). Times 2^120 (folded blocks: part of X'). The NaN codes (0x7f, 0xff)
      // are found per block (emit_mx_group) and handled per row, out of line (emit_row). This
      // takes 3 instructions per 16 codes and no vcvtph2ps (the fp16 form before it took 4-5);
      // synthetic loops of 6 blocks from L1 (2026-12-01, Zen 5): 25.2 cycles (the fp16 form with
      // the long rows' 32-code widening) / 26.2 (16 codes at a time) -> 18.0. The kernels (bench
      // embedding, i32 unweighted, ns per row, alternating with the build before): rows in L1
      // (48-row tables, three runs) dims 64 / 256 / 1024 2.45-2.56 / 8.7-9.1 / 34.0-35.2 -> 2.08-2.14
      // / 6.4-6.5 / 26.4-26.6; from DRAM (fresh, 1M rows, two runs) dims 128 / 256 / 512 / 1024
      // 8.3-8.4 / 15.3-15.4 / 29.9-30.0 / 61.6-64.2 -> 7.3-7.4 / 13.8-13.9 / 27.1-28.2 / 57.5-59.8.
      a_.vpmovsxbd(v(c.rT), m);
      a_.vpslld(v(c.rT), v(c.rT), 20);
      if (c.z)  // EVEX (registers 16-31)
        a_.vpandd(v(c.rT), v(c.rT), v(c.rBs));  // (rBs: 0x87F00000, see emit_bag_kernel)
      else
        a_.vpand(v(c.rT), v(c.rT), v(c.rBs));
      if (!folded) a_.vmulps(v(c.rT), v(c.rT), k_.at(c_p2p120));
    }
    mx_acc(c.rT, acc0 + q, set, folded);
  }
}

// SPLIT MX rows: prefetch the scale bytes of the row `distance` ahead (r10 = their address).
void Emitter::emit_mx_scale_prefetch() {
  prefetch(ptr(r10), c_.hint);
  if (c_.mx_blocks > 1) prefetch(ptr(r10, static_cast<int32_t>(c_.mx_blocks - 1)), c_.hint);
}

// Prefetches the whole row `distance` indices ahead (r10 = its address): one prefetch per 64 bytes
// plus the last byte, since rows need not be line-aligned; except where the row's last partial
// step of t = rb % 64 bytes divides 64 (0 included: rows of whole lines; 8-bit rows of dims
// 64 / 128 / 1024, 72 / 136 / 1032 bytes, t = 8; 4-bit dim 128 and 2-bit dims 256 / 1024, t = 4;
// SPLIT MX rows, t = 0 or 32). In a table with a 64-byte aligned base and a natural or
// line-multiple stride (qj_embedding_table_alloc's, PyTorch's) such a row starts at a multiple of
// gcd(rb, 64) = t within its line, at most 64 - t, so its last byte lies in the line of the last
// 64-byte step, already prefetched. That extra prefetch cost, rows of whole lines: 0.15-0.2 ns per
// row (f32 dim 32 warm, 1.50 -> 1.35 ns; prefetcht2 1.77 -> 1.57); 8-bit rows (2026-12-01, Zen 5,
// FBGEMM's grid warm, i32 unweighted, the two forms in one process at distances 32 / 33 and 16 /
// 17, three runs, ns per row): dim 64 1.52-1.65 -> 1.41-1.54, dim 128 2.33-2.52 -> 2.18-2.37, dim
// 256 4.03-4.30 -> 3.76-4.26; 4-bit dim 128 and 2-bit dim 256 (68-byte rows) unchanged; from DRAM
// (cold / fresh, 1M rows) within the noise. A table of other alignment or stride misses the
// prefetch of some rows' last partial line (a slower row, not a wrong one). Only the first column
// block of a bag prefetches: later blocks of the same bag find the rows in L2.
void Emitter::emit_prefetch(int hint) {
  const int64_t rb = row_bytes(c_);
  int64_t last = 0;
  for (int64_t o = 0; o < rb; o += 64) {
    prefetch(ptr(r10, static_cast<int32_t>(o)), hint);
    last = o;
  }
  const int64_t t = rb % 64;  // bytes of the row's last, partial 64-byte step
  if (t != 0 && 64 % t != 0 && rb - 1 > last) prefetch(ptr(r10, static_cast<int32_t>(rb - 1)), hint);
}

// Rows of several column blocks (key param[5]): the next bag's rows, one every P row steps of
// this bag's P blocks ([rsp+24] counts down the steps, [rsp+32] is the next row's index position,
// from this bag's end), so they load while every block of this bag runs, each once; SPLIT MX
// rows' scale bytes too.
void Emitter::emit_next_bag_prefetch() {
  const Cfg& c = c_;
  Label l_no = a_.newLabel();
  a_.dec(qword_ptr(rsp, 24));
  a_.jnz(l_no);
  a_.mov(qword_ptr(rsp, 24), passes_);
  a_.mov(r9, qword_ptr(rsp, 32));  // (r9 is free until emit_row loads this row's index)
  a_.inc(qword_ptr(rsp, 32));
  a_.sub(r9, c.pf);
  a_.cmp(r9, r12);  // index position r9 + pf < num_indices
  a_.jge(l_no);
  emit_prefetch_row_at(r9, c.pf * c.isz);
  a_.bind(l_no);
}

// Prefetches the whole row whose index sits at [rdx + pos * index bytes + disp] (r10 = its
// address), and for SPLIT MX rows its scale bytes.
void Emitter::emit_prefetch_row_at(const Gp& pos, int32_t disp) {
  const Cfg& c = c_;
  const Gp pr = c.isz == 4 ? Gp(r10d) : Gp(r10);
  const int shift = c.isz == 4 ? 2 : 3;
  a_.mov(pr, ptr(rdx, pos, shift, disp));
  if (c.remap) a_.movsxd(r10, dword_ptr(r14, r10, 2));
  a_.imul(r10, r11);
  a_.add(r10, rsi);
  emit_prefetch(c.hint);
  if (c.mx && c.mx != QJ_MXFP4_E2M1) {
    a_.mov(pr, ptr(rdx, pos, shift, disp));
    if (c.remap) a_.movsxd(r10, dword_ptr(r14, r10, 2));
    a_.imul(r10, r10, c.mx_blocks);
    a_.add(r10, ARG(scales));
    emit_mx_scale_prefetch();
  }
}

// Rows of several column blocks (key param[5] bit 1): each block after the first prefetches, with
// prefetcht0, its own bytes of the row `distance` indices ahead (r10 = that row; loop: plus r15,
// the block's byte offset). The first block's whole-row prefetch brings the row in, but a bag's
// rows (~100 KiB at 1 KiB a row) outgrow L1 before the next block's pass over them, which then
// waited on L2 for each row. Measured on Zen 5 (2026-12-01 ~23:20 UTC, 1M-row tables, i32
// unweighted, both forms in one process at distances d / d + 1, calls alternating, ns per row,
// without -> with): 8-bit dim 1024 (d = 4) warm 20.5-21.3 -> 19.3-20.1, dim 512 (8) warm 9.2-9.9
// -> 8.7-9.4, flushed 27.4-30.0 -> 25.7-28.5, fresh 32.5-38.3 -> 30.6-36.0; dim 1024 at d = 8
// warm 26.2-32.6 -> 23.8-29.0, flushed 76-79 -> 62-64; but dim 1024 at d = 4 flushed 55-78 ->
// 62-81 in three runs. Other rows, one run (warm / flushed / fresh ratios): f16 dim 1024 0.94 /
// 0.76 / 0.91, bf16 dim 512 0.97 / 0.86 / 0.91, 4-bit dims 512 / 1024 0.93 / 0.94 / 0.98 and
// 0.96 / 0.95 / 0.97, 2-bit dim 1024 0.91 / 0.95 / 1.00, MXINT8 dim 1024 0.99 / 0.89 / 0.94, E4M3
// dim 512 0.98 / 0.95 / 0.98, MXFP4 dims 512 / 1024 0.96 / 0.93 / 0.99 and 0.90 / 0.94 / 0.96;
// not fp32 rows (dim 512 0.99 / 0.97 / 1.01, dim 1024 1.07 / 1.09 / 1.00: blocks of 1.4 KiB). A
// shorter distance for these prefetches (2 rows) was no better.
void Emitter::emit_block_prefetch(bool loop, int64_t base_group, int64_t block_elems) {
  const Cfg& c = c_;
  Label l_nopf = a_.newLabel();
  a_.cmp(rcx, r12);  // index position rcx + pf < num_indices
  a_.jge(l_nopf);
  const Gp pr = c.isz == 4 ? Gp(r10d) : Gp(r10);
  a_.mov(pr, ptr(rdx, rcx, c.isz == 4 ? 2 : 3, c.pf * c.isz));
  if (c.remap) a_.movsxd(r10, dword_ptr(r14, r10, 2));
  a_.imul(r10, r11);
  a_.add(r10, rsi);
  if (loop) a_.add(r10, r15);
  const int64_t e0 = loop ? 0 : base_group * c.E;  // the block's first element (loop: r15)
  int64_t start = 0, len = 0;                      // its bytes in the row
  if (c.bits) {
    start = c.data_off + e0 * c.bits / 8;
    len = div_up(block_elems * c.bits, 8);
  } else if (c.mx == QJ_MXFP4_E2M1) {
    start = e0 / 32 * 17;
    len = div_up(block_elems, 32) * 17;
  } else if (c.mx) {
    start = e0;
    len = block_elems;
  } else {
    start = e0 * c.eb;
    len = block_elems * c.eb;
  }
  for (int64_t o = 0; o < len; o += 64) prefetch(ptr(r10, static_cast<int32_t>(start + o)), 0);
  prefetch(ptr(r10, static_cast<int32_t>(start + len - 1)), 0);  // (the block need not be aligned)
  a_.bind(l_nopf);
}

void Emitter::emit_row(bool loop, int64_t base_group, int ngroups, int64_t block_elems, bool pf) {
  const Cfg& c = c_;
  if (passes_ > 1) emit_next_bag_prefetch();
  const bool gather = c.pooling == QJ_POOL_NONE;
  Label l_skip = a_.newLabel();
  const Gp idx_row = c.isz == 4 ? Gp(r9d) : Gp(r9);
  // prefetch
  if (c.pf > 0 && pf) {
    Label l_nopf = a_.newLabel();
    a_.cmp(rcx, r12);
    a_.jge(l_nopf);
    emit_prefetch_row_at(rcx, c.pf * c.isz);
    a_.bind(l_nopf);
  }
  if (c.pf > 0 && !pf && c.block_pf) emit_block_prefetch(loop, base_group, block_elems);
  a_.mov(idx_row, ptr(rdx, rcx, c.isz == 4 ? 2 : 3));
  if (c.remap) {
    a_.movsxd(r9, dword_ptr(r14, r9, 2));
    a_.test(r9, r9);
    a_.js(l_skip);
  }
  if (c.mx && c.mx != QJ_MXFP4_E2M1) {  // r10 = this row's scale bytes
    a_.imul(r10, r9, c.mx_blocks);
    a_.add(r10, ARG(scales));
  }
  a_.imul(r9, r11);
  a_.add(r9, rsi);
  if (c.bits && !gather) {
    // Pooled fused rows: the per-row scalars are computed in lane 0 of xmm registers (the same
    // fp32 operations as the vector lanes would do: s = w * s, b = w * b, bsum = bsum + b), so a
    // row costs one full-width broadcast (the scale) instead of up to six full-width operations.
    // (FMAs reading the scale with an embedded {1to16} broadcast instead were slower here: 8-bit
    // dim 32 / 64 warm 1.79 / 2.81 ns against 1.61 / 2.50.) rBs holds bsum in lane 0 until
    // emit_store broadcasts it.
    const Mem s_at = dword_ptr(r9, static_cast<int32_t>(c.sb_off));
    if (c.fp32_sb) {
      const Mem b_at = dword_ptr(r9, static_cast<int32_t>(c.sb_off + 4));
      if (c.weighted) {
        a_.vmovss(x(c.rW), dword_ptr(r13, rcx, 2));
        a_.vmulss(x(c.rS), x(c.rW), s_at);
        a_.vmulss(x(c.rB), x(c.rW), b_at);
        a_.vaddss(x(c.rBs), x(c.rBs), x(c.rB));
        a_.vbroadcastss(v(c.rS), x(c.rS));
      } else {
        a_.vaddss(x(c.rBs), x(c.rBs), b_at);
        a_.vbroadcastss(v(c.rS), s_at);
      }
    } else {
      a_.vmovd(x(c.rS), s_at);
      a_.vcvtph2ps(x(c.rS), x(c.rS));   // lane 0: s, lane 1: b
      a_.vmovshdup(x(c.rB), x(c.rS));   // lane 0: b
      if (c.weighted) {
        a_.vmovss(x(c.rW), dword_ptr(r13, rcx, 2));
        a_.vmulss(x(c.rS), x(c.rW), x(c.rS));
        a_.vmulss(x(c.rB), x(c.rW), x(c.rB));
      }
      a_.vaddss(x(c.rBs), x(c.rBs), x(c.rB));
      a_.vbroadcastss(v(c.rS), x(c.rS));
    }
  } else if (c.bits) {
    if (c.weighted) a_.vbroadcastss(v(c.rW), dword_ptr(r13, rcx, 2));
    if (c.fp32_sb) {
      a_.vbroadcastss(v(c.rS), dword_ptr(r9, static_cast<int32_t>(c.sb_off)));
      a_.vbroadcastss(v(c.rB), dword_ptr(r9, static_cast<int32_t>(c.sb_off + 4)));
    } else {
      a_.vpbroadcastd(hv(c.rS), dword_ptr(r9, static_cast<int32_t>(c.sb_off)));
      a_.vcvtph2ps(v(c.rS), hv(c.rS));  // s, b, s, b, ...
      a_.vmovshdup(v(c.rB), v(c.rS));
      a_.vmovsldup(v(c.rS), v(c.rS));
    }
    if (c.weighted) {
      a_.vmulps(v(c.rS), v(c.rS), v(c.rW));
      a_.vmulps(v(c.rB), v(c.rB), v(c.rW));
    }
  } else if (c.weighted) {
    a_.vbroadcastss(v(c.rW), dword_ptr(r13, rcx, 2));
  }
  for (int g = 0; g < ngroups; ++g) {
    int64_t g_elem = (loop ? 0 : base_group * c.E) + static_cast<int64_t>(g) * c.E;
    int64_t rem = block_elems - static_cast<int64_t>(g) * c.E;
    int valid = static_cast<int>(rem < c.E ? rem : c.E);
    if (c.bits == 0) valid = valid > c.V ? c.V : valid;
    emit_group(loop, g_elem / c.E, g * c.G, valid, gather);
  }
  if (c.mx == QJ_MXFP8_E4M3) {  // a NaN code in the row (emit_mx_group): rB has a zero byte
    if (nan_pending_ >= 0) {  // an odd block out: its 32 bytes, rB's upper half kept (k5)
      a_.vpternlogd(ymm(c.rT), ymm(c.rM), ymmword_ptr(r9, static_cast<int32_t>(nan_pending_)), 0x44);
      a_.k(k5).vpminub(zmm(c.rB), zmm(c.rB), zmm(c.rT));
      nan_pending_ = -1;
    }
    NanCodeStub ns{a_.newLabel(), a_.newLabel(), std::move(row_e4m3_blocks_)};
    row_e4m3_blocks_.clear();
    if (c.z) {
      a_.vptestnmb(k3, zmm(c.rB), zmm(c.rB));
      a_.kortestq(k3, k3);
    } else {  // (r15 is free: the scales are in rS)
      a_.vpxor(ymm(c.rT), ymm(c.rT), ymm(c.rT));
      a_.vpcmpeqb(ymm(c.rT), ymm(c.rT), ymm(c.rB));
      a_.vpmovmskb(r15d, ymm(c.rT));
      a_.test(r15d, r15d);
    }
    a_.jnz(ns.go);
    a_.bind(ns.back);
    nan_stubs_.push_back(std::move(ns));
  }
  a_.bind(l_skip);
}

// Rounds the fp32 lanes of v(r) to bf16 (nearest even; NaN quietened) in the low 16 bits of each
// dword, as f32_to_bf16 does. Uses T and T2.
void Emitter::bf16_round(int r) {
  const Cfg& c = c_;
  a_.vpsrld(v(c.rT), v(r), 16);
  if (c.z) {
    a_.vpandd(v(c.rT), v(c.rT), cvec(c_one_i));
  } else {
    a_.vpand(v(c.rT), v(c.rT), cvec(c_one_i));
  }
  a_.vpaddd(v(c.rT), v(c.rT), v(r));
  a_.vpaddd(v(c.rT), v(c.rT), cvec(c_7fff));
  a_.vpsrld(v(c.rT), v(c.rT), 16);
  a_.vpsrld(v(c.rT2), v(r), 16);
  if (c.z) {
    a_.vpord(v(c.rT2), v(c.rT2), cvec(c_40));
    a_.vcmpps(k3, v(r), v(r), 3);  // unordered: NaN
    a_.vmovdqa32(v(r), v(c.rT));
    a_.k(k3).vmovdqa32(v(r), v(c.rT2));
  } else {
    a_.vpor(v(c.rT2), v(c.rT2), cvec(c_40));
    a_.vcmpps(v(r), v(r), v(r), 3);
    a_.vblendvps(v(r), v(c.rT), v(c.rT2), v(r));
  }
}

// Stores `lanes` (1..V) output elements of v(r) at m.
void Emitter::store_vec(int r, Mem m, int lanes) {
  const Cfg& c = c_;
  const bool full = lanes == c.V;
  if (c.out == QJ_F32) {
    if (full)
      a_.vmovups(m, v(r));
    else if (c.z)
      a_.k(k2).vmovups(m, v(r));
    else {
      a_.vmovups(v(c.rT), k_.at(c_otail));
      a_.vmaskmovps(m, v(c.rT), v(r));
    }
  } else if (c.out == QJ_F16) {
    if (full)
      a_.vcvtps2ph(m, v(r), 0);
    else if (c.z)
      a_.k(k2).vcvtps2ph(m, v(r), 0);
    else {
      a_.vcvtps2ph(x(c.rT), v(r), 0);
      store_bytes_exact(c.rT, m, lanes * 2);
    }
  } else {  // bf16: lanes already rounded into the low 16 bits
    if (c.z) {
      if (full)
        a_.vpmovdw(m, v(r));
      else
        a_.k(k2).vpmovdw(m, v(r));
    } else {
      a_.vextracti128(x(c.rT), v(r), 1);
      a_.vpackusdw(x(c.rT), x(r), x(c.rT));
      if (full)
        a_.vmovdqu(m, x(c.rT));
      else
        store_bytes_exact(c.rT, m, lanes * 2);
    }
  }
}

// Mean scaling, output rounding, interleaving (4/2-bit) and the stores of one block.
void Emitter::emit_store(bool loop, int64_t base_group, int ngroups, int64_t block_elems) {
  const Cfg& c = c_;
  const int nacc = ngroups * c.G;
  if (c.bits && c.pooling != QJ_POOL_NONE) {
    a_.vbroadcastss(v(c.rBs), x(c.rBs));  // bsum was summed in lane 0
    for (int i = 0; i < nacc; ++i) a_.vaddps(v(i), v(i), v(c.rBs));  // acc + bsum
  }
  if (c.pooling == QJ_POOL_MEAN) {
    Label l_nomean = a_.newLabel();
    a_.mov(r9, r8);
    a_.sub(r9, rax);
    a_.jz(l_nomean);
    a_.vcvtsi2ss(x(c.rS), x(c.rS), r9);
    a_.vmovss(x(c.rB), k_.at(c_one_f));
    a_.vdivss(x(c.rS), x(c.rB), x(c.rS));
    a_.vbroadcastss(v(c.rS), x(c.rS));
    for (int i = 0; i < nacc; ++i) a_.vmulps(v(i), v(i), v(c.rS));
    a_.bind(l_nomean);
  }
  if (c.out == QJ_BF16)
    for (int i = 0; i < nacc; ++i) bf16_round(i);
  // Output pointer of the block: rbx (+ [rsp+8] in the block loop).
  Gp optr = rbx;
  if (loop) {
    a_.mov(r9, rbx);
    a_.add(r9, qword_ptr(rsp, 8));
    optr = r9;
  }
  const int64_t out_base = loop ? 0 : base_group * c.E * c.out_bytes;
  for (int g = 0; g < ngroups; ++g) {
    int64_t rem = block_elems - static_cast<int64_t>(g) * c.E;
    int valid = static_cast<int>(rem < c.E ? rem : c.E);
    const int a0 = g * c.G;
    std::vector<int> outs;
    if (!c.deint) {
      for (int o = 0; o < c.G; ++o) outs.push_back(a0 + o);
    } else if (c.G == 2 || c.mx) {
      if (c.z) {
        a_.vmovups(v(c.rT), k_.at(c_il));
        a_.vpermi2ps(v(c.rT), v(a0), v(a0 + 1));
        a_.vmovups(v(c.rT2), k_.at(c_il + 64));
        a_.vpermi2ps(v(c.rT2), v(a0), v(a0 + 1));
        a_.vmovaps(v(a0), v(c.rT));
        a_.vmovaps(v(a0 + 1), v(c.rT2));
      } else {
        for (int p = 0; p < c.G; p += 2) {  // MXFP4 ymm: two (even, odd) pairs
          a_.vunpcklps(v(c.rT), v(a0 + p), v(a0 + p + 1));
          a_.vunpckhps(v(c.rT2), v(a0 + p), v(a0 + p + 1));
          a_.vperm2f128(v(a0 + p), v(c.rT), v(c.rT2), 0x20);
          a_.vperm2f128(v(a0 + p + 1), v(c.rT), v(c.rT2), 0x31);
        }
      }
      for (int o = 0; o < c.G; ++o) outs.push_back(a0 + o);
    } else {
      if (c.z) {
        // P = pairs of (A0, A1), Q = pairs of (A2, A3), low and high halves
        const int Plo = c.rS, Phi = c.rB, Qlo = c.rW, Qhi = c.rT;
        a_.vmovups(v(Plo), k_.at(c_il));
        a_.vpermi2ps(v(Plo), v(a0), v(a0 + 1));
        a_.vmovups(v(Phi), k_.at(c_il + 64));
        a_.vpermi2ps(v(Phi), v(a0), v(a0 + 1));
        a_.vmovups(v(Qlo), k_.at(c_il));
        a_.vpermi2ps(v(Qlo), v(a0 + 2), v(a0 + 3));
        a_.vmovups(v(Qhi), k_.at(c_il + 64));
        a_.vpermi2ps(v(Qhi), v(a0 + 2), v(a0 + 3));
        const int idx4[4] = {0, 1, 0, 1};
        const int srcP[4] = {Plo, Plo, Phi, Phi};
        const int srcQ[4] = {Qlo, Qlo, Qhi, Qhi};
        for (int o = 0; o < 4; ++o) {
          a_.vmovups(v(a0 + o), k_.at(c_il + 128 + 64 * idx4[o]));
          a_.vpermi2ps(v(a0 + o), v(srcP[o]), v(srcQ[o]));
        }
        outs = {a0, a0 + 1, a0 + 2, a0 + 3};
      } else {
        const int t0 = c.rS, t1 = c.rB, t2 = c.rW, t3 = c.rT;
        a_.vunpcklps(v(t0), v(a0), v(a0 + 1));
        a_.vunpckhps(v(t1), v(a0), v(a0 + 1));
        a_.vunpcklps(v(t2), v(a0 + 2), v(a0 + 3));
        a_.vunpckhps(v(t3), v(a0 + 2), v(a0 + 3));
        a_.vunpcklpd(v(a0), v(t0), v(t2));      // e0..3 | e16..19
        a_.vunpckhpd(v(a0 + 1), v(t0), v(t2));  // e4..7 | e20..23
        a_.vunpcklpd(v(a0 + 2), v(t1), v(t3));  // e8..11 | e24..27
        a_.vunpckhpd(v(a0 + 3), v(t1), v(t3));  // e12..15 | e28..31
        a_.vperm2f128(v(t0), v(a0), v(a0 + 1), 0x20);
        a_.vperm2f128(v(t1), v(a0 + 2), v(a0 + 3), 0x20);
        a_.vperm2f128(v(t2), v(a0), v(a0 + 1), 0x31);
        a_.vperm2f128(v(t3), v(a0 + 2), v(a0 + 3), 0x31);
        for (int o = 0; o < 4; ++o) a_.vmovaps(v(a0 + o), v(o == 0 ? t0 : o == 1 ? t1 : o == 2 ? t2 : t3));
        outs = {a0, a0 + 1, a0 + 2, a0 + 3};
      }
    }
    for (int o = 0; o < static_cast<int>(outs.size()); ++o) {
      int lanes = valid - o * c.V;
      if (lanes <= 0) break;
      if (lanes > c.V) lanes = c.V;
      int64_t off = out_base + (static_cast<int64_t>(g) * c.E + static_cast<int64_t>(o) * c.V) * c.out_bytes;
      store_vec(outs[o], ptr(optr, static_cast<int32_t>(off)), lanes);
    }
  }
}

// One column block of the current bag: zero, loop over the bag's indices, store.
void Emitter::emit_block(bool loop, int64_t base_group, int ngroups, int64_t block_elems, bool pf) {
  const int nacc = ngroups * c_.G;
  for (int i = 0; i < nacc; ++i) zero(i);
  if (c_.bits && c_.pooling != QJ_POOL_NONE) zero(c_.rBs);
  Label l_row = a_.newLabel(), l_done = a_.newLabel();
  a_.mov(rcx, rax);
  a_.cmp(rcx, r8);
  a_.jge(l_done);
  a_.bind(l_row);
  emit_row(loop, base_group, ngroups, block_elems, pf);
  a_.inc(rcx);
  a_.cmp(rcx, r8);
  a_.jl(l_row);
  a_.bind(l_done);
  emit_store(loop, base_group, ngroups, block_elems);
}

bool Emitter::emit_bag_kernel() {
  const Cfg& c = c_;
  k_.pool = a_.newLabel();
  // constants
  c_one_i = splat(1);
  c_7fff = splat(0x7fff);
  c_40 = splat(0x40);
  c_one_f = k_.add_dwords({0x3f800000u}, 4);
  if (c.z) {
    std::vector<uint32_t> il;
    for (int i = 0; i < 16; ++i) il.push_back(i % 2 ? 16 + i / 2 : i / 2);          // pairs, low
    for (int i = 0; i < 16; ++i) il.push_back(i % 2 ? 24 + i / 2 : 8 + i / 2);      // pairs, high
    for (int i = 0; i < 16; ++i) il.push_back((i % 4 < 2 ? 0 : 16) + 2 * (i / 4) + i % 2);      // quads 0
    for (int i = 0; i < 16; ++i) il.push_back((i % 4 < 2 ? 8 : 24) + 2 * (i / 4) + i % 2);      // quads 1
    c_il = k_.add_dwords(il);
  }
  if (c.mx) {
    if (c.mx == QJ_MXFP4_E2M1) {
      // the E2M1 values: zmm all 16 codes; ymm the 8 magnitudes (the sign is applied apart)
      const float fp4[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
      std::vector<uint32_t> tab(16);
      std::memcpy(tab.data(), fp4, 64);
      c_mask = k_.add_dwords(tab);
    }
    c_sign = full(0x80000000u);
    c_p2m6 = full(0x3c800000u);  // 2^-6
    c_p2p120 = full(0x7b800000u);  // 2^120
    c_qnan = full(0x7fc00000u);
    if (c.mx) {  // X' = 2^(e - 127 + f) for the folded bytes e = 0..hi (subnormal: E < 1)
      const MxFold fd = mx_fold(c.mx);
      std::vector<uint32_t> t((fd.hi + 1 + 15) / 16 * 16, 0);
      for (int e = 0; e <= fd.hi; ++e) {
        const int E = e + fd.f;  // the biased fp32 exponent
        t[e] = E >= 1 ? static_cast<uint32_t>(E) << 23 : 1u << (E + 22);
      }
      c_xtab = k_.add_dwords(t);
    }
    if (c.mx == QJ_MXFP8_E4M3) {
      c_e4m3 = full(0x87f00000u);
      c_b7f = full(0x7f7f7f7fu);
      c_d7f = full(0x7fu);
      c_dff = full(0xffu);
    }
  }
  if ((c.bits == 4 || c.bits == 2) && c.z) {
    std::vector<uint32_t> tab, tab1;
    for (uint32_t i = 0; i < 16; ++i) {
      const float f = static_cast<float>(c.bits == 4 ? i : (i & 3)), f1 = static_cast<float>(i >> 2);
      uint32_t u, u1;
      std::memcpy(&u, &f, 4);
      std::memcpy(&u1, &f1, 4);
      tab.push_back(u);
      tab1.push_back(u1);
    }
    c_mask = k_.add_dwords(tab);
    if (c.rM1 >= 0) c_mask1 = k_.add_dwords(tab1);
  } else if (c.bits == 4 || c.bits == 2) {
    c_mask = splat(c.bits == 4 ? 0xf : 0x3);
  }

  // Groups, blocks and tails.
  const int64_t NG = div_up(c.dim, c.E);
  const int64_t NGc = c.dim / c.E;  // complete groups
  const int BG = c.BV / c.G;        // groups per block
  const int64_t nU = NGc / BG;      // uniform (complete) blocks
  const int64_t R = NG - nU * BG;   // groups of the last block (0: none)
  const int64_t tail_elems = c.dim - (NG - 1) * c.E;  // elements of the last group
  // lanes of the partial last input vector (float rows) and output vector
  const int64_t last_vec_lanes = c.dim % c.V;
  if (!c.z && (c.rt == QJ_F32 || c.out == QJ_F32) && last_vec_lanes) {
    std::vector<uint32_t> m(8, 0);
    for (int i = 0; i < last_vec_lanes; ++i) m[i] = 0xffffffffu;
    c_ftail = c_otail = k_.add_dwords(m, 32);
  }

  const Gp saved[6] = {rbx, rbp, r12, r13, r14, r15};
  for (const Gp& g : saved) a_.push(g);
  passes_ = c.next_bag && nU + (R > 0 ? 1 : 0) > 1 ? static_cast<int>(nU + (R > 0 ? 1 : 0)) : 0;
  scale_slot_ = passes_ ? 40 : 24;  // MX rows: an unfolded block's scale bits (emit_mx_block)
  // MX rows: after the slot, the table of folded scales X' (emit_mx_group), entries 0..hi
  xtab_off_ = scale_slot_ + 16;
  const int xtab_bytes = c.mx ? (mx_fold(c.mx).hi + 1 + 15) / 16 * 64 : 0;
  // (a multiple of 16 with the six pushes and the return)
  const int frame = c.mx ? xtab_off_ + xtab_bytes : scale_slot_;
  a_.sub(rsp, frame);
  if (xtab_bytes) {  // the table from the constant pool to the stack, a vector at a time
    const int vb = c.z ? 64 : 32;
    for (int o = 0; o < xtab_bytes; o += vb) {
      a_.vmovups(v(c.rT), k_.at(c_xtab + o));
      a_.vmovups(ptr(rsp, xtab_off_ + o), v(c.rT));
    }
  }

  if (c.z) {
    // k1: input tail (bytes of the last fused group, 16-bit elements, or fp32 lanes); k2: output
    uint32_t kin = 0;
    if (c.bits) {
      int nb = static_cast<int>(div_up(tail_elems * c.bits, 8));
      if (nb < c.Bg) kin = (1u << nb) - 1;
    } else if (last_vec_lanes) {
      kin = (1u << last_vec_lanes) - 1;
    }
    uint32_t kout = last_vec_lanes ? (1u << last_vec_lanes) - 1 : 0xffff;
    if (c.bits && tail_elems % c.V) kout = (1u << (tail_elems % c.V)) - 1;
    a_.mov(eax, kin);
    a_.kmovw(k1, eax);
    a_.mov(eax, kout);
    a_.kmovw(k2, eax);
  }
  if (c.mx == QJ_MXFP8_E4M3) {
    // NaN-code test (emit_mx_group): rM = 0x7f bytes, rB = all ones; the decode's 0x87F00000
    // mask in rBs (a register operand: the memory form's load per 16 codes cost DRAM-resident
    // rows, measured with the fp16 form)
    if (c.z) {
      a_.vmovdqu32(zmm(c.rM), k_.at(c_b7f));
      a_.vmovdqu32(zmm(c.rBs), k_.at(c_e4m3));
      a_.mov(eax, -1);
      a_.kmovq(k5, rax);  // bytes 0-31 (an odd block's test, emit_row)
    } else {
      a_.vmovdqu(ymm(c.rM), k_.at(c_b7f));
      a_.vmovdqu(ymm(c.rBs), k_.at(c_e4m3));
    }
    all_ones(c.rB);
  }
  if (c_mask >= 0) {
    if (c.z || c.mx)
      a_.vmovups(v(c.rM), k_.at(c_mask));  // the 16-entry float table (ymm: its first 8)
    else
      a_.vpbroadcastd(v(c.rM), k_.at(c_mask));
  }
  if (c_mask1 >= 0) a_.vmovups(v(c.rM1), k_.at(c_mask1));

  a_.mov(rsi, ARG(table));
  a_.mov(rdx, ARG(indices));
  a_.mov(r11, ARG(row_stride));
  a_.mov(r12, ARG(prefetch_limit));
  a_.mov(r13, ARG(weights));
  a_.mov(r14, ARG(remap));
  a_.mov(rbx, ARG(out));
  a_.mov(rbp, ARG(count));
  a_.mov(r9, ARG(offsets));
  a_.mov(qword_ptr(rsp), r9);
  a_.mov(r8, ARG(index_begin));
  const bool gather = c.pooling == QJ_POOL_NONE;

  Label l_bag = a_.newLabel();
  a_.bind(l_bag);
  // bag bounds: rax = start, r8 = end
  if (gather) {
    a_.mov(rax, r8);
    a_.lea(r8, ptr(rax, 1));
  } else if (c.lengths) {
    a_.mov(rax, r8);
    a_.mov(r9, qword_ptr(rsp));
    if (c.osz == 4)
      a_.mov(r10d, dword_ptr(r9));
    else
      a_.mov(r10, qword_ptr(r9));
    a_.lea(r8, ptr(rax, r10));
    a_.add(r9, c.osz);
    a_.mov(qword_ptr(rsp), r9);
  } else {
    a_.mov(r9, qword_ptr(rsp));
    if (c.osz == 4) {
      a_.mov(eax, dword_ptr(r9));
      a_.mov(r8d, dword_ptr(r9, 4));
    } else {
      a_.mov(rax, qword_ptr(r9));
      a_.mov(r8, qword_ptr(r9, 8));
    }
    a_.add(r9, c.osz);
    a_.mov(qword_ptr(rsp), r9);
  }
  if (c.positional) {
    a_.mov(r13, ARG(weights));
    a_.mov(r10, rax);
    a_.shl(r10, 2);
    a_.sub(r13, r10);
  }
  if (passes_) {  // the next bag's rows from its first, one at the first row step
    a_.mov(qword_ptr(rsp, 24), 1);
    a_.mov(qword_ptr(rsp, 32), r8);
  }

  // Column blocks: the first (uniform) block inline, with the prefetches; the other uniform blocks
  // in a run-time loop (r15 = the block's byte offset in the row); the last, partial block inline.
  const int64_t block_elems = static_cast<int64_t>(BG) * c.E;
  if (nU >= 1) emit_block(false, 0, BG, block_elems, true);
  if (c.mx) {  // MX rows use r15 for the scale: every block inline
    for (int64_t b = 1; b < nU; ++b) emit_block(false, b * BG, BG, block_elems, false);
  } else if (nU == 2) {
    emit_block(false, BG, BG, block_elems, false);
  } else if (nU > 2) {
    Label l_blk = a_.newLabel();
    a_.mov(r15, c.bits ? BG * c.Bg : block_elems * c.eb);
    a_.mov(qword_ptr(rsp, 8), static_cast<int32_t>(block_elems * c.out_bytes));
    a_.mov(qword_ptr(rsp, 16), nU - 1);
    a_.bind(l_blk);
    emit_block(true, 0, BG, block_elems, false);
    a_.add(r15, c.bits ? BG * c.Bg : block_elems * c.eb);
    a_.add(qword_ptr(rsp, 8), static_cast<int32_t>(block_elems * c.out_bytes));
    a_.dec(qword_ptr(rsp, 16));
    a_.jnz(l_blk);
  }
  if (R > 0) emit_block(false, nU * BG, static_cast<int>(R), c.dim - nU * BG * c.E, nU == 0);

  a_.add(rbx, ARG(out_stride));
  a_.dec(rbp);
  a_.jnz(l_bag);

  a_.add(rsp, frame);
  a_.vzeroupper();
  for (int i = 5; i >= 0; --i) a_.pop(saved[i]);
  a_.ret();

  for (const UnfoldedStub& us : unfolded_stubs_) {  // (before the E8M0 stubs: these add some)
    a_.bind(us.go);
    emit_mx_block(us.g, us.acc0, us.set, false);
    a_.jmp(us.back);
  }
  for (const E8m0Stub& st : stubs_) {
    a_.bind(st.nan);
    a_.mov(r15d, 0x7fc00000);
    a_.jmp(st.back);
    a_.bind(st.zero);
    a_.mov(r15d, 0x00400000);  // 2^-127, an fp32 subnormal
    a_.jmp(st.back);
  }
  for (const NanCodeStub& ns : nan_stubs_) {  // E4M3 rows with NaN codes (r9: the row)
    a_.bind(ns.go);
    for (const auto& [base, acc0] : ns.blocks) {
      for (int q = 0; q < c.G; ++q) {
        a_.vpmovzxbd(v(c.rT), ptr(r9, static_cast<int32_t>(base + q * c.V)));
        if (c.z) {
          a_.vpcmpeqd(k3, v(c.rT), k_.at(c_d7f));
          a_.vpcmpeqd(k4, v(c.rT), k_.at(c_dff));
          a_.korw(k3, k3, k4);
          a_.k(k3).vmovups(v(acc0 + q), k_.at(c_qnan));
        } else {
          a_.vpcmpeqd(v(c.rT2), v(c.rT), k_.at(c_d7f));
          a_.vpcmpeqd(v(c.rT), v(c.rT), k_.at(c_dff));
          a_.vpor(v(c.rT), v(c.rT), v(c.rT2));
          a_.vblendvps(v(acc0 + q), v(acc0 + q), k_.at(c_qnan), v(c.rT));
        }
      }
    }
    all_ones(c.rB);  // the running minimum starts again
    a_.jmp(ns.back);
  }

  a_.align(AlignMode::kData, 64);
  a_.bind(k_.pool);
  a_.embed(k_.bytes.data(), k_.bytes.size());
  return true;
}

// The index-range check: rax = 1 if some index (unsigned) >= limit.
bool Emitter::emit_check_kernel(int isz) {
  const Cfg& c = c_;
  k_.pool = a_.newLabel();
  Label l_loop = a_.newLabel(), l_tail = a_.newLabel(), l_tail_loop = a_.newLabel(), l_end = a_.newLabel(),
        l_bad = a_.newLabel();
  const int per = (c.z ? 64 : 32) / isz;  // indices per vector
  a_.mov(rsi, qword_ptr(rdi, offsetof(EmbCheckArgs, indices)));
  a_.mov(rcx, qword_ptr(rdi, offsetof(EmbCheckArgs, n)));
  a_.mov(rdx, qword_ptr(rdi, offsetof(EmbCheckArgs, limit)));
  a_.dec(rdx);  // limit - 1 (limit >= 1 is guaranteed by the driver)
  // v0..v3: running unsigned maxima (AVX-512, AVX2 int32) or "bad" masks (AVX2 int64)
  const bool cmp_mode = !c.z && isz == 8;
  for (int i = 0; i < 4; ++i) zero(i);
  if (cmp_mode) {
    // v5 = (limit - 1) ^ sign, v6 = sign
    a_.mov(rax, static_cast<int64_t>(0x8000000000000000ull));
    a_.vmovq(x(6), rax);
    a_.vpbroadcastq(v(6), x(6));
    a_.vmovq(x(5), rdx);
    a_.vpbroadcastq(v(5), x(5));
    a_.vpxor(v(5), v(5), v(6));
  }
  a_.xor_(eax, eax);
  a_.cmp(rcx, 4 * per);
  a_.jb(l_tail);
  a_.bind(l_loop);
  for (int u = 0; u < 4; ++u) {
    Mem m = ptr(rsi, u * (c.z ? 64 : 32));
    if (cmp_mode) {
      a_.vpxor(v(4), v(6), m);
      a_.vpcmpgtq(v(4), v(4), v(5));
      a_.vpor(v(u), v(u), v(4));
    } else if (isz == 4) {
      if (c.z)
        a_.vpmaxud(v(u), v(u), m);
      else
        a_.vpmaxud(v(u), v(u), m);
    } else {
      a_.vpmaxuq(v(u), v(u), m);
    }
  }
  a_.add(rsi, 4 * (c.z ? 64 : 32));
  a_.sub(rcx, 4 * per);
  a_.cmp(rcx, 4 * per);
  a_.jae(l_loop);
  a_.bind(l_tail);
  // scalar tail
  a_.test(rcx, rcx);
  a_.jz(l_end);
  a_.bind(l_tail_loop);
  if (isz == 4)
    a_.mov(r8d, dword_ptr(rsi));
  else
    a_.mov(r8, qword_ptr(rsi));
  a_.cmp(r8, rdx);
  a_.ja(l_bad);
  a_.add(rsi, isz);
  a_.dec(rcx);
  a_.jnz(l_tail_loop);
  a_.bind(l_end);
  // reduce the vectors
  if (cmp_mode) {
    a_.vpor(v(0), v(0), v(1));
    a_.vpor(v(2), v(2), v(3));
    a_.vpor(v(0), v(0), v(2));
    a_.vptest(v(0), v(0));
    a_.jnz(l_bad);
  } else {
    if (isz == 4) {
      a_.vpmaxud(v(0), v(0), v(1));
      a_.vpmaxud(v(2), v(2), v(3));
      a_.vpmaxud(v(0), v(0), v(2));
      // broadcast limit-1 and compare: any lane > limit-1 (unsigned) <=> max(lane, limit-1) != limit-1
      a_.vmovd(x(4), edx);
      a_.vpbroadcastd(v(4), x(4));
      a_.vpmaxud(v(0), v(0), v(4));
      if (c.z) {
        a_.vpcmpd(k1, v(0), v(4), 4);  // NE
        a_.kortestw(k1, k1);
      } else {
        a_.vpcmpeqd(v(0), v(0), v(4));
        a_.vpcmpeqd(v(5), v(5), v(5));
        a_.vpxor(v(0), v(0), v(5));
        a_.vptest(v(0), v(0));
      }
    } else {
      a_.vpmaxuq(v(0), v(0), v(1));
      a_.vpmaxuq(v(2), v(2), v(3));
      a_.vpmaxuq(v(0), v(0), v(2));
      a_.vpbroadcastq(v(4), rdx);
      a_.vpmaxuq(v(0), v(0), v(4));
      a_.vpcmpq(k1, v(0), v(4), 4);
      a_.kortestb(k1, k1);
    }
    a_.jnz(l_bad);
  }
  a_.vzeroupper();
  a_.ret();
  a_.bind(l_bad);
  a_.mov(eax, 1);
  a_.vzeroupper();
  a_.ret();
  return true;
}

bool emit_emb(const KernelKey& key, Assembler& a, std::string* why) {
  if (key.flags & kEmbCheck) {
    if (key.isa < QJ_ISA_AVX2 || (key.b_type != 32 && key.b_type != 64)) {
      *why = "index check needs avx2 and 32/64-bit indices";
      return false;
    }
    Cfg c;
    c.z = key.isa >= QJ_ISA_AVX512;
    c.V = c.z ? 16 : 8;
    c.regs = c.z ? 32 : 16;
    Emitter e(a, c);
    return e.emit_check_kernel(key.b_type / 8);
  }
  Cfg c;
  if (!make_cfg(key, &c, why)) return false;
  Emitter e(a, c);
  return e.emit_bag_kernel();
}

std::string name_emb(const KernelKey& k) {
  const char* isa = isa_suffix(k.isa);
  char buf[200];
  if (k.flags & kEmbCheck) {
    std::snprintf(buf, sizeof buf, "emb_check_i%d__%s", k.b_type, isa);
    return buf;
  }
  const char* pool = k.param[1] == QJ_POOL_SUM ? "sum" : k.param[1] == QJ_POOL_MEAN ? "mean" : "gather";
  std::string extra;
  if (k.flags & kEmbPositional)
    extra += "_pw";
  else if (k.flags & kEmbWeighted)
    extra += "_w";
  if (k.flags & kEmbRemap) extra += "_remap";
  if (k.flags & kEmbSbFirst) extra += "_sbf";
  std::string pf;
  if (k.param[2]) {
    static const char* hints[4] = {"t0", "t1", "t2", "nta"};
    pf = "_pf" + std::to_string(k.param[2]) + hints[k.param[4] & 3] + (k.param[5] & 1 ? "nb" : "") +
         (k.param[5] & 2 ? "bp" : "");
  }
  std::snprintf(buf, sizeof buf, "emb_%s_i%d_%c%d_%s%s_%s_d%u_b%u%s__%s",
                qj_dtype_name(static_cast<qj_dtype>(k.a_type)), k.b_type,
                (k.flags & kEmbLengths) ? 'l' : 'o', (k.flags & kEmbOffsets64) ? 64 : 32, pool,
                extra.c_str(), qj_dtype_name(static_cast<qj_dtype>(k.c_type)), k.param[0], k.param[3],
                pf.c_str(), isa);
  return buf;
}

}  // namespace

int emb_lanes(const KernelKey& key) { return key.isa >= QJ_ISA_AVX512 ? 16 : 8; }

int emb_group_vectors(const KernelKey& key) {
  switch (key.a_type) {
    case QJ_FUSED_4BIT: return 2;
    case QJ_FUSED_2BIT: return 4;
    case QJ_MXFP4_E2M1:
    case QJ_MXINT8:
    case QJ_MXFP8_E4M3:
    case QJ_MXFP8_E5M2: return key.isa >= QJ_ISA_AVX512 ? 2 : 4;  // one 32-element MX block
    default: return 1;
  }
}

int emb_max_block_vectors(const KernelKey& key) {
  const int g = emb_group_vectors(key);
  int n = accumulator_registers(key);
  if (key.isa >= QJ_ISA_AVX512 && n > 24) n = 24;
  return n / g * g;
}

const KernelFamily& embedding_bag_family() {
  static const KernelFamily f{emit_emb, name_emb};
  return f;
}

}  // namespace qj
