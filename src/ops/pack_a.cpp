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

int64_t row_group_amax(qj_dtype t, const void* a, int64_t lda, int64_t m, int64_t k, int64_t gk,
                       float* amax) {
  const int64_t groups = k / gk;
  const size_t esz = t == QJ_F32 ? 4 : 2;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t g = 0; g < groups; ++g) {
      const void* row = static_cast<const uint8_t*>(a) + (i * lda + g * gk) * esz;
      if (row_amax(t, row, 0, 1, gk, &amax[i * groups + g]) >= 0) return i;
    }
  return -1;
}

namespace {

// Round half to even for |t| < 2^22 without a libm call (exact: adding 1.5 * 2^23 leaves the
// integer part in the mantissa under the default rounding mode; matches nearbyint here).
inline float rne_small(float t) { return (t + 12582912.0f) - 12582912.0f; }

inline int32_t quant(float v, float inv, float pre) {
  float t = rne_small((v * pre) * inv);
  t = t < -127.0f ? -127.0f : (t > 127.0f ? 127.0f : t);
  return static_cast<int32_t>(t);
}

}  // namespace

// Integer A in quads (the VNNI layout, and the s8 quads of decoded weights): whole 4-byte groups
// are copied as words, sign bits flipped where the type changes (s8 -> u8 for VNNI, u8 -> s8 for
// signed_quads), the partial last group and the padding groups zero-filled. Same result as the
// general loop.
static void pack_a_tile_int_quads(const PackASpec& s, const uint8_t* a, int64_t lda, int mr,
                                  uint8_t* dst, int32_t* row_sum) {
  const int64_t kgroups = s.kp / 4, kfull = s.k / 4;
  const int64_t gk = s.k / s.groups;
  const bool flip_sign = s.signed_quads ? s.a_type == QJ_U8 : s.a_type == QJ_S8;
  const uint32_t flip = flip_sign ? 0x80808080u : 0u;
  for (int i = 0; i < mr; ++i) {
    const uint8_t* r = a + i * lda;
    for (int64_t kk = 0; kk < kfull; ++kk) {
      uint32_t w;
      std::memcpy(&w, r + kk * 4, 4);
      w ^= flip;
      std::memcpy(dst + (kk * mr + i) * 4, &w, 4);
    }
    for (int64_t kk = kfull; kk < kgroups; ++kk) {
      uint8_t tail[4] = {0, 0, 0, 0};
      for (int64_t j = kk * 4; j < s.k && j < kk * 4 + 4; ++j)
        tail[j - kk * 4] = r[j] ^ static_cast<uint8_t>(flip);
      std::memcpy(dst + (kk * mr + i) * 4, tail, 4);
    }
    if (s.row_sums) {
      for (int64_t g = 0; g < s.groups; ++g) {
        int32_t sum = 0;
        if (s.signed_quads)
          for (int64_t j = g * gk; j < (g + 1) * gk; ++j) sum += static_cast<int8_t>(r[j] ^ static_cast<uint8_t>(flip));
        else
          for (int64_t j = g * gk; j < (g + 1) * gk; ++j) sum += static_cast<uint8_t>(r[j] ^ static_cast<uint8_t>(flip));
        row_sum[g * mr + i] = static_cast<int32_t>(static_cast<uint32_t>(sum) * static_cast<uint32_t>(s.row_sum_mult));
      }
    }
  }
}

void dynamic_scales(float amax, float* inv_scale, float* pre_scale, float* row_scale) {
  *pre_scale = 1.0f;
  *inv_scale = amax > 0.0f ? 127.0f / amax : 0.0f;
  *row_scale = amax > 0.0f ? amax / 127.0f : 1.0f;
  if (std::isinf(*inv_scale)) {  // tiny amax: scale v and amax up by 2^100 first (exact)
    *pre_scale = 0x1p100f;
    *inv_scale = 127.0f / (amax * 0x1p100f);
  }
}

void pack_a_tile(const PackASpec& s, const void* a, int64_t lda, int mr, int mr_t,
                 const float* inv_scale, const float* pre_scale, uint8_t* dst, int32_t* row_sum) {
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
            case QJ_F32: {
              const int64_t f = s.group_quant ? (j / gk) * mr + i : i;
              v = quant(static_cast<const float*>(a)[i * lda + j], inv_scale[f], pre_scale[f]);
              break;
            }
            default: {
              const int64_t f = s.group_quant ? (j / gk) * mr + i : i;
              v = quant(bf16_to_f32(static_cast<const uint16_t*>(a)[i * lda + j]), inv_scale[f], pre_scale[f]);
              break;
            }
          }
          if (s.signed_quads) {
            if (s.a_type == QJ_U8) v -= 128;  // the signed operand: u8 shifted into s8
          } else if (s.kg == 4 && s.a_type != QJ_U8) {
            v += 128;  // VNNI wants u8: shift s8 / dynamic values
          }
          if (s.row_sums) rs[(j / gk) * mr + i] += v;
        }
        vals[r] = v;
      }
      uint8_t* o = dst + (kk * mr + i) * 4;  // (s8 quads wrap into bytes as two's complement)
      if (s.kg == 4) {
        for (int r = 0; r < 4; ++r) o[r] = static_cast<uint8_t>(vals[r]);
      } else {
        int16_t w[2] = {static_cast<int16_t>(vals[0]), static_cast<int16_t>(vals[1])};
        std::memcpy(o, w, 4);
      }
    }
  }
  if (s.row_sums && s.row_sum_mult != 1)
    for (int64_t g = 0; g < s.groups; ++g)
      for (int i = 0; i < mr; ++i)
        row_sum[g * mr + i] = static_cast<int32_t>(static_cast<uint32_t>(row_sum[g * mr + i]) *
                                                   static_cast<uint32_t>(s.row_sum_mult));
}

void pack_a_float_tile(qj_dtype a_type, const void* a, int64_t lda, int mr, int mr_t, int64_t k,
                       int64_t kp, float* dst) {
  for (int i = 0; i < mr; ++i) {
    if (i >= mr_t) {
      for (int64_t j = 0; j < kp; ++j) dst[j * mr + i] = 0.0f;
      continue;
    }
    if (a_type == QJ_F32) {
      const float* r = static_cast<const float*>(a) + i * lda;
      for (int64_t j = 0; j < k; ++j) dst[j * mr + i] = r[j];
    } else {
      const uint16_t* r = static_cast<const uint16_t*>(a) + i * lda;
      for (int64_t j = 0; j < k; ++j) dst[j * mr + i] = bf16_to_f32(r[j]);
    }
    for (int64_t j = k; j < kp; ++j) dst[j * mr + i] = 0.0f;
  }
}

}  // namespace qj
