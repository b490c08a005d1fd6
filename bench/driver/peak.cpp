// `quantjit-bench peak`: this machine's measured compute, bandwidth and gather limits, and the
// cached peak functions (peak.h) that other subcommands divide by.
//
// Compute: asmjit loops of vpdpbusd / vpmaddubsw / vfmadd231ps on N independent accumulators
// (N = 12..24, or 8..14 in the 16 ymm registers of an AVX2-only CPU; the best is kept; the
// instruction latency times the issue rate is ~8-12 on current cores, so fewer accumulators
// measure latency instead of throughput). Bandwidth: a loop of zmm loads (ymm without AVX-512;
// vpaddd with a memory operand into 8 accumulators) read over a working set, repeatedly. Gather:
// random rows summed with AVX2 loads and software prefetch, the way an embedding-bag kernel reads.
// Mix: what the other instructions of the kernels (decode, output stage, stores) cost beside
// vpdpbusd, the figure behind the ceilings README's Status gives for kernels whose multiplies
// already fill their pipes.
// Every figure is the best of several ~2 ms samples: these are limits, not typical times.
#include "driver/peak.h"

#include <asmjit/x86.h>
#include <immintrin.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "driver/cli.h"
#include "driver/commands.h"
#include "driver/report.h"
#include "driver/timing.h"
#include "src/core/isa.h"

namespace bench {
namespace {

using namespace asmjit;

std::mutex& peak_mutex() {
  static std::mutex m;
  return m;
}

JitRuntime& runtime() {
  static JitRuntime* rt = new JitRuntime();  // never destroyed: cached loops stay callable
  return *rt;
}

enum class Op { kVnni, kFma, kMaddubs, kAddChain };

using LoopFn = void (*)(uint64_t iters);
using ReadFn = void (*)(const void* p, uint64_t blocks512, uint64_t passes);

template <class Fn>
Fn finish_code(CodeHolder& code) {
  Fn fn = nullptr;
  if (runtime().add(&fn, &code) != kErrorOk) return nullptr;
  return fn;
}

// True where the loops may use EVEX forms and registers 16-31 (AVX-512 F + VL); else they keep to
// VEX forms on ymm0..15, which every AVX2 CPU runs.
bool have_evex() {
  const auto& f = qj::cpu_features();
  return f.avx512f && f.avx512vl;
}

// Zeroes a vector register in the encoding the CPU has.
void zero_vec(x86::Assembler& a, const x86::Vec& v) {
  if (have_evex()) a.vpxord(v, v, v);
  else a.vpxor(v, v, v);
}

// A loop of `iters` iterations, each issuing `accs` independent instances of op on vector
// registers of `width` bits. For kAddChain: 64 dependent `add rax, 1` per iteration (1 cycle
// each), which measures the core clock. Without AVX-512, ymm loops use ymm0..accs-1 with sources
// in ymm14 / ymm15 (accs <= 14).
LoopFn make_compute_loop(Op op, int width, int accs) {
  CodeHolder code;
  code.init(runtime().environment());
  x86::Assembler a(&code);
  auto vec = [&](int id) -> x86::Vec {
    return width == 512 ? x86::Vec(x86::zmm(id)) : x86::Vec(x86::ymm(id));
  };
  if (op == Op::kAddChain) {
    a.xor_(x86::eax, x86::eax);
    a.align(AlignMode::kCode, 64);
    Label loop = a.newLabel();
    a.bind(loop);
    for (int i = 0; i < 64; ++i) a.add(x86::rax, 1);
    a.dec(x86::rdi);
    a.jnz(loop);
    a.ret();
    return finish_code<LoopFn>(code);
  }
  const bool evex = have_evex();
  if (!evex && (width == 512 || accs > 14)) return nullptr;
  // Sources: 1.0f for FMA (accumulators grow by exact small integers: no denormals, no
  // overflow), 0x01 bytes for the integer multiplies.
  a.mov(x86::eax, op == Op::kFma ? 0x3f800000 : 0x01010101);
  x86::Vec s0 = vec(evex ? 30 : 14), s1 = vec(evex ? 31 : 15);
  a.vmovd(x86::xmm(s0.id()), x86::eax);
  a.vpbroadcastd(s0, x86::xmm(s0.id()));
  a.vpbroadcastd(s1, x86::xmm(s0.id()));
  for (int i = 0; i < accs; ++i) zero_vec(a, vec(i));
  a.align(AlignMode::kCode, 64);
  Label loop = a.newLabel();
  a.bind(loop);
  for (int i = 0; i < accs; ++i) {
    // EVEX for ymm too: AVX512-VNNI CPUs need not have the VEX-encoded AVX-VNNI.
    if (op == Op::kVnni) a.evex().vpdpbusd(vec(i), s0, s1);
    else if (op == Op::kFma) a.vfmadd231ps(vec(i), s0, s1);
    else a.vpmaddubsw(vec(i), s0, s1);  // write-only destination: independent by construction
  }
  a.dec(x86::rdi);
  a.jnz(loop);
  a.vzeroupper();
  a.ret();
  return finish_code<LoopFn>(code);
}

// Reads `blocks512` blocks of 512 bytes from p, `passes` times, into 8 accumulators: zmm loads
// with AVX-512, else ymm (two per accumulator and block).
ReadFn make_read_loop() {
  CodeHolder code;
  code.init(runtime().environment());
  x86::Assembler a(&code);
  const bool zmm = have_evex();
  auto acc = [&](int i) -> x86::Vec { return zmm ? x86::Vec(x86::zmm(i)) : x86::Vec(x86::ymm(i)); };
  for (int i = 0; i < 8; ++i) zero_vec(a, acc(i));
  Label outer = a.newLabel(), inner = a.newLabel();
  a.bind(outer);
  a.mov(x86::rax, x86::rdi);
  a.mov(x86::rcx, x86::rsi);
  a.align(AlignMode::kCode, 64);
  a.bind(inner);
  const int step = zmm ? 64 : 32;
  for (int o = 0; o < 512; o += step)
    a.vpaddd(acc(o / step % 8), acc(o / step % 8), x86::ptr(x86::rax, o));
  a.add(x86::rax, 512);
  a.dec(x86::rcx);
  a.jnz(inner);
  a.dec(x86::rdx);
  a.jnz(outer);
  a.vzeroupper();
  a.ret();
  return finish_code<ReadFn>(code);
}

// Seconds per unit of work: samples of ~target seconds, the best of `samples`. Short samples and
// the best of many: on a shared machine a sample that another process preempted is simply lost.
template <class Call>
double best_seconds_per_unit(Call&& call, double target = 0.002, int samples = 9) {
  uint64_t units = 16;
  call(units);  // warm-up (page in code and data, wake the vector unit)
  for (;;) {
    double t0 = now_seconds();
    call(units);
    double dt = now_seconds() - t0;
    if (dt > target / 8 || units > (uint64_t{1} << 40)) {
      units = std::max<uint64_t>(1, static_cast<uint64_t>(units * target / std::max(dt, 1e-9)));
      break;
    }
    units *= 8;
  }
  double best = 1e300;
  for (int s = 0; s < samples; ++s) {
    double t0 = now_seconds();
    call(units);
    best = std::min(best, (now_seconds() - t0) / units);
  }
  return best;
}

bool have_vnni() {
  const auto& f = qj::cpu_features();
  return f.avx512f && f.avx512vl && f.avx512vnni;
}
bool have_op(Op op, int width) {
  const auto& f = qj::cpu_features();
  if (op == Op::kVnni) return have_vnni();
  if (width == 512) return f.avx512f && (op == Op::kFma || f.avx512bw);
  return f.avx2 && (op != Op::kFma || f.fma);
}

ComputePeak measure_compute(Op op, int width, double ghz) {
  ComputePeak best;
  if (!have_op(op, width)) return best;
  // Ops per instruction (2 per multiply-add): FMA one per 32-bit lane; vpdpbusd four per 32-bit
  // lane; vpmaddubsw two per 16-bit lane.
  const double ops_per_instr = op == Op::kFma ? width / 32 * 2.0 : width / 4.0;
  const std::vector<int> counts =
      have_evex() ? std::vector<int>{12, 16, 24} : std::vector<int>{8, 10, 12, 14};
  for (int accs : counts) {
    LoopFn fn = make_compute_loop(op, width, accs);
    if (!fn) continue;
    double s = best_seconds_per_unit([&](uint64_t n) { fn(n); });
    double gops = accs * ops_per_instr / s * 1e-9;
    if (gops > best.gops) {
      best.gops = gops;
      best.accumulators = accs;
      best.instr_per_clock = ghz > 0 ? accs / s * 1e-9 / ghz : 0;
    }
  }
  return best;
}

// ---- mix ----
// One instruction of the kernels, emitted as instance i (0..7) of 8 independent ones: results in
// zmm8 + i, sources in zmm24 (1.0f), zmm25..27 and zmm30..31 (0x01 bytes), memory at rsi (a 4 KiB
// buffer). The loop's own vpdpbusd accumulate into zmm0..7.
struct MixOp {
  const char* instr;
  const char* operands;
  bool vbmi;  // needs AVX512-VBMI
  void (*emit)(x86::Assembler& a, int i);
};

using MixFn = void (*)(uint64_t iters, void* buf);

// A loop of `iters` iterations of 8 instances of op (op == nullptr: none), each after one of 8
// independent zmm vpdpbusd when with_vnni.
MixFn make_mix_loop(const MixOp* op, bool with_vnni) {
  CodeHolder code;
  code.init(runtime().environment());
  x86::Assembler a(&code);
  a.mov(x86::eax, 0x01010101);
  for (int r : {25, 26, 27, 30, 31}) a.vpbroadcastd(x86::zmm(r), x86::eax);
  a.mov(x86::eax, 0x3f800000);
  a.vpbroadcastd(x86::zmm(24), x86::eax);
  for (int r = 0; r < 16; ++r) a.vpxord(x86::zmm(r), x86::zmm(r), x86::zmm(r));
  a.xor_(x86::eax, x86::eax);
  a.align(AlignMode::kCode, 64);
  Label loop = a.newLabel();
  a.bind(loop);
  for (int i = 0; i < 8; ++i) {
    if (with_vnni) a.vpdpbusd(x86::zmm(i), x86::zmm(30), x86::zmm(31));
    if (op) op->emit(a, i);
  }
  a.dec(x86::rdi);
  a.jnz(loop);
  a.vzeroupper();
  a.ret();
  return finish_code<MixFn>(code);
}

const std::vector<MixOp>& mix_ops() {
  using namespace x86;
  static const std::vector<MixOp> ops = {
      {"vpdpbusd", "zmm", false, [](Assembler& a, int i) { a.vpdpbusd(zmm(8 + i), zmm(30), zmm(31)); }},
      {"vfmadd231ps", "zmm", false, [](Assembler& a, int i) { a.vfmadd231ps(zmm(8 + i), zmm(24), zmm(24)); }},
      {"vcvtdq2ps", "zmm", false, [](Assembler& a, int i) { a.vcvtdq2ps(zmm(8 + i), zmm(25)); }},
      {"vcvtps2dq", "zmm", false, [](Assembler& a, int i) { a.vcvtps2dq(zmm(8 + i), zmm(24)); }},
      {"vcvtph2ps", "zmm, ymm", false, [](Assembler& a, int i) { a.vcvtph2ps(zmm(8 + i), ymm(24)); }},
      {"vpaddd", "zmm", false, [](Assembler& a, int i) { a.vpaddd(zmm(8 + i), zmm(8 + i), zmm(25)); }},
      {"vpandd", "zmm", false, [](Assembler& a, int i) { a.vpandd(zmm(8 + i), zmm(25), zmm(26)); }},
      {"vpmaxsd", "zmm", false, [](Assembler& a, int i) { a.vpmaxsd(zmm(8 + i), zmm(8 + i), zmm(25)); }},
      {"vpackssdw", "zmm", false, [](Assembler& a, int i) { a.vpackssdw(zmm(8 + i), zmm(25), zmm(26)); }},
      {"vpackuswb", "zmm", false, [](Assembler& a, int i) { a.vpackuswb(zmm(8 + i), zmm(25), zmm(26)); }},
      {"vpsrlw", "zmm, imm", false, [](Assembler& a, int i) { a.vpsrlw(zmm(8 + i), zmm(26), 4); }},
      {"vpshufb", "zmm", false, [](Assembler& a, int i) { a.vpshufb(zmm(8 + i), zmm(27), zmm(26)); }},
      {"vpshufd", "zmm, imm", false, [](Assembler& a, int i) { a.vpshufd(zmm(8 + i), zmm(26), 0x55); }},
      {"vpermb", "zmm", true, [](Assembler& a, int i) { a.vpermb(zmm(8 + i), zmm(26), zmm(27)); }},
      {"vpermd", "zmm", false, [](Assembler& a, int i) { a.vpermd(zmm(8 + i), zmm(26), zmm(27)); }},
      // (the destination is also the first table: one chain per instance, one link a loop)
      {"vpermt2d", "zmm", false, [](Assembler& a, int i) { a.vpermt2d(zmm(8 + i), zmm(26), zmm(27)); }},
      {"vpmovzxbd", "zmm, m128", false, [](Assembler& a, int i) { a.vpmovzxbd(zmm(8 + i), xmmword_ptr(rsi, 16 * i)); }},
      {"vpbroadcastd", "zmm, m32", false, [](Assembler& a, int i) { a.vpbroadcastd(zmm(8 + i), dword_ptr(rsi, 4 * i)); }},
      {"vpmovusdb", "xmm, zmm", false, [](Assembler& a, int i) { a.vpmovusdb(xmm(8 + i), zmm(25)); }},
      {"vpmovusdb", "m128, zmm", false, [](Assembler& a, int i) { a.vpmovusdb(xmmword_ptr(rsi, 1024 + 16 * i), zmm(25)); }},
      {"vmovdqu32", "m512, zmm", false, [](Assembler& a, int i) { a.vmovdqu32(zmmword_ptr(rsi, 2048 + 64 * i), zmm(25)); }},
      {"vmovdqu32", "m128, xmm", false, [](Assembler& a, int i) { a.vmovdqu32(xmmword_ptr(rsi, 1024 + 16 * i), xmm(25)); }},
      {"mov", "m64, r64", false, [](Assembler& a, int i) { a.mov(qword_ptr(rsi, 3072 + 8 * i), rax); }},
  };
  return ops;
}

// Share of [p, p+bytes) backed by transparent huge pages, from /proc/self/smaps.
double thp_fraction(const void* p, size_t bytes) {
  std::ifstream f("/proc/self/smaps");
  std::string line;
  uintptr_t lo = reinterpret_cast<uintptr_t>(p), hi = lo + bytes;
  double huge_kb = 0;
  bool in = false;
  while (std::getline(f, line)) {
    unsigned long a = 0, b = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &a, &b) == 2 && line.find(':') > line.find(' ')) {
      in = a < hi && b > lo;
      continue;
    }
    if (in && line.rfind("AnonHugePages:", 0) == 0) {
      double kb = 0;
      std::sscanf(line.c_str() + 14, "%lf", &kb);
      huge_kb += kb;
    }
  }
  return std::min(1.0, huge_kb * 1024.0 / static_cast<double>(bytes));
}

// The two 32-byte halves of the 64-byte line at p, added.
__attribute__((target("avx2"))) inline __m256i line_sum(const uint8_t* p) {
  return _mm256_add_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)),
                          _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32)));
}

// ymm loads on every CPU: a row costs 20-60 ns of DRAM latency (PERF.md), the 2-16 loads of a
// row a few cycles, whatever their width.
__attribute__((target("avx2"))) uint32_t gather_sum(const uint8_t* table, size_t row_bytes,
                                                    const uint64_t* idx, size_t n, int pf) {
  __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
  const size_t lines = row_bytes / 64;
  for (size_t i = 0; i < n; ++i) {
    if (pf) {
      const char* q = reinterpret_cast<const char*>(table + idx[i + pf] * row_bytes);
      for (size_t l = 0; l < lines; ++l) _mm_prefetch(q + 64 * l, _MM_HINT_T0);
    }
    const uint8_t* r = table + idx[i] * row_bytes;
    for (size_t l = 0; l < lines; l += 2) {
      acc0 = _mm256_add_epi32(acc0, line_sum(r + 64 * l));
      if (l + 1 < lines) acc1 = _mm256_add_epi32(acc1, line_sum(r + 64 * l + 64));
    }
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi32(acc0, acc1));
  uint32_t s = 0;
  for (uint32_t v : lanes) s += v;
  return s;
}

struct GatherTable {
  PageBuffer m;
  double thp = 0;
};
std::map<std::pair<size_t, bool>, GatherTable>& gather_tables() {
  static std::map<std::pair<size_t, bool>, GatherTable> t;
  return t;
}

std::string human_bytes(size_t b) {
  char buf[32];
  if (b >= (size_t{1} << 30) && b % (size_t{1} << 30) == 0)
    std::snprintf(buf, sizeof buf, "%zu GiB", b >> 30);
  else if (b >= (size_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%g MiB", b / 1048576.0);
  else
    std::snprintf(buf, sizeof buf, "%g KiB", b / 1024.0);
  return buf;
}

}  // namespace

PageBuffer::PageBuffer(size_t bytes, bool huge) {
  const size_t align = size_t{2} << 20;
  map_bytes_ = bytes + align;
  base_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base_ == MAP_FAILED) {
    base_ = nullptr;
    return;
  }
  uintptr_t u = (reinterpret_cast<uintptr_t>(base_) + align - 1) & ~(align - 1);
  p_ = reinterpret_cast<uint8_t*>(u);
  bytes_ = bytes;
  madvise(p_, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  // Distinct bytes per page so nothing can be deduplicated or compressed by the host.
  for (size_t i = 0; i < bytes; i += 4096)
    std::memset(p_ + i, static_cast<int>(i >> 12), std::min<size_t>(4096, bytes - i));
}

PageBuffer::~PageBuffer() {
  if (base_) munmap(base_, map_bytes_);
}

PageBuffer::PageBuffer(PageBuffer&& o) noexcept { *this = std::move(o); }

PageBuffer& PageBuffer::operator=(PageBuffer&& o) noexcept {
  if (this != &o) {
    if (base_) munmap(base_, map_bytes_);
    p_ = o.p_, bytes_ = o.bytes_, base_ = o.base_, map_bytes_ = o.map_bytes_;
    o.p_ = nullptr, o.bytes_ = 0, o.base_ = nullptr, o.map_bytes_ = 0;
  }
  return *this;
}

double PageBuffer::thp_fraction() const { return p_ ? bench::thp_fraction(p_, bytes_) : 0; }

double measure_core_ghz() {
  std::lock_guard<std::mutex> lock(peak_mutex());
  static double ghz = -1;
  if (ghz < 0) {
    LoopFn fn = make_compute_loop(Op::kAddChain, 0, 0);
    ghz = fn ? 64.0 / best_seconds_per_unit([&](uint64_t n) { fn(n); }) * 1e-9 : 0;
  }
  return ghz;
}

namespace {
// Measured once per (op, width) and cached.
ComputePeak cached_compute(Op op, int width) {
  static ComputePeak cache[3][2];
  static bool done[3][2] = {};
  const int o = static_cast<int>(op), w = width == 512 ? 0 : 1;
  const double ghz = measure_core_ghz();
  std::lock_guard<std::mutex> lock(peak_mutex());
  if (!done[o][w]) {
    cache[o][w] = measure_compute(op, width, ghz);
    done[o][w] = true;
  }
  return cache[o][w];
}
}  // namespace

ComputePeak measure_vnni(int width) { return cached_compute(Op::kVnni, width); }
ComputePeak measure_fma(int width) { return cached_compute(Op::kFma, width); }
ComputePeak measure_maddubs(int width) { return cached_compute(Op::kMaddubs, width); }

double measure_vnni_gops(int width) { return measure_vnni(width).gops; }
double measure_fma_gflops(int width) { return measure_fma(width).gops; }

TierPeak tier_peak(qj_isa isa, bool float_math) {
  if (float_math) {
    if (isa >= QJ_ISA_AVX512) return {measure_fma(512).gops, "vfmadd231ps zmm"};
    if (isa == QJ_ISA_AVX2) return {measure_fma(256).gops, "vfmadd231ps ymm"};
    return {};
  }
  if (isa >= QJ_ISA_AVX512_VNNI) return {measure_vnni(512).gops, "vpdpbusd zmm"};
  if (isa == QJ_ISA_AVX512) return {measure_maddubs(512).gops, "vpmaddubsw zmm"};
  if (isa == QJ_ISA_AVX2) return {measure_maddubs(256).gops, "vpmaddubsw ymm"};
  return {};
}

const CacheSizes& cache_sizes() {
  static const CacheSizes c = [] {
    CacheSizes s;
    auto from_sysfs = [](int index) -> size_t {
      std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
      std::string v;
      if (!(f >> v) || v.empty()) return 0;
      size_t n = std::strtoull(v.c_str(), nullptr, 10);
      char u = v.back();
      return u == 'K' ? n << 10 : u == 'M' ? n << 20 : n;
    };
    long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE),
         l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    // sysfs index0 = L1d, index2 = L2, index3 = L3 on x86 Linux.
    size_t f1 = from_sysfs(0), f2 = from_sysfs(2), f3 = from_sysfs(3);
    if (f1) s.l1 = f1; else if (l1 > 0) s.l1 = static_cast<size_t>(l1);
    if (f2) s.l2 = f2; else if (l2 > 0) s.l2 = static_cast<size_t>(l2);
    if (f3) s.l3 = f3; else if (l3 > 0) s.l3 = static_cast<size_t>(l3);
    return s;
  }();
  return c;
}

static ReadFn read_loop() {
  static ReadFn fn = nullptr;
  std::lock_guard<std::mutex> lock(peak_mutex());
  if (!fn) fn = make_read_loop();
  return fn;
}

void read_once(const void* p, size_t bytes) {
  if (ReadFn fn = read_loop()) fn(p, std::max<size_t>(1, bytes / 512), 1);
}

double measure_bandwidth(size_t bytes) {
  ReadFn fn = read_loop();
  static std::map<size_t, double> cache;
  bytes = std::max<size_t>(512, bytes / 512 * 512);
  {
    std::lock_guard<std::mutex> lock(peak_mutex());
    auto it = cache.find(bytes);
    if (it != cache.end()) return it->second;
  }
  if (!fn) return 0;
  PageBuffer m(bytes, true);
  if (!m) return 0;
  const uint64_t blocks = bytes / 512;
  double s = best_seconds_per_unit([&](uint64_t passes) { fn(m.data(), blocks, passes); });
  double gbs = bytes / s * 1e-9;
  std::lock_guard<std::mutex> lock(peak_mutex());
  cache[bytes] = gbs;
  return gbs;
}

const char* level_name(MemLevel l) {
  switch (l) {
    case MemLevel::kL1: return "l1";
    case MemLevel::kL2: return "l2";
    case MemLevel::kL3: return "l3";
    case MemLevel::kDram: return "dram";
  }
  return "?";
}

MemLevel level_of(size_t bytes) {
  const CacheSizes& c = cache_sizes();
  // 3/4 of a level: the rest holds A, C, stacks and code, and caches are not fully associative.
  if (bytes <= c.l1 / 4 * 3) return MemLevel::kL1;
  if (bytes <= c.l2 / 4 * 3) return MemLevel::kL2;
  if (bytes <= c.l3 / 4 * 3) return MemLevel::kL3;
  return MemLevel::kDram;
}

size_t level_working_set(MemLevel l) {
  const CacheSizes& c = cache_sizes();
  switch (l) {
    case MemLevel::kL1: return c.l1 / 2;
    case MemLevel::kL2: return c.l2 / 2;
    case MemLevel::kL3: return std::max(c.l2 * 4, c.l3 / 4);  // well past L2, well inside L3
    case MemLevel::kDram: return std::max<size_t>(size_t{256} << 20, c.l3 * 8);
  }
  return 0;
}

double level_bandwidth(MemLevel l) { return measure_bandwidth(level_working_set(l)); }

GatherResult measure_gather(size_t row_bytes, bool huge_pages, int prefetch, size_t table_bytes) {
  GatherResult r;
  r.prefetch = prefetch;
  row_bytes = std::max<size_t>(64, row_bytes / 64 * 64);
  GatherTable& t = gather_tables()[{table_bytes, huge_pages}];
  if (!t.m) {
    t.m = PageBuffer(table_bytes, huge_pages);
    if (!t.m) return r;
    t.thp = t.m.thp_fraction();
  }
  r.thp_fraction = t.thp;
  const uint64_t rows = table_bytes / row_bytes;
  const size_t n = size_t{1} << 18;  // lookups per sample
  std::vector<uint64_t> idx(n + 64);
  uint64_t x = 0x9e3779b97f4a7c15ull ^ (row_bytes * 1315423911ull) ^ (huge_pages ? 7 : 0);
  double best = 1e300;
  for (int s = 0; s < 4; ++s) {
    // Fresh random rows each sample, so a sample never finds the previous one's rows in cache.
    for (auto& v : idx) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      v = x % rows;
    }
    double t0 = now_seconds();
    uint32_t sum = gather_sum(t.m.data(), row_bytes, idx.data(), n, prefetch);
    __asm__ volatile("" : : "r"(sum));  // keep the loads
    double dt = now_seconds() - t0;
    if (s > 0) best = std::min(best, dt);  // sample 0 warms the TLB/page-walk caches and code
  }
  r.ns_per_row = best / n * 1e9;
  r.rows_per_s = n / best;
  r.gbs = r.rows_per_s * row_bytes * 1e-9;
  return r;
}

GatherResult gather_limit(size_t row_bytes, bool huge_pages, size_t table_bytes) {
  static std::map<std::tuple<size_t, bool, size_t>, GatherResult> cache;
  auto key = std::make_tuple(row_bytes, huge_pages, table_bytes);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  GatherResult best;
  for (int pf : {4, 8, 16, 32}) {
    GatherResult g = measure_gather(row_bytes, huge_pages, pf, table_bytes);
    if (g.rows_per_s > best.rows_per_s) best = g;
  }
  cache[key] = best;
  return best;
}

void release_gather_tables() {
  gather_tables().clear();
}

}  // namespace bench

// ---- the `peak` subcommand ----------------------------------------------------------------------

static int peak_usage(int status = 2) {  // --help (status 0): on stdout
  std::fprintf(status ? stderr : stdout,
               "usage: quantjit-bench peak [--format table|csv|json] [--only compute|mix|bandwidth|gather]\n"
               "                           [--table-mib N] [--sweep]\n"
               "  Measures one core (pin it: taskset -c 1):\n"
               "  compute    vpdpbusd zmm/ymm (GOPS) and vfmadd231ps zmm/ymm (GFLOPS), 12-24 accumulators\n"
               "  mix        cycles of the kernels' other instructions alone and beside vpdpbusd zmm:\n"
               "             vnni_slots = the vpdpbusd issue cycles one of them takes (8 of each mixed)\n"
               "  bandwidth  sequential zmm reads over L1 / L2 / L3 / DRAM working sets (GB/s);\n"
               "             --sweep adds working sets from 8 KiB to 1 GiB in steps of 2x\n"
               "  gather     random rows of 64..512 B summed, with software prefetch, from a table of\n"
               "             --table-mib MiB (default 1024) on 2 MiB (THP) and on 4 KiB pages\n");
  return status;
}

int cmd_peak(int argc, char** argv) {
  using namespace bench;
  Format fmt = Format::kTable;
  std::string only;
  size_t table_mib = 1024;
  bool sweep = false;
  // False after a message (cli.h) on a bad argument.
  auto parse = [&]() -> bool {
    const char* cmd = "peak";
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
      if (a == "--sweep") {
        sweep = true;
        continue;
      }
      if (a != "--format" && a != "--only" && a != "--table-mib") return arg_error(cmd, "unknown option '%s'", a.c_str());
      if (v) ++i;
      int64_t x = 0;
      if (a == "--format") {
        if (!parse_format(v, &fmt)) return bad_value(cmd, a, v, "table, csv or json");
      } else if (a == "--only") {
        only = v ? v : "";
        if (only != "compute" && only != "mix" && only != "bandwidth" && only != "gather")
          return bad_value(cmd, a, v, "compute, mix, bandwidth or gather");
      } else {  // --table-mib
        if (!v || !parse_int(v, 64, int64_t{1} << 20, &x)) return bad_value(cmd, a, v, "a table size from 64 MiB up");
        table_mib = static_cast<size_t>(x);
      }
    }
    return true;
  };
  for (int i = 1; i < argc; ++i)
    if (is_help(argv[i])) return peak_usage(0);
  if (!parse()) return 2;
  if (fmt == Format::kCsv && only.empty()) {  // (the sections have different columns)
    arg_error("peak", "--format csv prints one section: add --only compute|mix|bandwidth|gather");
    return 2;
  }
  const bool table = fmt == Format::kTable;
  if (only.empty() || only == "compute") {
    Report rep(fmt);
    double ghz = measure_core_ghz();
    struct Row { const char* instr; int width; Op op; };
    std::string absent;
    for (Row r : {Row{"vpdpbusd", 512, Op::kVnni}, Row{"vpdpbusd", 256, Op::kVnni},
                  Row{"vpmaddubsw", 512, Op::kMaddubs}, Row{"vpmaddubsw", 256, Op::kMaddubs},
                  Row{"vfmadd231ps", 512, Op::kFma}, Row{"vfmadd231ps", 256, Op::kFma}}) {
      const char* reg = r.width == 512 ? "zmm" : "ymm";
      if (!have_op(r.op, r.width)) {  // not a zero: a row this CPU cannot measure is left out
        absent += std::string(absent.empty() ? "" : ", ") + r.instr + " " + reg;
        continue;
      }
      ComputePeak p = r.op == Op::kVnni ? measure_vnni(r.width)
                      : r.op == Op::kFma ? measure_fma(r.width) : measure_maddubs(r.width);
      rep.add()
          .set("kind", "compute")
          .set("instr", r.instr)
          .set("reg", reg)
          .set("accumulators", p.accumulators)
          .set("value", p.gops, 1)
          .set("unit", r.op == Op::kFma ? "GFLOPS" : "GOPS")
          .set("instr_per_clock", p.instr_per_clock, 2)
          .set("ghz", ghz, 2);
    }
    rep.note("clock (dependent integer adds): " + std::to_string(ghz).substr(0, 4) +
             " GHz; ops count a multiply-add as 2");
    if (!absent.empty()) rep.note("not measured (this CPU lacks them): " + absent);
    rep.finish();
    if (table) std::printf("\n");
  }
  if (only == "mix" && !have_vnni())
    std::fprintf(stderr,
                 "quantjit-bench peak: the mix section measures beside vpdpbusd zmm, which this CPU lacks "
                 "(AVX512-VNNI)\n");
  if ((only.empty() || only == "mix") && have_vnni()) {
    Report rep(fmt);
    const double ghz = measure_core_ghz();
    alignas(64) static uint8_t buf[4096];
    auto cycles = [&](MixFn fn) {  // per loop iteration
      return best_seconds_per_unit([&](uint64_t n) { fn(n, buf); }) * ghz * 1e9;
    };
    const MixFn vnni_only = make_mix_loop(nullptr, true);  // 8 vpdpbusd
    const double base = vnni_only ? cycles(vnni_only) : 0;
    for (const MixOp& op : mix_ops()) {
      if (op.vbmi && !qj::cpu_features().avx512vbmi) continue;
      const MixFn fa = make_mix_loop(&op, false), fm = make_mix_loop(&op, true);
      if (!vnni_only || !fa || !fm) {
        std::fprintf(stderr, "quantjit-bench peak: could not generate the %s loops\n", op.instr);
        continue;
      }
      const double alone = cycles(fa), mixed = cycles(fm);
      rep.add()
          .set("kind", "mix")
          .set("instr", op.instr)
          .set("operands", op.operands)
          .set("alone_cycles", alone / 8, 2)
          .set("mixed_cycles", mixed, 2)
          .set("vnni_alone_cycles", base, 2)
          .set("vnni_slots", (mixed - base) / 8, 2);
    }
    rep.note("8 independent instances per loop, alone (alone_cycles: per instance) and each after one of 8 "
             "independent zmm vpdpbusd (mixed_cycles: per loop; vnni_alone_cycles: the 8 vpdpbusd alone); "
             "vnni_slots = (mixed - vnni_alone) / 8; cycles at the measured clock");
    rep.finish();
    if (table) std::printf("\n");
  }
  if (only.empty() || only == "bandwidth") {
    Report rep(fmt);
    const CacheSizes& c = cache_sizes();
    for (MemLevel l : {MemLevel::kL1, MemLevel::kL2, MemLevel::kL3, MemLevel::kDram}) {
      size_t ws = level_working_set(l);
      rep.add()
          .set("kind", "bandwidth")
          .set("level", level_name(l))
          .set("working_set", human_bytes(ws))
          .set("bytes", static_cast<int64_t>(ws))
          .set("gbs", level_bandwidth(l), 1);
    }
    if (sweep) {
      for (size_t ws = size_t{8} << 10; ws <= (size_t{1} << 30); ws *= 2)
        rep.add()
            .set("kind", "bandwidth")
            .set("level", std::string("(") + level_name(level_of(ws)) + ")")
            .set("working_set", human_bytes(ws))
            .set("bytes", static_cast<int64_t>(ws))
            .set("gbs", measure_bandwidth(ws), 1);
    }
    rep.note(std::string("sequential ") + (have_evex() ? "zmm" : "ymm") +
             " reads, one core, 2 MiB pages; caches: L1d " + human_bytes(c.l1) + ", L2 " + human_bytes(c.l2) +
             ", L3 " + human_bytes(c.l3) + " (shared)");
    rep.finish();
    if (table) std::printf("\n");
  }
  if (only.empty() || only == "gather") {
    Report rep(fmt);
    const size_t tb = table_mib << 20;
    for (bool huge : {true, false}) {
      for (size_t rb : {64, 128, 256, 512}) {
        GatherResult best = gather_limit(rb, huge, tb);
        GatherResult none = measure_gather(rb, huge, 0, tb);
        rep.add()
            .set("kind", "gather")
            .set("table", human_bytes(tb))
            .set("pages", huge ? "2M" : "4K")
            .set("thp_fraction", best.thp_fraction, 2)
            .set("row_bytes", static_cast<int64_t>(rb))
            .set("prefetch", best.prefetch)
            .set("ns_per_row", best.ns_per_row, 1)
            .set("mrows_per_s", best.rows_per_s * 1e-6, 1)
            .set("gbs", best.gbs, 2)
            .set("ns_per_row_no_prefetch", none.ns_per_row, 1);
      }
      release_gather_tables();  // one table resident at a time
    }
    rep.note("random rows summed with ymm loads; prefetch = best distance in rows of {4,8,16,32}");
    rep.finish();
  }
  return 0;
}
