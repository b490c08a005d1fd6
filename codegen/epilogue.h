// The output stage emitter shared by every GEMM family (integer, INT4, float and MX weights).
//
// Given one accumulator vector (int32 exact sums, or fp32 when the family accumulates in float)
// for row `row` and columns [j*lanes, (j+1)*lanes) of the current panel, it emits the exact
// arithmetic of docs/kernel-contract.md and the store, in the generated code itself:
//   f = float(acc) [* row_scale[row]]; y = fma(f, mult[col], bias[col]) or f * mult[col];
//   float out: relu, beta, store (bf16 by round-to-nearest-even);
//   u8/s8 out: clamp to [q_lo - zp, q_hi - zp], round half even, + zero point (ReLU at the
//   zero point folded into q_lo). Rounding is monotone and keeps the integer bounds, so this is
//   exactly saturate(round(y) + zp) with one clamp fewer;
//   s32 out: store acc as is.
// key.epilogue bit 0 (kEpiBoundedY, u8/s8 out): the plan has proved |y| < 2^30 for every input
//   (from K, the value ranges, the multipliers and the bias), so the same result takes one
//   instruction fewer: round half even, add the zero point, raise to the lower bound in int32,
//   and let a saturating narrowing store apply the upper bound (vpmovusdb / vpmovsdb).
// Whole u8/s8 rows of four zmm vectors (64 columns, packed_rows): the four rounded int32 vectors
//   are narrowed together by saturating packs (vpackssdw, + zero point with vpaddsw, ReLU bound
//   with vpmaxsw, vpackuswb / vpacksswb), put back in column order by one vpermd and stored with
//   one 64-byte store: the same bytes (each saturation is monotone and the bounds lie inside the
//   int16 range), 1.2 instructions fewer per vector.
// Constants come from an EpilogueConsts block inside the kernel's argument struct.
#pragma once
#include <asmjit/x86.h>

#include <cstdint>

#include "codegen/simd.h"
#include "src/core/kernel_key.h"

namespace qj::cg {

constexpr uint32_t kEpiBoundedY = 1;

// Per-call constants the epilogue reads (embedded in each family's argument struct).
struct EpilogueConsts {
  int32_t c_zp;        // output zero point (u8/s8)
  int32_t q_lo, q_hi;  // saturation bounds, ReLU folded into q_lo
  float f_lo, f_hi;    // q_lo - c_zp, q_hi - c_zp (the bounds before the zero point is added)
  float beta;          // C = y + beta * C (f32 output)
  float zero;          // 0.0f for ReLU
  int32_t c_zp_w;      // c_zp in both 16-bit halves (the packed u8 / s8 row store)
  int32_t tail_mask[16];  // AVX2: -1 for the live lanes of a partial vector (set per kernel call)
  int32_t q_lo_w;      // q_lo in both 16-bit halves (the packed u8 / s8 row store, ReLU)
  int32_t bf16_quiet = 0x00400000;  // a NaN's quiet bit (the bf16 store, zmm)
  int32_t hi16 = -65536;            // 0xffff0000 (the bf16 store, zmm)
  int32_t pad[1];
};
static_assert(sizeof(EpilogueConsts) == 112);

struct EpilogueRegs {
  asmjit::x86::Gp consts;     // -> EpilogueConsts
  asmjit::x86::Gp c_row;      // C + row * ldc + panel column offset (bytes)
  asmjit::x86::Gp mult;       // per-column fp32 multipliers, at this panel
  asmjit::x86::Gp bias;       // per-column fp32 bias, at this panel (if key.has_bias)
  asmjit::x86::Gp row_scale;  // per-row fp32 scale of this tile (if key.has_row_scale)
  asmjit::x86::Gp tmp;        // scratch GPR
  int t0, t1;                 // scratch vector register indices
  // Kernels of one vector of columns per call may keep its constants in vector registers for
  // the whole call (emit_resident_consts): these index them, -1 where the output stage reads
  // memory instead (the multipliers at `mult`, the bias at `bias`, the zero point and the lower
  // bound of a bounded u8 / s8 output as embedded broadcasts from `consts`).
  int mult_v = -1, bias_v = -1, zp_v = -1, lo_v = -1;
  // Narrow-N tiles (zmm only; N = narrow_n, 4 or 8): one vector holds 16 / N rows x N columns,
  // lane l in row narrow_lane_row(N, l), column narrow_lane_col(N, l) (the layout the narrow
  // kernel's pair reduction leaves; codegen/gemm_int). The store transposes to rows: row i of
  // the vector goes to c_row + i * ldc (ldc1 = ldc, ldc3 = 3 * ldc). `perm` labels the
  // constants emit_narrow_consts placed in the code. f32 without beta, s32, u8 and s8 outputs.
  int narrow_n = 0;
  bool narrow_compact = false;  // C rows are contiguous (ldc = N elements): one store per vector
  // The vector's lanes are already in row order (lane l: row l / N, column l % N; the narrow
  // kernel's row-lane variant): the stores permute nothing and `perm` is unused.
  bool narrow_rows = false;
  asmjit::x86::Gp ldc1, ldc3;
  asmjit::Label perm;
  // Packed u8 / s8 rows (zmm, four vectors per row; see emit_panel_end): the dword permutation
  // emit_pack_consts placed in the code. Unset (invalid label): one store per vector.
  asmjit::Label pack_perm;
};

// Whether emit_panel_end stores whole u8 / s8 rows of four zmm vectors with one 64-byte store
// (then the kernel must emit_pack_consts after its code, binding r.pack_perm).
bool packed_rows(const Simd& s, const KernelKey& key, int nrv);
void emit_pack_consts(asmjit::x86::Assembler& a, const EpilogueRegs& r);
// The u8 / s8 output of one whole row of 64 columns (int32 accumulators acc..acc+3, zmm) by the
// packed rows' stage (packed_rows); no row scale. r.t0 and r.t1 are clobbered.
void emit_output_row64(asmjit::x86::Assembler& a, const Simd& s, const KernelKey& key, const EpilogueRegs& r,
                       int acc);

// The narrow-N vector layout: 128-bit chunk q of lane l = 4 q + e belongs to row pair
// q / (N / 2); within the pair, chunk q % (N / 2) holds columns 2 (q % (N / 2)) + {0, 1} of its
// two rows as [row 0 col 0, row 0 col 1, row 1 col 0, row 1 col 1].
inline int narrow_lane_row(int n, int l) { return 2 * ((l / 4) / (n / 2)) + (l % 4) / 2; }
inline int narrow_lane_col(int n, int l) { return 2 * ((l / 4) % (n / 2)) + l % 2; }

// The transposition constants of narrow-N stores (bind r.perm to them), emitted after the code.
void emit_narrow_consts(asmjit::x86::Assembler& a, const EpilogueRegs& r);

// Bytes per output element for key.c_type.
int out_elem_bytes(const KernelKey& key);

// Every GEMM kernel saves the System V callee-saved registers it uses (rbx, rbp, r12-r15) on
// entry and restores them (after vzeroupper) on return.
void emit_save_callee_regs(asmjit::x86::Assembler& a);
void emit_restore_and_return(asmjit::x86::Assembler& a);

// The end of one panel, shared by the GEMM families: the output stage of the mr x nrv tile of
// accumulators (registers acc, acc+1, ... row-major), storing only key.n_tail columns when this is
// the partial last panel, then the step to the next panel and the loop back to `l_panel`.
// Register convention (docs/kernel-contract.md): rcx = C of this panel, rbx = C row (scratch),
// rbp = byte offset of the panel in the per-column arrays, r9 = panels left; `ldc` and
// `last_is_tail` are int64 fields at the given offsets of the argument struct at rdi.
struct PanelEnd {
  int mr = 0, nr = 0, nrv = 0;
  int acc = 0;                // first accumulator register
  bool acc_is_float = false;
  int32_t ldc_off = 0, last_is_tail_off = 0;
  asmjit::Label l_panel;
};
void emit_panel_end(asmjit::x86::Assembler& a, const Simd& s, const KernelKey& key,
                    const EpilogueRegs& r, const PanelEnd& pe);

// Loads the constants of the output stage of the one zmm vector of columns at j = 0 into vector
// registers from `first` on, at most `count` of them, in the order multipliers, bias, zero point,
// lower bound (those the stage uses), and records them in r; returns how many it took. For
// kernels that run many rows of one vector of columns per call: each constant read from memory
// is a load per row, and on Zen 5 the loads bound such a kernel (156800 x 16 x 36, u8 C: 13
// loads a row against 9 multiplies; the four resident took 0.79 of the time, in one process).
int emit_resident_consts(asmjit::x86::Assembler& a, const Simd& s, const KernelKey& key, EpilogueRegs& r,
                         int first, int count);

// Emits the output stage for one vector. `lanes` is the number of live columns (== s.lanes32
// for a full vector; fewer for the tail of the last panel; the store is masked to them).
void emit_output_vec(asmjit::x86::Assembler& a, const Simd& s, const KernelKey& key,
                     const EpilogueRegs& r, int acc, bool acc_is_float, int row, int j, int lanes);

}  // namespace qj::cg
