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
#include "codegen/weight_decode.h"

#include <quantjit/quantjit.h>

namespace qj::cg {

using namespace asmjit;
using namespace asmjit::x86;

DecoderInfo decoder_info(int b_type) {
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
    default: break;
  }
  return d;
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
    default: break;
  }
}

}  // namespace qj::cg
