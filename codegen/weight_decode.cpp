// Weight decoders (see weight_decode.h for the contract).
//
// S4 / U4 (layout kNibble): a step is 4 bytes per column; byte r holds u(k0 + r) in the low
// nibble and u(k0 + 4 + r) in the high nibble, u = q + 8 (S4) or q (U4). Decode of one vector:
//   lo = bytes & 0x0f            (one vpand, any vector pipe)
//   hi = (bytes >> 4) & 0x0f     (one 16-bit shift, the only shift-pipe uop, + one vpand)
// i.e. one shift-pipe uop per two quad vectors. On Zen 4 (measured) shifts share a pipe with
// vpdpbusd, so the decode costs about 1/(2 mr) of the multiply slots; vpand runs on all four pipes.
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
      d.n_temps = 0;
      break;
    default: break;
  }
  return d;
}

void emit_decoder_setup(Assembler& a, const Simd& s, int b_type, const DecodeRegs& r, const Gp& tmp) {
  switch (b_type) {
    case QJ_S4:
    case QJ_U4: {
      a.mov(tmp.r32(), 0x0f0f0f0f);
      if (s.zmm) {
        a.vpbroadcastd(s.v(r.consts), tmp.r32());
      } else {
        a.vmovd(xmm(r.consts), tmp.r32());
        a.vpbroadcastd(s.v(r.consts), xmm(r.consts));
      }
      break;
    }
    default: break;
  }
}

void emit_decode(Assembler& a, const Simd& s, int b_type, const Mem& src, const DecodeRegs& r,
                 const int* out) {
  switch (b_type) {
    case QJ_S4:
    case QJ_U4: {
      const Vec lo = s.v(out[0]), hi = s.v(out[1]), mask = s.v(r.consts);
      if (s.zmm) {
        a.vpsrlw(hi, src, 4);  // EVEX shifts take a memory source
        a.vpandd(lo, mask, src);
        a.vpandd(hi, hi, mask);
      } else {
        a.vmovdqu(lo, src);
        a.vpsrlw(hi, lo, 4);
        a.vpand(lo, lo, mask);
        a.vpand(hi, hi, mask);
      }
      break;
    }
    default: break;
  }
}

}  // namespace qj::cg
