/* libquantjit.so in a process where another copy of cpuinfo comes first in symbol lookup (as
 * PyTorch's libc10.so does): the library must still find this CPU's tier and generate its
 * kernels. (It once took its ISA from cpuinfo's symbols, which the dynamic linker bound to the
 * other copy: every plan fell back to the scalar reference, about 100 times slower.) Built
 * against the shared library with test/cpuinfo_interposer.c linked ahead of it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <quantjit/quantjit.h>
#include <stdio.h>
#include <string.h>

void* qj_test_interposer_initialize_address(void);

/* The tier from the compiler's own CPUID check (which also requires the OS to save the state) */
static qj_isa expected_tier(void) {
  __builtin_cpu_init();
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return QJ_ISA_SCALAR;
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("bmi2")))
    return QJ_ISA_AVX2;
  return __builtin_cpu_supports("avx512vnni") ? QJ_ISA_AVX512_VNNI : QJ_ISA_AVX512;
}

int main(void) {
  int fails = 0;
  void* seen = dlsym(RTLD_DEFAULT, "cpuinfo_initialize");
  if (seen != qj_test_interposer_initialize_address()) {
    printf("FAILED: the interposer does not come first (cpuinfo_initialize at %p, not %p)\n", seen,
           qj_test_interposer_initialize_address());
    return 1;
  }
  const qj_isa want = expected_tier(), got = qj_cpu_isa();
  if (got != want) {
    printf("FAILED: qj_cpu_isa() = %s, this CPU's tier is %s\n", qj_isa_name(got), qj_isa_name(want));
    ++fails;
  }
  /* a plan gets a generated kernel, not the reference (whose names start emb_ref) */
  qj_embedding_bag_desc d;
  memset(&d, 0, sizeof d);
  d.row_type = QJ_FUSED_8BIT;
  d.dim = 1024;
  d.index_bits = 32;
  d.offset_bits = 64;
  d.pooling = QJ_POOL_SUM;
  d.out_type = QJ_F32;
  d.prefetch_distance = QJ_PREFETCH_AUTO;
  qj_embedding_bag_plan p;
  if (qj_embedding_bag_plan_create(&d, &p) != QJ_OK) {
    printf("FAILED: qj_embedding_bag_plan_create: %s\n", qj_last_error());
    return 1;
  }
  char name[200];
  snprintf(name, sizeof name, "%s", qj_embedding_bag_plan_kernel_name(p));
  if (want >= QJ_ISA_AVX2 && strncmp(name, "emb_ref", 7) == 0) {
    printf("FAILED: the plan runs %s, the scalar reference\n", name);
    ++fails;
  }
  /* and it runs: one bag of two rows, exact sums of the decoded rows (scale 1, bias 0) */
  static unsigned char table[2][1024 + 8];
  for (int r = 0; r < 2; ++r) {
    for (int j = 0; j < 1024; ++j) table[r][j] = (unsigned char)((j * 7 + r) & 0xff);
    const float s = 1.0f, b = 0.0f;
    memcpy(&table[r][1024], &s, 4);
    memcpy(&table[r][1028], &b, 4);
  }
  const int idx[2] = {0, 1};
  const long long offs[2] = {0, 2};
  static float out[1024];
  const qj_embedding_bag_args a = {table, NULL, 2, 1, idx, 2, offs, NULL, out};
  if (qj_embedding_bag_run_ex(p, &a, NULL) != QJ_OK) {
    printf("FAILED: qj_embedding_bag_run_ex: %s\n", qj_last_error());
    ++fails;
  }
  for (int j = 0; j < 1024; ++j) {
    const float want_j = (float)((j * 7) & 0xff) + (float)((j * 7 + 1) & 0xff);
    if (out[j] != want_j) {
      printf("FAILED: out[%d] = %g, want %g\n", j, out[j], want_j);
      ++fails;
      break;
    }
  }
  qj_embedding_bag_plan_destroy(p);
  if (!fails) printf("PASSED: %s, kernel %s\n", qj_isa_name(got), name);
  return fails ? 1 : 0;
}
