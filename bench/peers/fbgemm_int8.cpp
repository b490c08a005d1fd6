// FBGEMM's INT8 GEMM through its public C++ API (see fbgemm_int8.h), as torch's quantized linear
// (fbgemm engine, per-channel qint8 weights) calls it, so that fbgemm_direct can time it in the
// same process as quantjit's plan. FBGEMM's code is the wheel's: the templates below are
// instantiated in libtorch_cpu, which exports them.
#include "bench/peers/fbgemm_int8.h"

#include <fbgemm/Fbgemm.h>

#include <memory>
#include <vector>

namespace fbgemm_peer {

struct Int8Gemm {
  Int8Problem p;
  std::unique_ptr<fbgemm::PackBMatrix<int8_t>> b;
  std::vector<int32_t> col_offsets, b_zp, row_offsets, c_i32;
  std::vector<float> c_mult, ab_scale;
};

Int8Gemm* int8_create(const Int8Problem& p) {
  auto g = std::make_unique<Int8Gemm>();
  g->p = p;
  try {
    g->b = std::make_unique<fbgemm::PackBMatrix<int8_t>>(fbgemm::matrix_op_t::NoTranspose, p.k, p.n, p.b, p.n,
                                                         nullptr, 1);
  } catch (...) {
    return nullptr;
  }
  g->col_offsets.assign(p.n, 0);
  for (int kk = 0; kk < p.k; ++kk)
    for (int j = 0; j < p.n; ++j) g->col_offsets[j] += p.b[static_cast<int64_t>(kk) * p.n + j];
  g->b_zp.assign(p.n, 0);
  g->c_mult.resize(p.n);
  g->ab_scale.resize(p.n);
  for (int j = 0; j < p.n; ++j) {
    g->ab_scale[j] = p.a_scale * p.b_scale[j];
    g->c_mult[j] = g->ab_scale[j] / p.c_scale;
  }
  g->row_offsets.resize(fbgemm::PackAWithRowOffset<uint8_t>::rowOffsetBufferSize());
  g->c_i32.resize(static_cast<size_t>(p.m) * p.n);
  return g.release();
}

void int8_run(Int8Gemm* g, const uint8_t* a, uint8_t* c) {
  const Int8Problem& p = g->p;
  fbgemm::PackAWithRowOffset<uint8_t> pa(fbgemm::matrix_op_t::NoTranspose, p.m, p.k, a, p.k, nullptr, 1,
                                         g->row_offsets.data());
  fbgemm::DoNothing<> done;
  fbgemm::ReQuantizeOutput<false, fbgemm::QuantizationGranularity::OUT_CHANNEL, float> out(
      done, g->c_mult.data(), p.c_zp, p.a_zp, g->b_zp.data(), pa.getRowOffsetBuffer(), g->col_offsets.data(), p.bias,
      p.n, 1, g->ab_scale.data());
  fbgemm::fbgemmPacked(pa, *g->b, c, g->c_i32.data(), p.n, out, 0, 1);
}

void int8_destroy(Int8Gemm* g) { delete g; }

}  // namespace fbgemm_peer
