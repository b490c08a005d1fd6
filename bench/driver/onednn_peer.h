// Peers for quantjit-bench gemm: another library's matmul on the same data, in the same process,
// with the same output stage. Today: oneDNN (Debian libdnnl-dev 2.6), compiled in when CMake
// finds it (QJ_HAVE_ONEDNN). Primitive creation and the weight reorder happen in the factory and
// are not timed; run() is the timed call.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace bench {

class GemmPeer {
 public:
  virtual ~GemmPeer() = default;
  virtual bool run() = 0;                    // one matmul into the destination given at creation
  virtual std::string name() const = 0;      // e.g. "onednn"
  virtual std::string impl() const = 0;      // the implementation the peer picked, e.g. "brg:avx512_core_vnni"
  double create_us = 0;                      // primitive creation (not weight reorder), for reference
};

// u8 A (zero point) x s8 B (K x N row-major, zero point 0) -> u8 C (zero point), with per-column
// output scales and an fp32 bias. oneDNN 2.x computes
//   c = saturate(round_nearest_even((acc + bias_acc[n]) * out_scale[n]) + c_zp)
// with the bias in the accumulator's units, so the caller passes
//   out_scale[n] = a_scale * b_scale[n] / c_scale,  bias_acc[n] = bias[n] / (a_scale * b_scale[n]).
struct PeerInt8Problem {
  int64_t m = 0, n = 0, k = 0;
  const uint8_t* a = nullptr;  // M x K, lda = K
  int32_t a_zp = 0;
  const int8_t* b = nullptr;   // K x N, ldb = N
  const float* out_scale = nullptr;  // N
  const float* bias_acc = nullptr;   // N or null
  uint8_t* c = nullptr;        // M x N, ldc = N
  int32_t c_zp = 0;
};

// fp32 A x fp32 B (K x N row-major) + bias -> fp32 C: the peer for float-weight types.
struct PeerF32Problem {
  int64_t m = 0, n = 0, k = 0;
  const float* a = nullptr;
  const float* b = nullptr;
  const float* bias = nullptr;  // N or null
  float* c = nullptr;
};

bool onednn_available();
// Threads oneDNN's (OpenMP) runtime uses from now on.
void onednn_set_threads(int n);
// nullptr with *err set if oneDNN is missing or rejects the problem.
std::unique_ptr<GemmPeer> make_onednn_int8(const PeerInt8Problem& p, std::string* err);
std::unique_ptr<GemmPeer> make_onednn_f32(const PeerF32Problem& p, std::string* err);

}  // namespace bench
