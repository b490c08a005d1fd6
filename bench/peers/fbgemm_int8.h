// FBGEMM's INT8 GEMM for fbgemm_direct (bench/peers/fbgemm_int8.cpp, compiled against FBGEMM's
// own headers from the torch wheel; fbgemm_direct.cpp declares the rest of FBGEMM's API itself,
// which would clash with them in one translation unit).
#pragma once
#include <cstdint>

namespace fbgemm_peer {

// u8 A (M x K, zero point a_zp) x s8 B (K x N, per-column scales, zero points 0), fp32 bias,
// u8 C (M x N, zero point c_zp): C = round((a_scale * b_scale[j] * acc + bias[j]) / c_scale) + c_zp.
struct Int8Problem {
  int m, n, k;
  const int8_t* b;        // K x N, row-major
  const float* b_scale;   // N
  const float* bias;      // N
  float a_scale, c_scale;
  int32_t a_zp, c_zp;
};

struct Int8Gemm;
// Packs B (PackBMatrix) and the per-column terms once; nullptr when FBGEMM throws.
Int8Gemm* int8_create(const Int8Problem& p);
// One call as torch's quantized linear makes it: pack A with its row offsets (PackAWithRowOffset),
// then fbgemmPacked with ReQuantizeOutput (per output channel, fp32 bias), single thread.
void int8_run(Int8Gemm* g, const uint8_t* a, uint8_t* c);
void int8_destroy(Int8Gemm* g);

}  // namespace fbgemm_peer
