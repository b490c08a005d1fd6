// QJ_VERBOSE and QJ_PERF_MAP. The library reads its environment once per process, so each check
// runs this same executable again as a child (fork + exec of /proc/self/exe) with the variables
// set and a filter selecting the child body below (a DISABLED_ test, run only on request). The
// child creates GEMM plans through the driver, prints on stdout what each plan holds
// ("QJT_KERNEL <generated 0/1> <name> <entry> <bytes>") and the cache statistics; the parent
// checks the child's stderr log and perf map against that:
//   - QJ_VERBOSE=1: one "quantjit: jit,<canonical name>,<bytes> bytes,<us> us" line per generated
//     kernel (as many as cache misses, same names), nothing for cache hits;
//   - with the cap at scalar: a line saying the GEMM falls back to the reference, and no jit line;
//   - without QJ_VERBOSE: no "quantjit:" line at all;
//   - QJ_PERF_MAP=1: /tmp/perf-<pid>.map holds "<addr> <size> <name>" for every generated kernel,
//     at the address and size the plan uses.
#include <gtest/gtest.h>
#include <quantjit/quantjit.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "src/ops/gemm.h"
#include "src/ops/int_weights.h"
#include "test/test_util.h"

namespace {

// ---------------------------------------------------------------------------------------------
// Child body.

struct ChildPlan {
  std::vector<int8_t> wq;
  std::vector<float> scales, bias;
  std::shared_ptr<qj::PackedWeights> w;
  std::unique_ptr<qj::GemmPlan> plan;
};

// Plans over several output stages; configs 0 and 1 share every kernel key (cache hits); 5 and 6
// differ only in the group size.
std::unique_ptr<ChildPlan> child_plan(int i) {
  auto c = std::make_unique<ChildPlan>();
  const int64_t k = 64, n = i == 2 ? 20 : 37;
  const qj_dtype outs[] = {QJ_U8, QJ_U8, QJ_F32, QJ_S32, QJ_BF16, QJ_F32, QJ_F32};
  c->wq = qjt::random_ints<int8_t>(k * n, -128, 127, i + 1);
  qj_weights_desc wd{};
  wd.dtype = QJ_S8;
  wd.k = k;
  wd.n = n;
  wd.granularity = i >= 5 ? QJ_GRAN_GROUP : QJ_GRAN_CHANNEL;
  wd.group_size = i == 5 ? 32 : 16;
  c->scales.assign(i >= 5 ? (k / wd.group_size) * n : n, 0.01f);
  wd.scales = c->scales.data();
  c->bias.assign(n, 1.0f);
  qj_gemm_desc d{};
  d.a_type = QJ_U8;
  d.a_scale = 0.1f;
  d.c_type = outs[i];
  d.c_scale = 0.5f;
  d.bias = outs[i] == QJ_S32 ? nullptr : c->bias.data();
  if (qj::pack_int_weights(wd, c->wq.data(), n, qj_max_isa(), &c->w) != QJ_OK) return nullptr;
  if (qj::gemm_plan_create(d, c->w, &c->plan) != QJ_OK) return nullptr;
  return c;
}

TEST(VerboseChild, DISABLED_Run) {
  std::vector<std::unique_ptr<ChildPlan>> plans;
  for (int i = 0; i < 7; ++i) {
    plans.push_back(child_plan(i));
    ASSERT_TRUE(plans.back()) << qj_last_error();
    plans.back()->plan->for_each_kernel([](const qj::KernelRef& r) {
      std::printf("QJT_KERNEL %d %s %p %zu\n", r.gen_us() > 0 ? 1 : 0, r.name().c_str(), r.entry(),
                  r.code_bytes());
    });
  }
  qj_cache_stats_t s;
  qj_cache_stats(&s);
  std::printf("QJT_STATS misses=%llu hits=%llu fallbacks=%llu\n", (unsigned long long)s.misses,
              (unsigned long long)s.hits, (unsigned long long)s.fallbacks);
  std::fflush(stdout);
}

// ---------------------------------------------------------------------------------------------
// Parent side.

struct Child {
  int exit_code = -1;
  int pid = 0;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs the child body with `set` added to and `unset` removed from the environment.
Child run_child(const std::map<std::string, std::string>& set, const std::vector<std::string>& unset) {
  Child r;
  char out_path[] = "/tmp/qjt_verbose_out_XXXXXX", err_path[] = "/tmp/qjt_verbose_err_XXXXXX";
  int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
  if (out_fd < 0 || err_fd < 0) return r;
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    for (const auto& [k, v] : set) setenv(k.c_str(), v.c_str(), 1);
    for (const auto& k : unset) unsetenv(k.c_str());
    char map_path[64];
    std::snprintf(map_path, sizeof map_path, "/tmp/perf-%d.map", static_cast<int>(getpid()));
    unlink(map_path);  // a stale map of an earlier process with this pid
    execl("/proc/self/exe", "verbose_log_test", "--gtest_filter=VerboseChild.DISABLED_Run",
          "--gtest_also_run_disabled_tests", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.pid = static_cast<int>(pid);
  close(out_fd);
  close(err_fd);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  unlink(out_path);
  unlink(err_path);
  return r;
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

struct KernelLine {
  bool generated;
  std::string name;
  unsigned long long entry;
  unsigned long long bytes;
};

std::vector<KernelLine> kernels_of(const Child& c) {
  std::vector<KernelLine> v;
  for (const std::string& l : lines(c.out)) {
    if (l.rfind("QJT_KERNEL ", 0) != 0) continue;
    std::istringstream in(l.substr(11));
    KernelLine k;
    int gen;
    std::string entry;
    in >> gen >> k.name >> entry >> k.bytes;
    k.generated = gen != 0;
    k.entry = std::stoull(entry, nullptr, 16);
    v.push_back(k);
  }
  return v;
}

unsigned long long stat_of(const Child& c, const std::string& key) {
  for (const std::string& l : lines(c.out)) {
    size_t p = l.find(" " + key + "=");
    if (l.rfind("QJT_STATS", 0) == 0 && p != std::string::npos) return std::stoull(l.substr(p + key.size() + 2));
  }
  return ~0ull;
}

// docs/kernel-naming.md
const std::regex kCanonical(
    "gemm_(u8s8|s16s16|s16s8)_acc32_(raw|reqb?|deq)_(u8|s8|s32|f32|bf16)(_grp)?(_bzp)?(_bias)?(_relu)?(_dyn)?"
    "(_beta)?__(avx2|avx512|avx512vnni)_[0-9]+x[0-9]+c[24](_t[0-9]+)?(_dual|_narrow|_tall)?"
    "(_lda[0-9]+|_k[0-9]+(_bs[0-9]+)?)?(_klast)?(_pair)?(_pf[0-9]+)?");
const std::regex kJitLine("quantjit: jit,([A-Za-z0-9_]+),([0-9]+) bytes,([0-9]+(\\.[0-9]+)?) us");

std::vector<qj_isa> jit_isas() {
  std::vector<qj_isa> v;
  for (qj_isa i : qjt::supported_isas())
    if (i != QJ_ISA_SCALAR) v.push_back(i);
  return v;
}

std::string isa_env(qj_isa isa) { return qj_isa_name(isa); }  // "avx2", "avx512", "avx512_vnni"

TEST(VerboseLog, OneLinePerGeneratedKernel) {
  for (qj_isa isa : jit_isas()) {
    Child c = run_child({{"QJ_VERBOSE", "1"}, {"QJ_MAX_ISA", isa_env(isa)}}, {"QJ_PERF_MAP"});
    ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
    const std::vector<KernelLine> ks = kernels_of(c);
    ASSERT_FALSE(ks.empty()) << c.out;
    std::multiset<std::string> generated, logged;
    std::set<std::string> held;
    for (const KernelLine& k : ks) {
      if (k.generated) generated.insert(k.name);
      held.insert(k.name);
      EXPECT_TRUE(std::regex_match(k.name, kCanonical)) << "not a canonical name: " << k.name;
      EXPECT_NE(k.name.find(std::string("__") + (isa == QJ_ISA_AVX512_VNNI ? "avx512vnni" : qj_isa_name(isa)) + "_"),
                std::string::npos)
          << k.name << " under the cap " << qj_isa_name(isa);
    }
    for (const std::string& l : lines(c.err)) {
      if (l.rfind("quantjit: jit,", 0) != 0) continue;
      std::smatch m;
      ASSERT_TRUE(std::regex_match(l, m, kJitLine)) << "malformed verbose line: " << l;
      logged.insert(m[1].str());
      EXPECT_GT(std::stoull(m[2].str()), 0u) << l;
      EXPECT_TRUE(held.count(m[1].str())) << "logged a kernel no plan holds: " << l;
    }
    const unsigned long long misses = stat_of(c, "misses");
    EXPECT_EQ(logged.size(), misses) << "one verbose line per generated kernel (= cache miss)\n" << c.err;
    EXPECT_EQ(logged, generated) << c.err;
    EXPECT_GT(stat_of(c, "hits"), 0u) << "configs 0 and 1 share kernels: the second must hit";
  }
}

TEST(VerboseLog, ScalarCapLogsTheFallback) {
  Child c = run_child({{"QJ_VERBOSE", "1"}, {"QJ_MAX_ISA", "scalar"}}, {"QJ_PERF_MAP"});
  ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
  EXPECT_TRUE(kernels_of(c).empty());
  int fallback_lines = 0;
  for (const std::string& l : lines(c.err)) {
    EXPECT_EQ(l.rfind("quantjit: jit,", 0), std::string::npos) << "a kernel was generated at the scalar cap: " << l;
    if (l.rfind("quantjit: ", 0) == 0 && l.find("gemm") != std::string::npos &&
        (l.find("fallback") != std::string::npos || l.find("falls back") != std::string::npos ||
         l.find("reference") != std::string::npos))
      fallback_lines++;
  }
  EXPECT_EQ(fallback_lines, 7) << "one fallback line per plan (7 plans)\n" << c.err;
  EXPECT_EQ(stat_of(c, "fallbacks"), 7u);
  EXPECT_EQ(stat_of(c, "misses"), 0u);
}

TEST(VerboseLog, QuietWithoutQjVerbose) {
  Child c = run_child({{"QJ_MAX_ISA", isa_env(qj_cpu_isa())}}, {"QJ_VERBOSE", "QJ_PERF_MAP"});
  ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
  for (const std::string& l : lines(c.err)) EXPECT_EQ(l.find("quantjit:"), std::string::npos) << l;
  char map_path[64];
  std::snprintf(map_path, sizeof map_path, "/tmp/perf-%d.map", c.pid);
  EXPECT_NE(access(map_path, F_OK), 0) << "a perf map was written without QJ_PERF_MAP";
}

TEST(VerboseLog, PerfMapListsEveryGeneratedKernel) {
  for (qj_isa isa : jit_isas()) {
    Child c = run_child({{"QJ_PERF_MAP", "1"}, {"QJ_MAX_ISA", isa_env(isa)}}, {"QJ_VERBOSE"});
    ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
    char map_path[64];
    std::snprintf(map_path, sizeof map_path, "/tmp/perf-%d.map", c.pid);
    const std::string map = slurp(map_path);
    unlink(map_path);
    std::map<unsigned long long, KernelLine> by_entry;
    for (const KernelLine& k : kernels_of(c))
      if (k.generated) by_entry[k.entry] = k;
    ASSERT_FALSE(by_entry.empty());
    size_t n = 0;
    const std::regex row("([0-9a-f]+) ([0-9a-f]+) ([A-Za-z0-9_]+)");
    for (const std::string& l : lines(map)) {
      std::smatch m;
      ASSERT_TRUE(std::regex_match(l, m, row)) << "malformed perf map line: " << l;
      ++n;
      const unsigned long long addr = std::stoull(m[1].str(), nullptr, 16), size = std::stoull(m[2].str(), nullptr, 16);
      auto it = by_entry.find(addr);
      ASSERT_NE(it, by_entry.end()) << "perf map names an address no plan uses: " << l;
      EXPECT_EQ(m[3].str(), it->second.name) << l;
      EXPECT_EQ(size, it->second.bytes) << l;
    }
    EXPECT_EQ(n, by_entry.size()) << "one perf map line per generated kernel\n" << map;
    EXPECT_EQ(n, stat_of(c, "misses"));
  }
}

// Two kernels with the same canonical name must be the same kernel: the key holds every parameter
// that changes the code "and nothing else" (src/core/kernel_key.h), and a name identifies a kernel
// in logs, perf maps and benchmarks (docs/kernel-naming.md). Configs 5 and 6 differ only in the
// weights' group size, which the generated code does not depend on.
TEST(VerboseLog, SameNameMeansSameKernel) {
  for (qj_isa isa : jit_isas()) {
    Child c = run_child({{"QJ_MAX_ISA", isa_env(isa)}}, {"QJ_VERBOSE", "QJ_PERF_MAP"});
    ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
    std::map<std::string, std::set<unsigned long long>> entries;
    for (const KernelLine& k : kernels_of(c)) entries[k.name].insert(k.entry);
    for (const auto& [name, e] : entries)
      EXPECT_EQ(e.size(), 1u) << qj_isa_name(isa) << ": " << e.size() << " different kernels are named " << name;
  }
}

}  // namespace
