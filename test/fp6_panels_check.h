// Shared check of the dense 6-bit weight panels (PackedWeights::fp6_dense: MXFP6 E2M3, E3M2):
// turned into one byte per code by qj::fp6_panels_to_bytes (the vpermb + vpmultishiftqb form where
// the CPU has VBMI, and the scalar one), they must equal `bytes`, the AVX-512 tier's panels of the
// same weights, byte for byte: all panels at once, and panel 1 alone at the start of dst.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "src/core/isa.h"
#include "src/ops/int_weights.h"
#include "src/ops/mx_weights.h"

namespace qjt {

inline void expect_dense_panels_to_bytes(const qj::PackedWeights& dense, const qj::PackedWeights& bytes) {
  ASSERT_TRUE(dense.fp6_dense());
  ASSERT_FALSE(bytes.fp6_dense());
  ASSERT_EQ(dense.nr, bytes.nr);
  ASSERT_EQ(dense.mx_panel_bytes(8), bytes.panel_bytes());
  ASSERT_LT(dense.panel_bytes(), bytes.panel_bytes());
  const size_t all = static_cast<size_t>(bytes.n_panels) * bytes.panel_bytes();
  for (bool vbmi : {false, true}) {
    if (vbmi && !qj::cpu_features().avx512vbmi) continue;
    std::vector<uint8_t> out(all, 0xAB);
    qj::fp6_panels_to_bytes(dense, 0, dense.n_panels, out.data(), vbmi);
    EXPECT_EQ(0, std::memcmp(out.data(), bytes.packed.data<uint8_t>(), all)) << "vbmi " << vbmi;
    std::vector<uint8_t> one(bytes.panel_bytes(), 0xCD);
    qj::fp6_panels_to_bytes(dense, 1, 2, one.data(), vbmi);
    EXPECT_EQ(0, std::memcmp(one.data(), bytes.packed.data<uint8_t>() + bytes.panel_bytes(), one.size()))
        << "vbmi " << vbmi;
  }
}

}  // namespace qjt
