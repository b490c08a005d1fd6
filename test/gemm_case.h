// One INT8 GEMM case run through the C API and through src/ref, compared bit for bit.
#pragma once
#include <quantjit/quantjit.h>

#include <cstdint>
#include <string>

namespace qjt {

struct GemmCase {
  int64_t m = 1, n = 1, k = 1;
  qj_dtype a_type = QJ_U8;
  qj_dtype c_type = QJ_U8;
  qj_granularity gran = QJ_GRAN_CHANNEL;
  int64_t group = 0;
  bool a_zp = true;      // non-zero A zero point
  bool b_zp = false;     // non-zero weight zero points
  bool bias = true;
  bool relu = false;
  qj_layout layout = QJ_LAYOUT_KN;
  int64_t lda_pad = 0, ldc_pad = 0;
  float beta = 0.0f;
  qj_granularity a_gran = QJ_GRAN_ROW;  // dynamic A
  uint32_t seed = 1;
  int threads = 1;        // partitions to run (each {t, threads} called in turn)
  std::string str() const;
};

// Runs the case at the current ISA cap; returns "" on bit-exact agreement, else a description of
// the first mismatch (or of an API failure).
std::string run_gemm_case(const GemmCase& c);

}  // namespace qjt
