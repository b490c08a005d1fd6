// The floating-point environment the library computes in.
//
// Every result is defined for the default SSE environment (MXCSR 0x1f80: round to nearest even,
// no flush-to-zero or denormals-are-zero, exceptions masked): the scalar references round with
// nearbyint / lrint, the vector code converts with cvtps2dq, and the JIT kernels' float
// arithmetic follows MXCSR. A caller may run with another rounding mode or with FTZ / DAZ set
// (servers often set them); so each API call that computes runs in a DefaultFpEnv scope (see
// guarded(), src/core/status.h; the MX conversions in src/ops/mx_convert.cpp), and so does every
// slice of a parallel call on the pool's or the caller's threads (src/core/threading.cpp). The caller's MXCSR, exception flags included,
// is back when the call returns (when it was the default, the flags the call raised stay, as
// with any arithmetic). In the default environment this costs one stmxcsr.
#pragma once
#include <immintrin.h>

namespace qj {

class DefaultFpEnv {
 public:
  static constexpr unsigned kDefault = 0x1f80;
  DefaultFpEnv() : saved_(_mm_getcsr()), changed_((saved_ & ~0x3fu) != kDefault) {  // (0-5: flags)
    if (changed_) _mm_setcsr(kDefault);
  }
  ~DefaultFpEnv() {
    if (changed_) _mm_setcsr(saved_);
  }
  DefaultFpEnv(const DefaultFpEnv&) = delete;
  DefaultFpEnv& operator=(const DefaultFpEnv&) = delete;

 private:
  unsigned saved_;
  bool changed_;
};

}  // namespace qj
