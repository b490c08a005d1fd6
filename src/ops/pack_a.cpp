#include "src/ops/pack_a.h"

#include <cmath>
#include <cstring>

#include "src/formats/half.h"

namespace qj {

int64_t row_amax(qj_dtype t, const void* a, int64_t lda, int64_t m, int64_t k, float* amax) {
  for (int64_t i = 0; i < m; ++i) {
    float mx = 0.0f;
    bool finite = true;
    if (t == QJ_F32) {
      const float* r = static_cast<const float*>(a) + i * lda;
      for (int64_t j = 0; j < k; ++j) {
        float v = std::fabs(r[j]);
        finite &= v <= 3.402823466e38f;  // false for inf and nan
        mx = v > mx ? v : mx;
      }
    } else {
      const uint16_t* r = static_cast<const uint16_t*>(a) + i * lda;
      for (int64_t j = 0; j < k; ++j) {
        float v = std::fabs(bf16_to_f32(r[j]));
        finite &= v <= 3.402823466e38f;
        mx = v > mx ? v : mx;
      }
    }
    if (!finite) return i;
    amax[i] = mx;
  }
  return -1;
}

namespace {

// Round half to even for |t| < 2^22 without a libm call (exact: adding 1.5 * 2^23 leaves the
// integer part in the mantissa under the default rounding mode; matches nearbyint here).
inline float rne_small(float t) { return (t + 12582912.0f) - 12582912.0f; }

inline int32_t quant(float v, float inv) {
  float t = rne_small(v * inv);
  t = t < -127.0f ? -127.0f : (t > 127.0f ? 127.0f : t);
  return static_cast<int32_t>(t);
}

}  // namespace

// Integer A on the VNNI path: whole 4-byte groups are copied as words (s8 shifted to u8 by
// flipping the sign bits), the partial last group zero-padded. Same result as the general loop.
static void pack_a_tile_int_quads(const PackASpec& s, const uint8_t* a, int64_t lda, int mr,
                                  uint8_t* dst, int32_t* row_sum) {
  const int64_t kgroups = s.kp / 4, kfull = s.k / 4;
  const int64_t gk = s.k / s.groups;
  const uint32_t flip = s.a_type == QJ_S8 ? 0x80808080u : 0u;
  for (int i = 0; i < mr; ++i) {
    const uint8_t* r = a + i * lda;
    for (int64_t kk = 0; kk < kfull; ++kk) {
      uint32_t w;
      std::memcpy(&w, r + kk * 4, 4);
      w ^= flip;
      std::memcpy(dst + (kk * mr + i) * 4, &w, 4);
    }
    if (kfull < kgroups) {
      uint8_t tail[4] = {0, 0, 0, 0};
      for (int64_t j = kfull * 4; j < s.k; ++j) tail[j - kfull * 4] = r[j] ^ static_cast<uint8_t>(flip);
      std::memcpy(dst + (kfull * mr + i) * 4, tail, 4);
    }
    if (s.row_sums) {
      for (int64_t g = 0; g < s.groups; ++g) {
        int32_t sum = 0;
        for (int64_t j = g * gk; j < (g + 1) * gk; ++j) sum += static_cast<uint8_t>(r[j] ^ static_cast<uint8_t>(flip));
        row_sum[g * mr + i] = sum;
      }
    }
  }
}

void pack_a_tile(const PackASpec& s, const void* a, int64_t lda, int mr, int mr_t,
                 const float* inv_scale, uint8_t* dst, int32_t* row_sum) {
  if (s.kg == 4 && mr_t == mr && (s.a_type == QJ_U8 || s.a_type == QJ_S8)) {
    pack_a_tile_int_quads(s, static_cast<const uint8_t*>(a), lda, mr, dst, row_sum);
    return;
  }
  const int64_t kgroups = s.kp / s.kg;
  const int64_t gk = s.k / s.groups;  // K per scale group
  if (s.row_sums)
    for (int64_t g = 0; g < s.groups; ++g)
      for (int i = 0; i < mr; ++i) row_sum[g * mr + i] = 0;
  for (int i = 0; i < mr; ++i) {
    int32_t* rs = row_sum;
    if (i >= mr_t) {  // padding rows of a partial tile: zeros
      for (int64_t kk = 0; kk < kgroups; ++kk) std::memset(dst + (kk * mr + i) * 4, 0, 4);
      continue;
    }
    int32_t vals[4];
    for (int64_t kk = 0; kk < kgroups; ++kk) {
      for (int r = 0; r < s.kg; ++r) {
        int64_t j = kk * s.kg + r;
        int32_t v = 0;
        if (j < s.k) {
          switch (s.a_type) {
            case QJ_U8: v = static_cast<const uint8_t*>(a)[i * lda + j]; break;
            case QJ_S8: v = static_cast<const int8_t*>(a)[i * lda + j]; break;
            case QJ_F32: v = quant(static_cast<const float*>(a)[i * lda + j], inv_scale[i]); break;
            default: v = quant(bf16_to_f32(static_cast<const uint16_t*>(a)[i * lda + j]), inv_scale[i]); break;
          }
          if (s.kg == 4 && s.a_type != QJ_U8) v += 128;  // VNNI wants u8: shift s8 / dynamic values
          if (s.row_sums) rs[(j / gk) * mr + i] += v;
        }
        vals[r] = v;
      }
      uint8_t* o = dst + (kk * mr + i) * 4;
      if (s.kg == 4) {
        for (int r = 0; r < 4; ++r) o[r] = static_cast<uint8_t>(vals[r]);
      } else {
        int16_t w[2] = {static_cast<int16_t>(vals[0]), static_cast<int16_t>(vals[1])};
        std::memcpy(o, w, 4);
      }
    }
  }
}

}  // namespace qj
