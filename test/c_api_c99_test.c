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
  qj_cache_stats(&st);
  printf("quantjit %s, cpu isa %s\n", qj_version(), qj_isa_name(qj_cpu_isa()));
  return 0;
}
