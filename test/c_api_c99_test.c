/* The public header compiled and linked as plain C99 against libquantjit.so. */
#include <quantjit/quantjit.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  qj_cache_stats_t st;
  if (strcmp(qj_version(), QJ_VERSION_STRING) != 0) {
    fprintf(stderr, "version mismatch: %s vs %s\n", qj_version(), QJ_VERSION_STRING);
    return 1;
  }
  if (qj_set_max_isa((qj_isa)42) != QJ_ERR_INVALID_ARGUMENT) return 2;
  if (strstr(qj_last_error(), "42") == NULL) return 3;
  if (strcmp(qj_status_name(QJ_ERR_OUT_OF_RANGE), "QJ_ERR_OUT_OF_RANGE") != 0) return 4;
  /* Enum arguments outside their enumerations are plain ints to a C caller: refused, never loaded
     as C++ enums (UBSan aborts the sanitizer build on such a load). */
  {
    float src[32] = {0};
    unsigned char elems[32], scales[1];
    float back[32];
    if (qj_mx_quantize((qj_dtype)-2, QJ_ROUND_FLOOR, src, 32, elems, scales) != QJ_ERR_INVALID_ARGUMENT) return 5;
    if (qj_mx_quantize(QJ_MXFP4_E2M1, (qj_rounding)5, src, 32, elems, scales) != QJ_ERR_INVALID_ARGUMENT) return 6;
    if (qj_mx_quantize_ex(QJ_MXINT8, QJ_ROUND_FLOOR, (qj_dtype)-2, src, 32, elems, scales) != QJ_ERR_INVALID_ARGUMENT)
      return 7;
    if (qj_mx_dequantize((qj_dtype)-2, elems, scales, 32, back) != QJ_ERR_INVALID_ARGUMENT) return 8;
    if (qj_mx_dequantize_ex(QJ_MXINT8, elems, scales, 32, (qj_dtype)-2, back) != QJ_ERR_INVALID_ARGUMENT) return 9;
    if (qj_quantize_rowwise((qj_dtype)-2, src, 1, 32, elems) != QJ_ERR_INVALID_ARGUMENT) return 10;
    if (qj_embedding_bag_plan_create(NULL, NULL) != QJ_ERR_INVALID_ARGUMENT) return 11;
  }
  qj_cache_stats(&st);
  printf("quantjit %s, cpu isa %s\n", qj_version(), qj_isa_name(qj_cpu_isa()));
  return 0;
}
