// Weight decoders (see weight_decode.h for the contract).
//
// S4 / U4 (layout kNibble): a step is 4 bytes per column; byte r holds u(k0 + r) in the low
// nibble and u(k0 + 4 + r) in the high nibble, u = q + 8 (S4) or q (U4). Decode of one vector:
//   lo = bytes & 0x0f            (one vpand, any vector pipe)
//   hi = (bytes >> 4) & 0x0f     (one 16-bit shift, the only shift-pipe uop, + one vpand)
// i.e. one shift-pipe uop per two quad vectors. On Zen 4 (measured: vpsrlw / vpshufb / vpermb zmm
// 1 per cycle; 8 vpdpbusd + 8 vpsrlw take 10 cycles, 8 vpdpbusd + 2 vpsrlw 8) shifts share pipes
// with vpdpbusd, so the decode costs about 1/(4 mr) of the multiply slots; vpand runs on all four
// pipes (2 zmm per cycle). Scaled variant (small mr, separate accumulators for the high quads):
//   hi16 = bytes & 0xf0 = 16 * u_hi, no shift at all.
// The packed bytes are loaded once (a zmm load is a full cycle of L1 bandwidth on Zen 4).
//
// MXFP4 (kMxNibble, same nibbles as S4, FP4 codes): each nibble goes through a 16-entry LUT.
// Measured on Zen 4 (zmm, 8 ops of each kind, in cycles: alone / mixed with 8 vpdpbusd):
// vpshufb, vpermb, vpmovzxbd 8 / 10.7 and 16 when mixed with each other (one shuffle unit);
// vpsrlw 8 / 10; vpandd, vpaddd 4 / 10; vpunpcklbw 5.3 / 8.4; vpmultishiftqb, vgf2p8affineqb,
// vmulps, vfmadd231ps 8 / 16 (they take the vpdpbusd pipes). So the LUT uops, not the multiplies,
// bound a GEMV: with VBMI (zmm, VNNI tier) vpermb indexes the raw byte for the low nibble (it
// reads index bits 0..5 only; the table holds the 16 entries 4 times) and the shifted word for
// the high nibble: 1 shift + 2 vpermb per 64 bytes, no vpand (a GEMV group of 32 K x 32 columns
// measured 31 cycles in L1 against 36 for the vpshufb form below).
#include "codegen/weight_decode.h"

#include <quantjit/quantjit.h>

#include <algorithm>
#include <cstring>

#include "codegen/mx_codes.h"

namespace qj::cg {

using namespace asmjit;
using namespace asmjit::x86;

DecoderInfo decoder_info(int b_type, bool vbmi, bool vnni, bool zmm, bool fp6_dense) {
  DecoderInfo d;
  d.a_quads = 2;  // every decoder's step is 8 K
  switch (b_type) {
    case QJ_S4:
    case QJ_U4:
      d.ok = true;
      d.k_per_step = 8;
      d.bytes_per_col_step = 4;
      d.n_out = 2;
      d.offset = b_type == QJ_S4 ? 8 : 0;
      d.s16_terms = 2;  // 2 * 2 * 15 * 128 < 2^15
      d.n_consts = 1;  // 0x0f bytes
      d.scaled_consts = 1;  // 0xf0 bytes
      d.n_temps = 0;
      d.scaled_shift = 4;
      break;
    case QJ_MXFP4_E2M1:
      // Nibbles as S4 (same step layout); each nibble is a code, mapped by vpshufb to 2v + 12.
      d.ok = true;
      d.k_per_step = 8;
      d.bytes_per_col_step = 4;
      d.n_out = 2;
      d.offset = 12;
      d.s16_terms = 2;  // d <= 24: two vpmaddubsw pairs per s16 lane stay below 2^15
      d.n_consts = vbmi ? 1 : 2;  // vbmi: the 64-entry table; else 0x0f bytes, the LUT per 128 bits
      d.e8m0_scales = true;
      break;
    case QJ_MXFP6_E2M3:
      // Quads of k0..k0+3 then k0+4..k0+7 per column vector, one code per byte (or, fp6_dense,
      // unpacked to that from 6 bits per code); vpermb with a 64-entry table gives 8v + 60 in
      // [0, 120]. Without VBMI (zmm, AVX512BW: VNNI CPUs such as Cascade Lake) two vpshufb tables
      // of the 32 magnitudes, the second and the sign applied under byte masks (see emit_decode):
      // 5 constants, 1 temporary.
      // fp6_dense (zmm): 6 bits per code (see emit_fp6_unpack): 2 more constants (the unpack's
      // idx and ctl), without VBMI a third (0x3f bytes: the vpshufb tables need bits 6..7 clear).
      fp6_dense = fp6_dense && zmm;
      d.ok = true;
      d.k_per_step = 8;
      d.bytes_per_col_step = fp6_dense ? 6 : 8;
      d.n_out = 2;
      d.offset = 60;
      d.s16_terms = 1;  // one vpmaddubsw pair: 2 * 120 * 128 < 2^15 (two would overflow)
      // AVX2 (ymm, no byte masks): the two tables of |q|, vpsignb and vpblendvb, then + 60: 3
      // constants, 2 temporaries.
      d.n_consts = vbmi ? 1 : (zmm ? 5 : 3);
      if (fp6_dense) d.n_consts += vbmi ? 2 : 3;
      d.n_temps = vbmi ? 0 : (zmm ? 1 : 2);
      d.e8m0_scales = true;
      break;
    case QJ_MXINT8:
      // Codes as bytes (as E2M3); d = code ^ 0x80 = q + 128 in [0, 255]. VNNI: one vpxord per
      // quad vector. Else d's nibbles, each exact in vpmaddubsw: outputs 0, 1 = d & 0x0f of quads
      // 0, 1; outputs 2, 3 = d >> 4 (weight 16).
      d.ok = true;
      d.k_per_step = 8;
      d.bytes_per_col_step = 8;
      d.n_out = vnni ? 2 : 4;
      d.offset = 128;
      d.s16_terms = vnni ? 0 : 2;  // 2 * 2 * 15 * 128 < 2^15
      d.hi_shift = vnni ? 0 : 4;
      d.n_consts = vnni ? 1 : 2;  // 0x80 bytes (and 0x0f bytes)
      d.e8m0_scales = true;
      break;
    case QJ_MXFP6_E3M2:
    case QJ_BDR_MX9:
    case QJ_BDR_MX6:
    case QJ_BDR_MX4:
      // int16 pairs from one byte per element (src/ops/mx16_weights.h, layout kMx16), or, E3M2 /
      // MX6 with fp6_dense (zmm), 6 bits (emit_fp6_words).
      d.ok = true;
      d.int16 = true;
      d.k_per_step = 8;
      d.fp6_dense = fp6_dense && zmm && (b_type == QJ_MXFP6_E3M2 || b_type == QJ_BDR_MX6);
      d.bytes_per_col_step = d.fp6_dense ? 6 : b_type == QJ_BDR_MX9 ? 9 : (b_type == QJ_BDR_MX4 ? 4 : 8);
      d.n_out = 4;
      // MX4: the nibble u = q + 8 is used as is; the kernel's row-sum correction (-8 * sum of A per
      // block, flags bit 2) removes the offset: one vpaddd per accumulator per block instead of a
      // vpsubw per decoded vector (M = 1 issues one multiply per decoded vector).
      d.offset = b_type == QJ_BDR_MX4 ? 8 : 0;
      d.s16_terms = 1;  // (not used: vpmaddwd is exact for any int16 pair)
      d.e8m0_scales = true;
      // E3M2: zmm two 32-word tables (vpermi2w); ymm the +-2^max(e-1,0) and hidden-bit pshufb
      // tables and the 0x0f / 0x03 masks, 2 temps. MX9 ymm: the word bit selector, 1 temp.
      // (zmm: E3M2 the two tables, MX4 the mask, no temps; see zmm_consts.)
      // MX4: the 0x000f words.
      d.n_consts = b_type == QJ_MXFP6_E3M2 ? 4 : (b_type == QJ_BDR_MX9 || b_type == QJ_BDR_MX4 ? 1 : 0);
      d.n_temps = b_type == QJ_MXFP6_E3M2 ? 2 : (b_type == QJ_BDR_MX9 ? 1 : 0);
      d.zmm_consts = b_type == QJ_MXFP6_E3M2 ? 2 : (b_type == QJ_BDR_MX4 ? 1 : 0);
      // Dense: the unpack's idx and cnt after the tables, and without VBMI its shuf.
      if (d.fp6_dense) d.zmm_consts += vbmi ? 2 : 3;
      break;
    default: break;
  }
  return d;
}

namespace {

void broadcast_dword(Assembler& a, const Simd& s, int reg, uint32_t v, const Gp& tmp) {
  a.mov(tmp.r32(), v);
  if (s.zmm) {
    a.vpbroadcastd(s.v(reg), tmp.r32());
  } else {
    a.vmovd(xmm(reg), tmp.r32());
    a.vpbroadcastd(s.v(reg), xmm(reg));
  }
}

}  // namespace

void store_red_zone_table(Assembler& a, const uint8_t* bytes, int n, const Gp& tmp) {
  for (int i = 0; i < n; i += 8) {
    uint64_t q;
    std::memcpy(&q, bytes + i, 8);
    a.mov(tmp, q);
    a.mov(qword_ptr(rsp, kRedZoneTable + i), tmp);
  }
}

void emit_decoder_setup(Assembler& a, const Simd& s, int b_type, const DecodeRegs& r, const Gp& tmp,
                        bool scaled) {
  switch (b_type) {
    case QJ_S4:
    case QJ_U4: {
      const uint32_t masks[2] = {0x0f0f0f0fu, 0xf0f0f0f0u};
      for (int i = 0; i < (scaled ? 2 : 1); ++i) {
        a.mov(tmp.r32(), masks[i]);
        if (s.zmm) {
          a.vpbroadcastd(s.v(r.consts + i), tmp.r32());
        } else {
          a.vmovd(xmm(r.consts + i), tmp.r32());
          a.vpbroadcastd(s.v(r.consts + i), xmm(r.consts + i));
        }
      }
      break;
    }
    case QJ_MXFP4_E2M1: {
      uint8_t lut[64];
      const int8_t* q = qj::cg::kFp4Ints.data();
      for (int i = 0; i < 64; ++i) lut[i] = static_cast<uint8_t>(q[i % 16] + 12);
      if (r.vbmi) {  // vpermb reads index bits 0..5: the 16 codes repeated 4 times
        store_red_zone_table(a, lut, 64, tmp);
        a.vmovdqu32(s.v(r.consts), zmmword_ptr(rsp, kRedZoneTable));
        break;
      }
      broadcast_dword(a, s, r.consts, 0x0f0f0f0fu, tmp);
      store_red_zone_table(a, lut, 16, tmp);
      if (s.zmm)
        a.vbroadcasti32x4(s.v(r.consts + 1), xmmword_ptr(rsp, kRedZoneTable));
      else
        a.vbroadcasti128(s.v(r.consts + 1), xmmword_ptr(rsp, kRedZoneTable));
      break;
    }
    case QJ_MXFP6_E2M3: {
      uint8_t lut[64];
      const int8_t* q = qj::cg::kE2m3Ints.data();
      if (!s.zmm) {
        // |q| of the magnitudes 0..15 and 16..31 (the positive codes), each 16-byte table in both
        // 128-bit lanes; then 60 bytes (see emit_decode).
        for (int i = 0; i < 32; ++i) lut[i] = static_cast<uint8_t>(q[i]);
        store_red_zone_table(a, lut, 32, tmp);
        a.vbroadcasti128(s.v(r.consts), xmmword_ptr(rsp, kRedZoneTable));
        a.vbroadcasti128(s.v(r.consts + 1), xmmword_ptr(rsp, kRedZoneTable + 16));
        broadcast_dword(a, s, r.consts + 2, 0x3c3c3c3cu, tmp);
        break;
      }
      for (int i = 0; i < 64; ++i) lut[i] = static_cast<uint8_t>(q[i] + 60);
      store_red_zone_table(a, lut, 64, tmp);
      if (r.vbmi) {
        a.vmovdqu32(s.v(r.consts), zmmword_ptr(rsp, kRedZoneTable));
        if (r.fp6_dense) emit_fp6_unpack_setup(a, true, s.v(r.consts + 1), s.v(r.consts + 2), tmp);
        break;
      }
      // 60 + |q| of the magnitudes 0..15 and 16..31 (the positive codes: the first 32 entries),
      // each 16-byte table in every 128-bit lane (vpshufb looks up within lanes); then the byte
      // constants 0x10 (magnitude bit 4), 0x20 (sign) and 120 (the negative side, 120 - d).
      a.vbroadcasti32x4(s.v(r.consts), xmmword_ptr(rsp, kRedZoneTable));
      a.vbroadcasti32x4(s.v(r.consts + 1), xmmword_ptr(rsp, kRedZoneTable + 16));
      broadcast_dword(a, s, r.consts + 2, 0x10101010u, tmp);
      broadcast_dword(a, s, r.consts + 3, 0x20202020u, tmp);
      broadcast_dword(a, s, r.consts + 4, 0x78787878u, tmp);
      if (r.fp6_dense) {
        emit_fp6_unpack_setup(a, false, s.v(r.consts + 5), s.v(r.consts + 6), tmp);
        broadcast_dword(a, s, r.consts + 7, 0x3f3f3f3fu, tmp);
      }
      break;
    }
    case QJ_MXINT8:
      broadcast_dword(a, s, r.consts, 0x80808080u, tmp);
      if (!r.vnni) broadcast_dword(a, s, r.consts + 1, 0x0f0f0f0fu, tmp);
      break;
    case QJ_MXFP6_E3M2: {
      const int16_t* q = qj::cg::kE3m2Ints.data();
      if (s.zmm) {
        // vpermi2w: index bit 5 (the sign) selects the second table (codes 32..63).
        for (int h = 0; h < 2; ++h) {
          uint8_t t[64];
          std::memcpy(t, q + 32 * h, 64);
          store_red_zone_table(a, t, 64, tmp);
          a.vmovdqu32(s.v(r.consts + h), zmmword_ptr(rsp, kRedZoneTable));
        }
        if (r.fp6_dense)
          emit_fp6_words_setup(a, r.vbmi, Fp6Words::kCode, s.v(r.consts + 2), s.v(r.consts + 4), s.v(r.consts + 3),
                               tmp);
      } else {
        // idx = code >> 2 & 15 = sign:e. pow[idx] = +-2^max(e-1, 0) (signed byte), hid[idx] = 4
        // for e >= 1 (hidden bit); value = vpmaddubsw(m | hid, pow) (see emit_decode16).
        uint8_t t[32];
        for (int i = 0; i < 16; ++i) {
          const int e = i & 7, p = e ? 1 << (e - 1) : 1;
          t[i] = static_cast<uint8_t>(static_cast<int8_t>(i & 8 ? -p : p));
          t[16 + i] = static_cast<uint8_t>(e ? 4 : 0);
        }
        store_red_zone_table(a, t, 32, tmp);
        a.vbroadcasti128(s.v(r.consts), xmmword_ptr(rsp, kRedZoneTable));
        a.vbroadcasti128(s.v(r.consts + 1), xmmword_ptr(rsp, kRedZoneTable + 16));
        broadcast_dword(a, s, r.consts + 2, 0x000f000fu, tmp);
        broadcast_dword(a, s, r.consts + 3, 0x00030003u, tmp);
      }
      break;
    }
    case QJ_BDR_MX4:
      broadcast_dword(a, s, r.consts, 0x000f000fu, tmp);
      break;
    case QJ_BDR_MX6:
      if (r.fp6_dense)
        emit_fp6_words_setup(a, r.vbmi, Fp6Words::kSigned, s.v(r.consts), s.v(r.consts + 2), s.v(r.consts + 1), tmp);
      break;
    case QJ_BDR_MX9:
      if (!s.zmm) {  // words 1 << w: the bit of word w of a 16-bit mask
        uint8_t t[32];
        for (int w = 0; w < 16; ++w) {
          const uint16_t b = static_cast<uint16_t>(1u << w);
          std::memcpy(t + 2 * w, &b, 2);
        }
        store_red_zone_table(a, t, 32, tmp);
        a.vmovdqu(s.v(r.consts), ymmword_ptr(rsp, kRedZoneTable));
      }
      break;
    default: break;
  }
}

void fp6_unpack_tables(bool multishift, uint8_t idx[64], uint8_t ctl[64]) {
  if (multishift) {
    for (int i = 0; i < 64; ++i) {
      idx[i] = static_cast<uint8_t>(i % 8 < 6 ? 6 * (i / 8) + i % 8 : 0);
      ctl[i] = static_cast<uint8_t>(6 * (i % 8));
    }
    return;
  }
  for (int l = 0; l < 4; ++l)
    for (int j = 0; j < 4; ++j) {
      // vpermd: lane l takes dwords 3l, 3l + 1, 3l + 2 (and 3l + 2 again)
      const uint32_t d = static_cast<uint32_t>(3 * l + std::min(j, 2));
      std::memcpy(idx + 16 * l + 4 * j, &d, 4);
      // vpshufb: dword j of a lane = bytes 3j, 3j + 1, 3j + 1, 3j + 2
      uint8_t* c = ctl + 16 * l + 4 * j;
      c[0] = static_cast<uint8_t>(3 * j), c[1] = c[2] = static_cast<uint8_t>(3 * j + 1);
      c[3] = static_cast<uint8_t>(3 * j + 2);
    }
}

void emit_fp6_unpack_setup(Assembler& a, bool multishift, const Vec& idx, const Operand& ctl, const Gp& tmp) {
  uint8_t ti[64], tc[64];
  fp6_unpack_tables(multishift, ti, tc);
  store_red_zone_table(a, ti, 64, tmp);
  a.vmovdqu32(idx, zmmword_ptr(rsp, kRedZoneTable));
  if (ctl.isReg()) {
    store_red_zone_table(a, tc, 64, tmp);
    a.vmovdqu32(ctl.as<Vec>(), zmmword_ptr(rsp, kRedZoneTable));
  }
  if (multishift) return;
  a.mov(tmp.r32(), 0xAAAAAAAAu);  // the odd words
  a.kmovd(k6, tmp.r32());
  a.mov(tmp, 0xAAAAAAAAAAAAAAAAull);  // the odd bytes
  a.kmovq(k7, tmp);
}

void emit_fp6_unpack(Assembler& a, bool multishift, const Vec& out, const Mem& src, const Vec& idx, const Operand& ctl,
                     const Vec& tmp) {
  Mem m = src;
  m.setSize(64);
  if (multishift) {
    a.vpermb(out, idx, m);
    a.emit(Inst::kIdVpmultishiftqb, out, ctl, out);
    return;
  }
  a.vpermd(out, idx, m);
  a.emit(Inst::kIdVpshufb, out, out, ctl);
  a.k(k6).vpsrlw(out, out, 4);  // odd words: c2 | c3 << 6 (bits 12..15 zero)
  a.vpsllw(tmp, out, 2);
  a.k(k7).vmovdqu8(out, tmp);  // odd bytes: the word's second code
}

void fp6_words_tables(bool vbmi, Fp6Words form, uint8_t idx[64], uint8_t shuf[64], uint8_t cnt[64]) {
  uint8_t src[64];  // byte i of the result: byte src[i] of the pair row
  for (int w = 0; w < 32; ++w) {
    const int b = 6 * w / 8, sh = 6 * w % 8;  // the code's first byte and bit
    // (b + 1 is byte 24 for w = 31: a byte of the next pair row, above the code)
    src[2 * w] = static_cast<uint8_t>(b), src[2 * w + 1] = static_cast<uint8_t>(b + 1);
    const uint16_t c = static_cast<uint16_t>(form == Fp6Words::kCode ? sh : 10 - sh);
    std::memcpy(cnt + 2 * w, &c, 2);
  }
  std::memset(shuf, 0, 64);
  if (vbmi) {
    std::memcpy(idx, src, 64);
    return;
  }
  // vpermd: 128-bit lane l (words 8l..8l+7, bytes 6l..6l+6) takes dwords d0 = 6l / 4 .. d0 + 3 of
  // the row; vpshufb then picks each word's two bytes within the lane.
  for (int l = 0; l < 4; ++l) {
    const int d0 = 6 * l / 4;
    for (int j = 0; j < 4; ++j) {
      const uint32_t d = static_cast<uint32_t>(d0 + j);
      std::memcpy(idx + 16 * l + 4 * j, &d, 4);
    }
    for (int j = 0; j < 16; ++j) shuf[16 * l + j] = static_cast<uint8_t>(src[16 * l + j] - 4 * d0);
  }
}

void emit_fp6_words_setup(Assembler& a, bool vbmi, Fp6Words form, const Vec& idx, const Vec& shuf, const Vec& cnt,
                          const Gp& tmp) {
  uint8_t t[3][64];
  fp6_words_tables(vbmi, form, t[0], t[1], t[2]);
  const Vec regs[3] = {idx, shuf, cnt};
  for (int i = 0; i < 3; ++i) {
    if (i == 1 && vbmi) continue;
    store_red_zone_table(a, t[i], 64, tmp);
    a.vmovdqu32(regs[i], zmmword_ptr(rsp, kRedZoneTable));
  }
}

void emit_fp6_words(Assembler& a, bool vbmi, Fp6Words form, const Vec& out, const Mem& src, int o, const Vec& idx,
                    const Vec& shuf, const Vec& cnt) {
  Mem m = src;
  m.setSize(64);
  m.addOffset(o * kFp6PairRowBytes);
  if (vbmi) {
    a.vpermb(out, idx, m);
  } else {
    a.vpermd(out, idx, m);
    a.vpshufb(out, out, shuf);
  }
  if (form == Fp6Words::kCode) {
    a.vpsrlvw(out, out, cnt);
    return;
  }
  a.vpsllvw(out, out, cnt);  // the code to bits 10..15
  if (form == Fp6Words::kSigned) a.vpsraw(out, out, 10);
}

void emit_e2m3_bytes_zmm(Assembler& a, const Vec& out, const Vec& c, const Vec& tlo, const Vec& thi,
                         const Vec& bit4, const Vec& sign, const Vec& neg) {
  // vpshufb reads the code's bits 0..3 (bit 7 is 0): the low table's entry, replaced under the
  // mask of bit 4 by the high table's; under the mask of bit 5 (the sign) neg - entry.
  a.vpshufb(out, tlo, c);
  a.vptestmb(k2, c, bit4);
  a.k(k2).vpshufb(out, thi, c);
  a.vptestmb(k3, c, sign);
  a.k(k3).vpsubb(out, neg, out);
}

void emit_e2m3_bytes_ymm(Assembler& a, const Vec& out, const Vec& c, const Vec& t, const Vec& tlo,
                         const Vec& thi) {
  // vpshufb reads the code's bits 0..3 (bit 7 is 0) in the tables of |q| of the magnitudes 0..15
  // and 16..31; vpsignb negates both where bit 5 (the sign, moved to bit 7 by a 16-bit shift of
  // 2: the bits crossing from the lower byte are its bits 6..7, 0) is set (it zeroes where the
  // shifted code is 0: code 0, q = 0); vpblendvb takes the high table's where bit 4 (bit 7 after
  // the byte-wise doubling) is set.
  a.vpshufb(out, tlo, c);
  a.vpshufb(t, thi, c);
  a.vpsllw(c, c, 2);
  a.vpsignb(out, out, c);
  a.vpsignb(t, t, c);
  a.vpaddb(c, c, c);
  a.vpblendvb(out, out, t, c);
}

void emit_decode16(Assembler& a, const Simd& s, int b_type, const Mem& src, int o, const DecodeRegs& r,
                   int out) {
  const Vec v = s.v(out);
  Mem codes = src;  // the 2 * lanes bytes of pair row o
  codes.addOffset(o * s.bytes / 2);
  codes.setSize(s.bytes / 2);
  if (r.fp6_dense && s.zmm && (b_type == QJ_MXFP6_E3M2 || b_type == QJ_BDR_MX6)) {
    const bool e3m2 = b_type == QJ_MXFP6_E3M2;
    const int c0 = r.consts + (e3m2 ? 2 : 0);  // the unpack's idx, cnt (and shuf)
    emit_fp6_words(a, r.vbmi, e3m2 ? Fp6Words::kCode : Fp6Words::kSigned, v, src, o, s.v(c0), s.v(c0 + 2),
                   s.v(c0 + 1));
    if (e3m2) a.vpermi2w(v, s.v(r.consts), s.v(r.consts + 1));
    return;
  }
  switch (b_type) {
    case QJ_MXFP6_E3M2:
      if (s.zmm) {
        a.vpmovzxbw(v, codes);
        a.vpermi2w(v, s.v(r.consts), s.v(r.consts + 1));
      } else {
        // 16 v = (m | hid) * +-2^max(e-1, 0): e = 0 gives m (subnormals), else (4 + m) 2^(e-1).
        const Vec t = s.v(r.temps), h = s.v(r.temps + 1);
        a.vpmovzxbw(v, codes);
        a.vpsrlw(t, v, 2);
        a.vpand(t, t, s.v(r.consts + 2));         // sign:e in the low byte, high byte 0
        a.vpshufb(h, s.v(r.consts + 1), t);       // hid (high byte: hid[0] = 0)
        a.vpshufb(t, s.v(r.consts), t);           // +-pow (high byte multiplies 0 below)
        a.vpand(v, v, s.v(r.consts + 3));         // m
        a.vpor(v, v, h);                          // m | hid, high byte 0
        a.vpmaddubsw(v, v, t);                    // exact: |16 v| <= 448
      }
      break;
    case QJ_BDR_MX6: a.vpmovsxbw(v, codes); break;
    case QJ_BDR_MX4: {
      // One dword per column; the nibbles u = q + 8 of pair row o sit at bits 4o and 16 + 4o, so
      // (dword >> 4o) & 0x000f000f is the s16 pair: one shift (with its load) and one and, no
      // shuffle. u is the decoded value (offset 8, removed by the kernel's row-sum correction).
      Mem d = src;
      d.setSize(s.bytes);
      if (s.zmm) {
        if (o == 0) {
          a.vpandd(v, s.v(r.consts), d);
        } else {
          a.vpsrld(v, d, 4 * o);
          a.vpandd(v, v, s.v(r.consts));
        }
      } else {
        if (o == 0) {
          a.vpand(v, s.v(r.consts), d);
        } else {
          a.vmovdqu(v, d);
          a.vpsrld(v, v, 4 * o);
          a.vpand(v, v, s.v(r.consts));
        }
      }
      break;
    }
    case QJ_BDR_MX9: {
      Mem flags = src;  // 2 * lanes bits of pair row o after the 8 * lanes code bytes
      flags.addOffset(2 * s.bytes + o * s.bytes / 16);
      a.vpmovsxbw(v, codes);
      if (s.zmm) {
        flags.setSize(4);
        a.kmovd(k2, flags);
        a.k(k2).vpaddw(v, v, v);
      } else {
        flags.setSize(2);
        const Vec t = s.v(r.temps);
        a.vpbroadcastw(t, flags);
        a.vpand(t, t, s.v(r.consts));
        a.vpcmpeqw(t, t, s.v(r.consts));          // 0xffff where the element is doubled
        a.vpand(t, t, v);
        a.vpaddw(v, v, t);
      }
      break;
    }
    default: break;
  }
}

void emit_decode(Assembler& a, const Simd& s, int b_type, const Mem& src, const DecodeRegs& r,
                 const int* out, bool scaled) {
  switch (b_type) {
    case QJ_S4:
    case QJ_U4: {
      const Vec lo = s.v(out[0]), hi = s.v(out[1]), mask = s.v(r.consts), mask_hi = s.v(r.consts + 1);
      if (r.mem_operands && s.zmm && scaled) {
        a.vpandd(hi, mask_hi, src);
        a.vpandd(lo, mask, src);
      } else if (s.zmm) {
        a.vmovdqu32(lo, src);
        if (scaled) {
          a.vpandd(hi, lo, mask_hi);
        } else {
          a.vpsrlw(hi, lo, 4);
          a.vpandd(hi, hi, mask);
        }
        a.vpandd(lo, lo, mask);
      } else {
        a.vmovdqu(lo, src);
        if (scaled) {
          a.vpand(hi, lo, mask_hi);
        } else {
          a.vpsrlw(hi, lo, 4);
          a.vpand(hi, hi, mask);
        }
        a.vpand(lo, lo, mask);
      }
      break;
    }
    case QJ_MXFP4_E2M1: {
      if (r.vbmi) {
        // vpermb ignores index bits 6..7: the low nibble indexes straight from the packed byte
        // (bits 4..5 of the high nibble select a copy of the table) and the shifted word gives
        // the high nibble (bits 4..5 from the next byte, likewise harmless). One shift and two
        // vpermb per 64 bytes (3 shuffle-pipe uops), no vpand.
        const Vec lo = s.v(out[0]), hi = s.v(out[1]), lut = s.v(r.consts);
        a.vmovdqu32(lo, src);
        a.vpsrlw(hi, lo, 4);
        a.vpermb(lo, lo, lut);
        a.vpermb(hi, hi, lut);
        break;
      }
      const Vec lo = s.v(out[0]), hi = s.v(out[1]), mask = s.v(r.consts), lut = s.v(r.consts + 1);
      if (s.zmm) {
        a.vmovdqu32(lo, src);
        a.vpsrlw(hi, lo, 4);
        a.vpandd(lo, lo, mask);
        a.vpandd(hi, hi, mask);
      } else {
        a.vmovdqu(lo, src);
        a.vpsrlw(hi, lo, 4);
        a.vpand(lo, lo, mask);
        a.vpand(hi, hi, mask);
      }
      a.vpshufb(lo, lut, lo);
      a.vpshufb(hi, lut, hi);
      break;
    }
    case QJ_MXFP6_E2M3:
      for (int o = 0; o < 2; ++o) {
        Mem m = src;
        m.addOffset(o * (r.fp6_dense ? kFp6VectorBytes : s.bytes));
        const Vec d = s.v(out[o]);
        if (r.vbmi) {
          if (r.fp6_dense)
            emit_fp6_unpack(a, true, d, m, s.v(r.consts + 1), s.v(r.consts + 2), d);
          else
            a.vmovdqu32(d, m);
          a.vpermb(d, d, s.v(r.consts));
          continue;
        }
        const Vec c = s.v(r.temps);
        if (!s.zmm) {  // q by the tables of |q|, then + 60
          a.vmovdqu(c, m);
          emit_e2m3_bytes_ymm(a, d, c, s.v(r.temps + 1), s.v(r.consts), s.v(r.consts + 1));
          a.vpaddb(d, d, s.v(r.consts + 2));
          continue;
        }
        // zmm without VBMI: tables of 60 + |q|, the negative side 120 - (60 + |q|) = 60 - |q|
        if (r.fp6_dense) {
          emit_fp6_unpack(a, false, c, m, s.v(r.consts + 5), s.v(r.consts + 6), d);
          a.vpandd(c, c, s.v(r.consts + 7));
        } else {
          a.vmovdqu32(c, m);
        }
        emit_e2m3_bytes_zmm(a, d, c, s.v(r.consts), s.v(r.consts + 1), s.v(r.consts + 2), s.v(r.consts + 3),
                            s.v(r.consts + 4));
      }
      break;
    case QJ_MXINT8:
      for (int o = 0; o < 2; ++o) {
        Mem m = src;
        m.addOffset(o * s.bytes);
        const Vec d = s.v(out[o]);
        if (s.zmm)
          a.vpxord(d, s.v(r.consts), m);
        else
          a.vpxor(d, s.v(r.consts), m);
        if (r.vnni) continue;
        // Nibble split (non-VNNI): low nibbles to output o, high ones to output o + 2.
        const Vec hi = s.v(out[o + 2]), mask = s.v(r.consts + 1);
        a.vpsrlw(hi, d, 4);
        if (s.zmm) {
          a.vpandd(hi, hi, mask);
          a.vpandd(d, d, mask);
        } else {
          a.vpand(hi, hi, mask);
          a.vpand(d, d, mask);
        }
      }
      break;
    default: break;
  }
}

}  // namespace qj::cg
