// One INT8 GEMM case run through the C API and through src/ref, compared bit for bit.
//
// Shared by every GEMM test executable (linked into all of them): the case describes the problem
// and the data distribution; run_gemm_case packs the weights, creates a plan at the current ISA
// cap, runs it (per partition, or through qj_gemm_run_parallel) and compares the whole output
// buffer, padding included, with src/ref/gemm_ref on the same unpacked data.
#pragma once
#include <quantjit/quantjit.h>

#include <climits>
#include <cstdint>
#include <string>

namespace qjt {

// How A and B values are drawn.
enum ValueMode : int {
  kRandom = 0,    // uniform over the whole type range, extremes planted at fixed positions
  kExtremes = 1,  // only the two extremes of each type (0/255, -128/127; +-range for fp A)
  kMaxPos = 2,    // A = its max, B = 127 everywhere: with za = min, zb = -128 the largest sum
  kMaxNeg = 3,    // A = its min, B = 127 everywhere: with za = max, zb = -128 the most negative
};

struct GemmCase {
  static constexpr int32_t kAuto = INT32_MIN;
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
  // Extensions (defaults keep the original behaviour).
  int32_t a_zp_val = kAuto;  // explicit A zero point (overrides a_zp)
  int32_t b_zp_val = kAuto;  // explicit value of every weight zero point (needs b_zp)
  float a_scale = 0.05f;
  float b_scale = 0.0f;      // 0: random weight scales in [0.001, 0.02]; else every scale = b_scale
  float c_scale = 0.0f;      // 0: 0.7 for u8/s8 output, 1 otherwise
  int32_t c_zp = kAuto;      // explicit output zero point
  int values = kRandom;      // ValueMode
  float a_range = 3.0f;      // fp32/bf16 A drawn from [-a_range, a_range]
  bool zero_row = false;     // the last row of A is all zeros (amax = 0 for dynamic A)
  int64_t wld_pad = -1;      // extra elements per stored weight row (-1: seed % 3)
  int pack_isa = -1;         // >= 0: pack the weights under this ISA cap (the plan repacks them)
  bool parallel = false;     // qj_gemm_run_parallel(threads) instead of one call per partition
  bool check_disjoint = false;  // also: each partition alone writes a disjoint share of C, and
                                // together they write exactly the m x n elements (beta == 0)
  std::string str() const;
};

// Runs the case at the current ISA cap; returns "" on bit-exact agreement, else a description of
// the first mismatch (or of an API failure).
std::string run_gemm_case(const GemmCase& c);

}  // namespace qjt
