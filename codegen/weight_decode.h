// Weight decoders shared by the decoded-weight GEMM microkernels (codegen/gemm_int): S4 and U4,
// and the integer-exact OCP MX element types MXFP4 (vpshufb or, with VBMI, vpermb LUT to 2v + 12),
// MXFP6 E2M3 (vpermb 64-entry LUT to 8v + 60, or without VBMI two vpshufb tables of the 32
// magnitudes and a masked blend for the sign) and MXINT8 (code ^ 0x80 = q + 128, split into
// nibbles below VNNI); and the int16-pair decoders (emit_decode16) of MXFP6 E3M2 (64-word table)
// and BDR MX9 / MX6 / MX4 (int8 sign extension, MX9 doubling per flag bit).
//
// The contract between a decoder and the kernel that calls it:
//  - The packed panel is a sequence of *steps*. One step holds bytes_per_col_step bytes for each
//    of the nr columns and covers k_per_step consecutive values of K per column. The bytes of a
//    step for the column vector j (lanes32 columns) start at  step_base + j * bytes_per_col_step *
//    lanes32; how they are arranged inside is the decoder's business (documented per type in
//    src/ops/int_weights.h).
//  - emit_decode turns those bytes into n_out = k_per_step / 4 vectors of byte *quads*: output o
//    holds, in the dword lane of column c, the 4 decoded values of K = k0 + 4o .. k0 + 4o + 3 (the
//    vpdpbusd layout).
//  - Decoded bytes are UNSIGNED, d = q + offset in [0, 255], where q is the integer the reference
//    multiplies (src/ref). The kernel uses them as the unsigned operand (vpdpbusd / vpmaddubsw)
//    with A as the signed one, and removes offset (and any zero point) with a row-sum correction.
//    A decoder whose natural output is signed (an FP4 LUT to int8, say) adds its offset in the
//    LUT for free.
//  - The exact non-VNNI path multiplies by vpmaddubsw (pairs of d * a summed in s16, saturating),
//    adds s16_terms such products of consecutive outputs in s16, and widens the sum by vpmaddwd
//    (with ones, or 2^hi_shift for the outputs o >= a_quads). With |a| <= 128 that is exact while
//    s16_terms * 2 * 128 * max d < 2^15: 4-bit types add both quads (d <= 15), E2M3 takes one
//    product at a time (d <= 120), and MXINT8 (d up to 255) has its own non-VNNI decoder that
//    splits each byte into nibbles (d = 16 hi + lo: outputs 0, 1 the low nibbles of quads 0, 1,
//    outputs 2, 3 the high ones, hi_shift 4). s16_terms = 0: no non-VNNI path.
//  - Output o multiplies the A quad o % a_quads of the step (a_quads = k_per_step / 4).
//  - Constants (masks, LUTs) live in n_consts vector registers loaded once per kernel by
//    emit_decoder_setup; emit_decode may also use n_temps scratch registers.
//  - Scaled outputs (scaled_shift > 0): when the kernel accumulates output o >= 1 in its own
//    accumulator set, the decoder may skip an unpacking shift and deliver d_o << (scaled_shift *
//    o) instead (still an unsigned byte); the kernel divides that set's int32 sum by
//    2^(scaled_shift * o) (an exact arithmetic shift while |sum| < 2^31). 4-bit types: the high
//    nibble masked in place is 16 * d, so decoding costs no shift-pipe uop at all.
#pragma once
#include <asmjit/x86.h>

#include <cstdint>

#include "codegen/simd.h"

namespace qj::cg {

struct DecoderInfo {
  bool ok = false;             // b_type has a decoder
  int k_per_step = 0;          // K values per column in one step
  int bytes_per_col_step = 0;  // packed bytes per column per step
  int n_out = 0;               // quad vectors produced per column vector (k_per_step / 4)
  int32_t offset = 0;          // decoded byte = q + offset
  int a_quads = 0;             // A quads per step (k_per_step / 4)
  int s16_terms = 0;           // non-VNNI: products added in s16 before widening (0: none)
  int hi_shift = 0;            // non-VNNI: outputs o >= a_quads weigh 2^hi_shift
  int n_consts = 0;            // vector registers of constants
  int n_temps = 0;             // scratch vector registers during emit_decode
  int scaled_shift = 0;        // > 0: emit_decode(scaled = true) is available (see above)
  int scaled_consts = 0;       // extra constant registers the scaled variant needs
  bool e8m0_scales = false;    // MX: one E8M0 byte per (block of 32 K = group, column), stored
                               // after the panel's steps (src/ops/int_weights.h kMx*); the kernel
                               // decodes them (codegen/gemm_int) and the plan's column multiplier
                               // carries 2^-int_shift
  bool needs_vbmi = false;     // uses vpermb (key flags bit 5 says the CPU has AVX512-VBMI)
  int zmm_consts = 0;          // int16 decoders: constants (temps: none) with 512-bit vectors
  bool fp6_dense = false;      // int16 decoders: E3M2 / MX6 panels of 6 bits per code (see
                               // emit_fp6_words)
  bool int16 = false;          // int16 pairs (E3M2, BDR MX9 / MX6 / MX4; see emit_decode16):
                               // output o holds, in the dword lane of column c, the signed int16
                               // q(k0 + 2o, c), q(k0 + 2o + 1, c) (+ offset: MX4 8, else 0);
                               // A is packed as s16 pairs. n_out = 4 per 8-K step.
};

// Constants live in the red zone of the (leaf) kernels, written once by the setup code:
// [rsp - 128, rsp - 64) tables for the decoders; the kernels' own constants above them.
constexpr int kRedZoneTable = -128;
// Writes n bytes (a multiple of 8, at most 128) to the red-zone table area; `tmp` is clobbered.
void store_red_zone_table(asmjit::x86::Assembler& a, const uint8_t* bytes, int n, const asmjit::x86::Gp& tmp);

// vbmi: the kernel may use AVX512-VBMI (zmm kernels on a CPU that has it): decoders that have a
// vpermb form use it (MXFP4: fewer uops, one constant register instead of two). vnni: the kernel
// multiplies by vpdpbusd (else by vpmaddubsw: MXINT8 then uses its nibble-split decoder). zmm:
// 512-bit vectors (E2M3 without VBMI: byte masks with zmm, vpblendvb with ymm).
// fp6_dense: MXFP6 E2M3 panels of the VNNI tier, 6 bits per code (see emit_fp6_unpack).
DecoderInfo decoder_info(int b_type, bool vbmi = false, bool vnni = true, bool zmm = true, bool fp6_dense = false);

struct DecodeRegs {
  int consts = 0;  // first of n_consts constant registers
  int temps = 0;   // first of n_temps scratch registers
  bool vbmi = false;  // as passed to decoder_info (zmm only)
  bool fp6_dense = false;  // as passed to decoder_info
  bool vnni = true;   // as passed to decoder_info
  // S4 / U4 on zmm, scaled outputs: each mask reads the packed bytes as its memory operand (two
  // loads of the same 64 bytes, one instruction fewer a vector: for the one-row kernel streaming
  // from DRAM, whose load ports are idle; from L2 / L3 the second load costs more than it saves)
  bool mem_operands = false;
};

// Loads the decoder's constants (once per kernel; n_consts, plus scaled_consts when `scaled`).
// `tmp` is a free general-purpose register.
void emit_decoder_setup(asmjit::x86::Assembler& a, const Simd& s, int b_type, const DecodeRegs& r,
                        const asmjit::x86::Gp& tmp, bool scaled = false);

// Decodes the step bytes of one column vector at `src` into vector registers out[0..n_out)
// (scaled: output o holds d_o << (scaled_shift * o); only when info.scaled_shift > 0).
void emit_decode(asmjit::x86::Assembler& a, const Simd& s, int b_type, const asmjit::x86::Mem& src,
                 const DecodeRegs& r, const int* out, bool scaled = false);

// E2M3 codes (one per byte, bits 6..7 zero) in c, without VBMI: zmm (AVX512BW) out = the tables'
// entry of the magnitude (tlo: 0..15, thi: 16..31, each 16 bytes in every 128-bit lane), under the
// sign neg - entry (bit4, sign: the byte constants 0x10, 0x20; masks k2, k3); ymm out = q = 8v
// from tables of |q| (c and t clobbered).
void emit_e2m3_bytes_zmm(asmjit::x86::Assembler& a, const asmjit::x86::Vec& out, const asmjit::x86::Vec& c,
                         const asmjit::x86::Vec& tlo, const asmjit::x86::Vec& thi, const asmjit::x86::Vec& bit4,
                         const asmjit::x86::Vec& sign, const asmjit::x86::Vec& neg);
void emit_e2m3_bytes_ymm(asmjit::x86::Assembler& a, const asmjit::x86::Vec& out, const asmjit::x86::Vec& c,
                         const asmjit::x86::Vec& t, const asmjit::x86::Vec& tlo, const asmjit::x86::Vec& thi);

// Dense FP6 (MXFP6 E2M3 panels of the VNNI tier, PackedWeights::fp6_dense): a vector of 64
// codes is 48 bytes, code i at bits [6i, 6i + 6) LSB first (MX.md's FP6 packing).
// emit_fp6_unpack_setup loads the constants idx and ctl (and, for the shuffle form, the word /
// byte masks k6 / k7); emit_fp6_unpack then puts code i in byte i of out, its bits 6..7 undefined
// (vpermb and vpermi2w lookups ignore them; others clear them). It reads 64 bytes at src (the
// last 16 are never used; packed buffers have 64 bytes of slack). Two forms:
//  - multishift (AVX512-VBMI): vpermb places bytes 6q..6q+5 in qword q, vpmultishiftqb moves bits
//    6j.. of the qword to byte j. 2 ops, the fewest: every zmm op counts when a decoded vector
//    feeds only mr vpdpbusd (measured on Zen 4, 4096 x 4096, M = 256: one byte per code 320 GOPS,
//    this 290, the shuffle form 280, a two-plane layout (nibbles + 2-bit crumbs, 3 ops) 260).
//    But vpmultishiftqb takes a vpdpbusd / FMA pipe slot: in the FMA-bound fp32 kernel
//    (codegen/gemm_float) it costs a quarter at M = 256, so there it serves tiles of <= 4 rows.
//    (Calls of many rows avoid the unpack in the int8 kernels altogether: the GEMM driver turns
//    each B block into one byte per code once per row block, GemmPlan::kernels_b8.)
//  - shuffle (AVX512BW; VNNI CPUs without VBMI, the fp32 kernel's large tiles):
//    vpermd puts bytes 12l..12l+11 in 128-bit lane l, vpshufb makes each dword [b0 b1 b1 b2] of
//    its 3-byte group, a shift by 4 of the odd words (k6) leaves c_2w | c_2w+1 << 6 in every word,
//    and a byte-masked move (k7) of the word shifted left by 2 puts c_2w+1 in the odd byte. 5 ops
//    (shuffle and shift pipes), `tmp` clobbered.
// The constant bytes of a form (idx and ctl); with the shuffle form ctl may stay in memory.
void fp6_unpack_tables(bool multishift, uint8_t idx[64], uint8_t ctl[64]);
// ctl: a register to load, or (shuffle form) none (asmjit::Operand()), the kernel's own copy.
void emit_fp6_unpack_setup(asmjit::x86::Assembler& a, bool multishift, const asmjit::x86::Vec& idx,
                           const asmjit::Operand& ctl, const asmjit::x86::Gp& tmp);
// ctl: a register (multishift form), or a register or 64-byte memory operand (shuffle form).
void emit_fp6_unpack(asmjit::x86::Assembler& a, bool multishift, const asmjit::x86::Vec& out,
                     const asmjit::x86::Mem& src, const asmjit::x86::Vec& idx, const asmjit::Operand& ctl,
                     const asmjit::x86::Vec& tmp);
// Bytes of one dense FP6 vector of 64 codes (the offset from one such vector to the next).
constexpr int kFp6VectorBytes = 48;

// Dense FP6 pair rows (kMx16 E3M2 / MX6 panels of the VNNI tier, PackedWeights::fp6_dense): pair
// row o of a column vector's step is 32 codes in bytes [24o, 24o + 24) of its 96 (code i of the
// row at bits [6i, 6i + 6)). emit_fp6_words puts code i in word i of out (dword lane c: codes 2c,
// 2c + 1, as vpmovzxbw of the byte layout) in one of the forms of Fp6Words below (vpermi2w reads
// bits 0..5 only; MX6's q is the signed form). A byte permute puts the two bytes holding code i in
// word i (vbmi: vpermb; else vpermd of the 128-bit lanes' dwords and vpshufb), then a per-word
// shift moves it to bits 0..5 (vpsrlvw) or 10..15 (vpsllvw; signed: and back, vpsraw 10): 2-4
// ops, no temporary. (vpmultishiftqb in place of the shift,
// on Zen 4, 4096 x 4096 E3M2: M = 1 70 against 74 GOPS, M = 4 153 against 176, M = 16 160
// against 187: it takes a multiply-pipe slot from vpdpwssd.)
// fp6_words_tables gives the constants: idx (vpermb bytes or vpermd dwords), shuf (vpshufb, without
// VBMI), cnt (the word shift counts); emit_fp6_words_setup loads them (shuf only without VBMI).
// What emit_fp6_words leaves in word i: kCode the code at bits 0..5 (bits 6..15 undefined),
// kSigned its 6-bit two's complement sign-extended, kTop the code at bits 10..15 (bits 0..9
// undefined: an arithmetic shift of the word, or of its dword, by 10 / 26 then sign-extends it).
enum class Fp6Words { kCode, kSigned, kTop };
void fp6_words_tables(bool vbmi, Fp6Words form, uint8_t idx[64], uint8_t shuf[64], uint8_t cnt[64]);
void emit_fp6_words_setup(asmjit::x86::Assembler& a, bool vbmi, Fp6Words form, const asmjit::x86::Vec& idx,
                          const asmjit::x86::Vec& shuf, const asmjit::x86::Vec& cnt, const asmjit::x86::Gp& tmp);
// src: the column vector's step (its first byte); reads 64 bytes from src + 24o.
void emit_fp6_words(asmjit::x86::Assembler& a, bool vbmi, Fp6Words form, const asmjit::x86::Vec& out,
                    const asmjit::x86::Mem& src, int o, const asmjit::x86::Vec& idx, const asmjit::x86::Vec& shuf,
                    const asmjit::x86::Vec& cnt);
// Bytes of one dense pair row (32 codes).
constexpr int kFp6PairRowBytes = 24;

// int16-pair decoders (info.int16): decodes pair row o (0..3) of the step bytes of one column
// vector at `src` into vector register `out` (one call per output, so the kernel can consume each
// decoded vector before the next is made: fewer live registers). Uses r.temps (n_temps) and the
// mask register k2 (AVX-512 MX9).
void emit_decode16(asmjit::x86::Assembler& a, const Simd& s, int b_type, const asmjit::x86::Mem& src,
                   int o, const DecodeRegs& r, int out);

}  // namespace qj::cg
