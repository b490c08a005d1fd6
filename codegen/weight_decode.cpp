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

#include <cstring>

#include "src/formats/mx.h"

namespace qj::cg {

using namespace asmjit;
using namespace asmjit::x86;

DecoderInfo decoder_info(int b_type, bool vbmi) {
  DecoderInfo d;
  switch (b_type) {
    case QJ_S4:
    case QJ_U4:
      d.ok = true;
      d.k_per_step = 8;
      d.bytes_per_col_step = 4;
      d.n_out = 2;
      d.offset = b_type == QJ_S4 ? 8 : 0;
      d.pair_exact = true;
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
      d.pair_exact = true;  // d <= 24: two vpmaddubsw pairs per s16 lane stay below 2^15
      d.n_consts = vbmi ? 1 : 2;  // vbmi: the 64-entry table; else 0x0f bytes, the LUT per 128 bits
      d.e8m0_scales = true;
      break;
    case QJ_MXFP6_E2M3:
      // One code per byte (6 bits used), quads of k0..k0+3 then k0+4..k0+7 per column vector;
      // vpermb with a 64-entry table gives 8v + 60 in [0, 120].
      d.ok = true;
      d.k_per_step = 8;
      d.bytes_per_col_step = 8;
      d.n_out = 2;
      d.offset = 60;
      d.pair_exact = false;  // 2 pairs of 120 * 128 overflow s16
      d.n_consts = 1;
      d.e8m0_scales = true;
      d.needs_vbmi = true;
      break;
    case QJ_MXINT8:
      // Codes as bytes (as E2M3); d = code ^ 0x80 = q + 128 in [0, 255].
      d.ok = true;
      d.k_per_step = 8;
      d.bytes_per_col_step = 8;
      d.n_out = 2;
      d.offset = 128;
      d.pair_exact = false;
      d.n_consts = 1;  // 0x80 bytes
      d.e8m0_scales = true;
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

// Writes n bytes (a multiple of 8) to the red-zone table area.
void store_table(Assembler& a, const uint8_t* bytes, int n, const Gp& tmp) {
  for (int i = 0; i < n; i += 8) {
    uint64_t q;
    std::memcpy(&q, bytes + i, 8);
    a.mov(tmp, q);
    a.mov(qword_ptr(rsp, kRedZoneTable + i), tmp);
  }
}

}  // namespace

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
      const int8_t* q = mx::fp4_int_table();
      for (int i = 0; i < 64; ++i) lut[i] = static_cast<uint8_t>(q[i % 16] + 12);
      if (r.vbmi) {  // vpermb reads index bits 0..5: the 16 codes repeated 4 times
        store_table(a, lut, 64, tmp);
        a.vmovdqu32(s.v(r.consts), zmmword_ptr(rsp, kRedZoneTable));
        break;
      }
      broadcast_dword(a, s, r.consts, 0x0f0f0f0fu, tmp);
      store_table(a, lut, 16, tmp);
      if (s.zmm)
        a.vbroadcasti32x4(s.v(r.consts + 1), xmmword_ptr(rsp, kRedZoneTable));
      else
        a.vbroadcasti128(s.v(r.consts + 1), xmmword_ptr(rsp, kRedZoneTable));
      break;
    }
    case QJ_MXFP6_E2M3: {
      uint8_t lut[64];
      const int8_t* q = mx::e2m3_int_table();
      for (int i = 0; i < 64; ++i) lut[i] = static_cast<uint8_t>(q[i] + 60);
      store_table(a, lut, 64, tmp);
      a.vmovdqu32(s.v(r.consts), zmmword_ptr(rsp, kRedZoneTable));  // zmm only (vpermb)
      break;
    }
    case QJ_MXINT8: broadcast_dword(a, s, r.consts, 0x80808080u, tmp); break;
    default: break;
  }
}

void emit_decode(Assembler& a, const Simd& s, int b_type, const Mem& src, const DecodeRegs& r,
                 const int* out, bool scaled) {
  switch (b_type) {
    case QJ_S4:
    case QJ_U4: {
      const Vec lo = s.v(out[0]), hi = s.v(out[1]), mask = s.v(r.consts), mask_hi = s.v(r.consts + 1);
      if (s.zmm) {
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
        m.addOffset(o * s.bytes);
        a.vmovdqu32(s.v(out[o]), m);
        a.vpermb(s.v(out[o]), s.v(out[o]), s.v(r.consts));
      }
      break;
    case QJ_MXINT8:
      for (int o = 0; o < 2; ++o) {
        Mem m = src;
        m.addOffset(o * s.bytes);
        if (s.zmm)
          a.vpxord(s.v(out[o]), s.v(r.consts), m);
        else
          a.vpxor(s.v(out[o]), s.v(r.consts), m);
      }
      break;
    default: break;
  }
}

}  // namespace qj::cg
