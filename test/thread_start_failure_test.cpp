// The *_run_parallel calls and qj_rowwise_adagrad_fused when the built-in pool cannot start its
// threads: QJ_ERR_OUT_OF_MEMORY naming the cause, nothing written, the process alive. A child
// process caps its address space (RLIMIT_AS) after creating the plans, so the 8 MiB thread stacks
// cannot be mapped; the parent checks the child's exit code. (Skipped under ASan / TSan, whose
// shadow memory needs a vast address space of its own.)
#include <gtest/gtest.h>
#include <quantjit/quantjit.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// Every call must reach the pool's thread start, also when this binary runs outside ctest (which
// sets QJ_POOL_INLINE_US=0 for every test): short calls would otherwise run on the caller alone.
// Set before main, so before the library reads it.
struct NoInlineCalls {
  NoInlineCalls() { setenv("QJ_POOL_INLINE_US", "0", 1); }
} g_no_inline_calls;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// Bytes of address space this process maps now (/proc/self/statm: total pages).
size_t mapped_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long pages = 0;
  if (std::fscanf(f, "%lu", &pages) != 1) pages = 0;
  std::fclose(f);
  return static_cast<size_t>(pages) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

bool says_cannot_start(qj_status st) {
  return st == QJ_ERR_OUT_OF_MEMORY && std::strstr(qj_last_error(), "cannot start") != nullptr;
}

// The child: plans first, then the cap, then the calls. Exit code: 0 when every check held, else
// the number of the first one that failed.
int child() {
  constexpr int kThreads = 1000;
  // The AVX2 tier on every CPU: there u8 A is packed (as s16 pairs), so each of the kThreads
  // slices sizes a packed-A block before any thread starts, and those blocks must fit too.
  if (qj_cpu_isa() >= QJ_ISA_AVX2 && qj_set_max_isa(QJ_ISA_AVX2) != QJ_OK) return 5;
  // Every call is large enough that the pool does not run it on the caller alone (work estimates
  // above kInlineWorkNs, src/core/threading.h). GEMM: s8 weights, u8 A, s32 C.
  const int64_t m = 65536, k = 32, n = 16;
  std::vector<int8_t> w(static_cast<size_t>(k * n), 1);
  qj_weights_desc wd{};
  wd.dtype = QJ_S8;
  wd.k = k;
  wd.n = n;
  wd.layout = QJ_LAYOUT_KN;
  float one = 1.0f;
  wd.scales = &one;
  qj_weights wq = nullptr;
  if (qj_weights_pack(&wd, w.data(), n, &wq) != QJ_OK) return 1;
  qj_gemm_desc gd{};
  gd.a_type = QJ_U8;
  gd.c_type = QJ_S32;
  gd.a_scale = 1.0f;
  qj_gemm_plan gp = nullptr;
  if (qj_gemm_plan_create(&gd, wq, &gp) != QJ_OK) return 2;
  std::vector<uint8_t> a(static_cast<size_t>(m * k), 1);
  std::vector<int32_t> c(static_cast<size_t>(m * n), -7);
  // Embedding-bag: fp32 rows, one index per bag.
  const int64_t dim = 8, bags = 32768;
  qj_embedding_bag_desc ed{};
  ed.row_type = QJ_F32;
  ed.dim = dim;
  ed.index_bits = 64;
  ed.offset_bits = 64;
  ed.pooling = QJ_POOL_SUM;
  ed.out_type = QJ_F32;
  qj_embedding_bag_plan ep = nullptr;
  if (qj_embedding_bag_plan_create(&ed, &ep) != QJ_OK) return 3;
  std::vector<float> table(static_cast<size_t>(bags * dim), 1.0f), out(static_cast<size_t>(bags * dim), -7.0f);
  std::vector<int64_t> idx(static_cast<size_t>(bags)), offs(static_cast<size_t>(bags + 1));
  for (int64_t i = 0; i < bags; ++i) idx[i] = i, offs[i] = i;
  offs[bags] = bags;
  // AdaGrad over the same bags (every row once).
  qj_rowwise_adagrad_desc ad{};
  ad.table_type = QJ_F32;
  ad.dim = dim;
  ad.index_bits = 64;
  ad.offset_bits = 64;
  ad.pooling = QJ_POOL_SUM;
  ad.optimizer = QJ_OPT_ROWWISE_ADAGRAD;
  ad.mode = QJ_UPDATE_COALESCED;
  ad.learning_rate = 0.1f;
  ad.epsilon = 1e-5f;
  std::vector<float> mom(static_cast<size_t>(bags), 0.0f), grad(static_cast<size_t>(bags * dim), 0.5f);
  const std::vector<float> table0 = table;

  rlimit rl{};
  rl.rlim_cur = rl.rlim_max = mapped_bytes() + (size_t{64} << 20);
  if (setrlimit(RLIMIT_AS, &rl) != 0) return 4;

  if (!says_cannot_start(qj_gemm_run_parallel(gp, m, a.data(), k, c.data(), n, kThreads))) return 10;
  for (int32_t v : c)
    if (v != -7) return 11;
  if (!says_cannot_start(qj_embedding_bag_run_parallel(ep, table.data(), bags, bags, idx.data(), bags, offs.data(),
                                                       nullptr, out.data(), kThreads)))
    return 12;
  for (float v : out)
    if (v != -7.0f) return 13;
  if (!says_cannot_start(qj_rowwise_adagrad_fused(&ad, table.data(), mom.data(), bags, bags, idx.data(), bags,
                                                  offs.data(), nullptr, grad.data(), 0, kThreads)))
    return 14;
  if (table != table0) return 15;
  for (float v : mom)
    if (v != 0.0f) return 16;
  // Still usable on one thread.
  if (qj_gemm_run_parallel(gp, m, a.data(), k, c.data(), n, 1) != QJ_OK || c[0] != k) return 17;
  return 0;
}

TEST(ThreadStartFailure, ParallelCallsFailCleanly) {
  if (kSanitized) GTEST_SKIP() << "the sanitizers' shadow memory does not fit an address-space cap";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(child());
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died (signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "first failed check in child(): " << WEXITSTATUS(status);
}

}  // namespace
