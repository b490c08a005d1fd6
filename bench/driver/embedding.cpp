// `quantjit-bench embedding`: embedding-bag (and the fused row-wise AdaGrad) over FBGEMM's
// benchmark grid and the DLRM-DCNv2 multi-table grid, single thread (pin it: taskset -c 1).
//
// Modes, per case (row format, dim, index width, prefetch distance and hint, weights):
//  - warm:  the same indices every call (FBGEMM's "hot"): the rows sit in the caches;
//  - cold:  every line of every row the call reads, and the index, offset, weight and output
//           arrays, are flushed (clflushopt) before each timed call, as FBGEMM's benchmark does;
//  - fresh: new random indices on every call, never reused in the process: PERF.md's
//           side-by-side "cold (THP)" column, the realistic DRAM case.
// Reported: median seconds per call; ns_per_row = seconds / lookups; rows_per_s; gbps = row bytes
// read per second; fbgemm_ns_per_row = FBGEMM's best figure for the configuration from PERF.md
// (measured on an Intel machine of this kind; FBGEMM is not installed here, so not in this
// process) and vs_fbgemm = its ratio to ours. Two random-gather limits (DRAM modes only):
//  - limit_ns_per_row / limit_fraction: `quantjit-bench peak`'s gather_limit (bench/driver/
//    peak.h) for rows of round_up(row bytes, 64) from a table of the same size and page kind;
//    it prefetches with prefetcht0 only, so a kernel using prefetcht2 can exceed it;
//  - layout_limit_ns / layout_fraction: measured here on the very table of the case: a minimal
//    loop touching every line of the same unaligned rows, with the best of prefetcht0/t2 and
//    distances 8..128, timed interleaved with the kernel round by round (the machine is shared:
//    noise then hits both alike). For SPLIT MX rows it ignores the scale array (optimistic).
// Every case is checked against the scalar reference (byte-exact) before it is timed.
#include <quantjit/quantjit.h>
#include <sys/mman.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "driver/cli.h"
#include "driver/commands.h"
#include "driver/table_util.h"
#include "driver/peak.h"
#include "driver/report.h"
#include "driver/shapes.h"
#include "driver/timing.h"
#include "src/formats/half.h"
#include "src/ref/embedding_bag_ref.h"
#include "src/ref/rowwise_adagrad_ref.h"

namespace {

using qjb::settle_table;
using qjb::flush_bytes;
using qjb::flush_rows;
using qjb::time_mode;
using qjb::thp_share;
using qjb::xorshift;

using namespace bench;

struct RowFmt {
  const char* name;
  qj_dtype t;
};
const RowFmt kRowFmts[] = {{"fused8", QJ_FUSED_8BIT}, {"fused4", QJ_FUSED_4BIT}, {"fused2", QJ_FUSED_2BIT},
                           {"f32", QJ_F32},           {"f16", QJ_F16},           {"bf16", QJ_BF16},
                           {"mxfp4", QJ_MXFP4_E2M1},  {"mxint8", QJ_MXINT8},     {"mxfp8_e4m3", QJ_MXFP8_E4M3},
                           {"mxfp8_e5m2", QJ_MXFP8_E5M2}};

bool is_mx_split(qj_dtype t) { return t == QJ_MXINT8 || t == QJ_MXFP8_E4M3 || t == QJ_MXFP8_E5M2; }

const char* fmt_name(qj_dtype t) {
  for (const RowFmt& r : kRowFmts)
    if (r.t == t) return r.name;
  return "?";
}

// FBGEMM's best per-row figure from PERF.md for (format, dim, mode, prefetch), ns; 0 if none.
// 8-bit and 4/2-bit: EmbeddingSpMDM / EmbeddingSpMDMNBit (898 lookups per call; the lower of
// the per-call table / 898 and the side-by-side ns-per-row table); fp32/fp16: 1110 lookups, hot.
double fbgemm_ns(qj_dtype t, int64_t dim, const std::string& mode, bool pf) {
  struct E {
    qj_dtype t;
    int64_t dim;
    double warm_pf, warm_nopf, cold_pf, cold_nopf, fresh_pf;
  };
  // warm_pf: the lower of hot-prefetch (per call / 898) and the side-by-side warm column;
  // warm_nopf, cold_*: FBGEMM's own benchmark (per call / 898; cold = flushed before the call);
  // fresh_pf: the side-by-side "cold (THP)" column (fresh random indices on every call).
  static const E tab[] = {
      {QJ_FUSED_8BIT, 32, 2.7, 3.23, 11.7, 15.6, 13.0},    {QJ_FUSED_8BIT, 64, 3.3, 4.23, 14.1, 27.8, 18.0},
      {QJ_FUSED_8BIT, 128, 6.1, 8.8, 34.5, 46.8, 29.0},    {QJ_FUSED_8BIT, 256, 12.1, 14.25, 41.2, 86.9, 60.0},
      {QJ_FUSED_8BIT, 512, 24.9, 27.2, 78.0, 157.0, 127.0}, {QJ_FUSED_8BIT, 1024, 49.0, 51.2, 136.0, 292.0, 200.0},
      {QJ_FUSED_4BIT, 32, 4.1, 4.1, 23.4, 0, 20.0},        {QJ_FUSED_4BIT, 64, 5.7, 5.7, 23.4, 0, 23.0},
      {QJ_FUSED_4BIT, 128, 10.0, 10.0, 18.9, 0, 21.0},     {QJ_FUSED_4BIT, 256, 18.6, 18.6, 30.1, 0, 36.0},
      {QJ_FUSED_2BIT, 32, 5.35, 5.35, 17.8, 0, 0},         {QJ_FUSED_2BIT, 64, 6.1, 6.1, 22.3, 0, 0},
      {QJ_FUSED_2BIT, 128, 11.1, 11.1, 37.9, 0, 0},        {QJ_FUSED_2BIT, 256, 21.2, 21.2, 25.6, 0, 0},
      {QJ_F32, 32, 3.06, 3.06, 0, 0, 0},                   {QJ_F32, 128, 5.3, 5.3, 0, 0, 0},
      {QJ_F32, 256, 18.9, 18.9, 0, 0, 0},                  {QJ_F16, 32, 2.25, 2.25, 0, 0, 0},
      {QJ_F16, 128, 4.6, 4.6, 0, 0, 0},                    {QJ_F16, 256, 17.1, 17.1, 0, 0, 0},
  };
  for (const E& e : tab) {
    if (e.t != t || e.dim != dim) continue;
    if (mode == "warm") return pf ? e.warm_pf : e.warm_nopf;
    if (mode == "fresh") return pf ? e.fresh_pf : 0;
    return pf ? e.cold_pf : e.cold_nopf;
  }
  return 0;
}

int64_t row_bytes(qj_dtype t, int64_t dim) { return qj::ref::emb_row_bytes(t, dim, false); }

// A table in anonymous memory: THP (qj_embedding_table_alloc) or 4 KiB pages.
struct Table {
  uint8_t* p = nullptr;
  size_t bytes = 0;
  bool huge = true;
  Table() = default;
  Table(size_t b, bool h) : bytes(b), huge(h) {
    if (b == 0) return;  // (no array: p stays NULL)
    if (h) {
      p = static_cast<uint8_t*>(qj_embedding_table_alloc(b));
    } else {
      void* m = mmap(nullptr, b, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m != MAP_FAILED) {
#ifdef MADV_NOHUGEPAGE
        madvise(m, b, MADV_NOHUGEPAGE);
#endif
        p = static_cast<uint8_t*>(m);
      }
    }
  }
  ~Table() {
    if (!p) return;
    if (huge)
      qj_embedding_table_free(p, bytes);
    else
      munmap(p, bytes);
  }
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;
};



// Random rows: float rows hold small values, fused rows random codes with a sane scale / bias.
void fill_table(Table& tb, qj_dtype t, int64_t dim, int64_t rows, uint64_t seed) {
  const int64_t rb = row_bytes(t, dim);
  uint64_t x = seed | 1;
  uint64_t* w = reinterpret_cast<uint64_t*>(tb.p);
  const size_t words = static_cast<size_t>(rows * rb) / 8;
  if (t == QJ_F32 || t == QJ_F16 || t == QJ_BF16) {
    // a fixed exponent keeps sums finite: values in [1, 2) or [-2, -1)
    for (size_t i = 0; i < words; ++i) {
      uint64_t r = xorshift(x);
      if (t == QJ_F32)
        w[i] = (r & 0x807fffff807fffffull) | 0x3f8000003f800000ull;
      else if (t == QJ_F16)
        w[i] = (r & 0x83ff83ff83ff83ffull) | 0x3c003c003c003c00ull;
      else
        w[i] = (r & 0x807f807f807f807full) | 0x3f803f803f803f80ull;
    }
    return;
  }
  for (size_t i = 0; i < words; ++i) w[i] = xorshift(x);
  if (t == QJ_MXFP4_E2M1) {  // scale bytes near 1; codes stay random
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < (dim + 31) / 32; ++b) tb.p[r * rb + b * 17 + 16] = static_cast<uint8_t>(120 + b % 8);
    return;
  }
  if (is_mx_split(t)) {  // no NaN / Inf codes
    for (size_t i = 0; i < static_cast<size_t>(rows * rb); ++i) tb.p[i] &= t == QJ_MXFP8_E5M2 ? 0xbb : 0xf7;
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = tb.p + r * rb;
    const float s = 0.01f, b = -0.5f;
    if (t == QJ_FUSED_8BIT) {
      std::memcpy(row + dim, &s, 4);
      std::memcpy(row + dim + 4, &b, 4);
    } else {
      const int64_t data = rb - 4;
      uint16_t s16 = qj::f32_to_f16(s), b16 = qj::f32_to_f16(b);
      std::memcpy(row + data, &s16, 2);
      std::memcpy(row + data + 2, &b16, 2);
    }
  }
}


struct Options {
  Format fmt = Format::kTable;
  std::string shapes = "fbgemm";
  std::vector<qj_dtype> types;
  std::vector<int> index_bits = {64};
  std::vector<int> prefetch = {QJ_PREFETCH_AUTO};
  std::vector<int> hints = {QJ_PREFETCH_HINT_AUTO};
  std::vector<int> weighted = {0};
  std::vector<std::string> modes = {"warm", "cold"};
  bool huge = true;
  bool limit = true;
  bool interleave = false;  // time a case's distances and hints in one series, calls alternating
  bool adagrad = false;
  qj_update_mode update = QJ_UPDATE_COALESCED;  // --adagrad: --update coalesced|occurrence
  int64_t max_rows = 0;    // cap rows per table (0: the shape's)
  int64_t batch = 0;       // override the batch (bags); dlrm default 512
  int reps = 0;
  int threads = 1;            // > 1: qj_embedding_bag_run_parallel_ex / the AdaGrad's num_threads
  std::vector<int64_t> dims;  // restrict to these dims
};

int usage(int status = 2) {  // --help (status 0): on stdout
  std::fprintf(status ? stderr : stdout,
               "usage: quantjit-bench embedding [options]\n"
               "  --shapes fbgemm|dlrm|FILE  FBGEMM's grid (batch,rows,dim,avg_len) or the DLRM-DCNv2\n"
               "                             26-table grid (table,rows,dim,pooling); default fbgemm\n"
               "  --rows LIST     row formats: fused8,fused4,fused2,f32,f16,bf16,mxfp4,mxint8,mxfp8_e4m3,\n"
               "                  mxfp8_e5m2 or all (default fused8,fused4)\n"
               "  --dims LIST     only these dims\n"
               "  --index 32,64   index widths (default 64)\n"
               "  --prefetch LIST distances (0 = off, auto = library default; default auto)\n"
               "  --hint LIST     prefetch instruction: auto,t0,t1,t2,nta (default auto)\n"
               "  --weighted 0,1  per-index weights (default 0)\n"
               "  --mode LIST     warm,cold,fresh (default warm,cold); see the file comment\n"
               "  --pages thp|4k  table pages (default thp: qj_embedding_table_alloc)\n"
               "  --max-rows N    cap rows per table (dlrm default 4000000, --adagrad 1000000)\n"
               "  --batch N       bags per call (dlrm default 512)\n"
               "  --adagrad       time qj_rowwise_adagrad_fused (fp32 / fp16 tables, deterministic)\n"
               "  --update U      --adagrad update mode: coalesced (default) | occurrence (FBGEMM's\n"
               "                  RowWiseSparseAdaGradFused order: one step per occurrence)\n"
               "  --no-limit      skip the random-gather limit measurement\n"
               "  --interleave    time the --prefetch / --hint configurations of a case in one series,\n"
               "                  their calls alternating (and the limit loop's), 1001 rounds by default;\n"
               "                  adds the quartiles ns_q1 / ns_q3: to compare configurations on a\n"
               "                  noisy machine\n"
               "  --reps N        timed samples per case\n"
               "  --threads N     threads per call (default 1): qj_embedding_bag_run_parallel_ex or the\n"
               "                  AdaGrad's num_threads; pin with taskset -c 0,1 ...\n"
               "  --format F      table | csv | json (JSON Lines)\n");
  return status;
}

// False after a message (cli.h) on a bad argument; *help for --help.
bool parse(int argc, char** argv, Options* o, bool* help) {
  const char* cmd = "embedding";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (is_help(a)) {
      *help = true;
      return true;
    }
    if (a == "--no-limit") {
      o->limit = false;
      continue;
    }
    if (a == "--adagrad") {
      o->adagrad = true;
      continue;
    }
    if (a == "--interleave") {
      o->interleave = true;
      continue;
    }
    static const char* const kValueOptions[] = {
        "--format", "--shapes", "--rows",  "--dims",     "--index", "--prefetch", "--hint",  "--weighted",
        "--mode",   "--pages",  "--max-rows", "--batch", "--reps",  "--threads",  "--update"};
    if (std::none_of(std::begin(kValueOptions), std::end(kValueOptions), [&](const char* k) { return a == k; }))
      return arg_error(cmd, "unknown option '%s'", a.c_str());
    const char* vp = i + 1 < argc ? argv[++i] : nullptr;
    if (!vp) return bad_value(cmd, a, vp, "");
    const std::string v = vp;
    int64_t x = 0;
    // The value's comma list, each item an integer in [lo, hi], into out.
    auto ints = [&](int64_t lo, int64_t hi, auto* out, const char* what) {
      out->clear();
      for (const std::string& s : split_list(v)) {
        if (!parse_int(s, lo, hi, &x)) return bad_value(cmd, a, vp, what);
        out->push_back(static_cast<typename std::remove_reference_t<decltype(*out)>::value_type>(x));
      }
      return true;
    };
    if (a == "--format") {
      if (!parse_format(vp, &o->fmt)) return bad_value(cmd, a, vp, "table, csv or json");
    } else if (a == "--shapes") {
      o->shapes = v;
    } else if (a == "--rows") {
      for (const std::string& s : split_list(v)) {
        bool found = false;
        for (const RowFmt& r : kRowFmts)
          if (s == "all" || s == r.name) {
            o->types.push_back(r.t);
            found = true;
          }
        if (!found) return bad_value(cmd, a, vp, "a list of row formats");
      }
    } else if (a == "--dims") {
      if (!ints(1, int64_t{1} << 24, &o->dims, "a list of positive dims")) return false;
    } else if (a == "--index") {
      if (!ints(32, 64, &o->index_bits, "a list of index widths (32, 64)")) return false;
      for (int b : o->index_bits)
        if (b != 32 && b != 64) return bad_value(cmd, a, vp, "a list of index widths (32, 64)");
    } else if (a == "--prefetch") {
      o->prefetch.clear();
      for (const std::string& s : split_list(v)) {
        if (s != "auto" && !parse_int(s, 0, 4096, &x)) return bad_value(cmd, a, vp, "a list of distances (0-4096 or auto)");
        o->prefetch.push_back(s == "auto" ? QJ_PREFETCH_AUTO : static_cast<int>(x));
      }
    } else if (a == "--hint") {
      o->hints.clear();
      for (const std::string& h : split_list(v)) {
        const char* names[5] = {"auto", "t0", "t1", "t2", "nta"};
        int k = 0;
        while (k < 5 && h != names[k]) ++k;
        if (k == 5) return bad_value(cmd, a, vp, "a list of auto, t0, t1, t2, nta");
        o->hints.push_back(k);
      }
    } else if (a == "--weighted") {
      if (!ints(0, 1, &o->weighted, "a list of 0 and 1")) return false;
    } else if (a == "--mode") {
      o->modes = split_list(v);
      for (const std::string& m : o->modes)
        if (m != "warm" && m != "cold" && m != "fresh") return bad_value(cmd, a, vp, "a list of warm, cold, fresh");
    } else if (a == "--pages") {
      if (v != "thp" && v != "4k") return bad_value(cmd, a, vp, "thp or 4k");
      o->huge = v == "thp";
    } else if (a == "--max-rows") {
      if (!parse_int(v, 1, int64_t{1} << 40, &o->max_rows)) return bad_value(cmd, a, vp, "a positive row count");
    } else if (a == "--batch") {
      if (!parse_int(v, 1, int64_t{1} << 30, &o->batch)) return bad_value(cmd, a, vp, "a positive bag count");
    } else if (a == "--reps") {
      if (!parse_int(v, 1, 100000000, &x)) return bad_value(cmd, a, vp, "a positive count");
      o->reps = static_cast<int>(x);
    } else if (a == "--threads") {
      if (!parse_int(v, 1, 1024, &x)) return bad_value(cmd, a, vp, "a thread count from 1 to 1024");
      o->threads = static_cast<int>(x);
    } else if (a == "--update") {
      if (v != "coalesced" && v != "occurrence") return bad_value(cmd, a, vp, "coalesced or occurrence");
      o->update = v == "coalesced" ? QJ_UPDATE_COALESCED : QJ_UPDATE_PER_OCCURRENCE_RACY;
    } else {
      return arg_error(cmd, "unknown option '%s'", a.c_str());
    }
  }
  if (o->types.empty()) o->types = o->adagrad ? std::vector<qj_dtype>{QJ_F32, QJ_F16}
                                              : std::vector<qj_dtype>{QJ_FUSED_8BIT, QJ_FUSED_4BIT};
  if (o->adagrad && o->interleave)
    return arg_error(cmd, "--interleave times the embedding-bag kernels' distances and hints, not --adagrad");
  if (o->adagrad)
    for (qj_dtype t : o->types)
      if (t != QJ_F32 && t != QJ_F16)
        return arg_error(cmd, "--adagrad updates f32 and f16 tables only, not --rows %s", fmt_name(t));
  return true;
}

// One table's lookups: `sets` independent random index sets (fresh mode cycles through them).
struct Lookups {
  std::vector<std::vector<int64_t>> idx;  // per set
  std::vector<int64_t> offsets;           // shared by all sets
  std::vector<float> weights;
  int64_t n = 0;
};

Lookups make_lookups(int64_t bags, int64_t rows, int64_t avg_len, bool fixed_len, int sets, uint64_t seed) {
  Lookups l;
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  l.offsets.push_back(0);
  for (int64_t b = 0; b < bags; ++b) {
    // FBGEMM's benchmark: lengths uniform in [1, 2 * avg]; DLRM: fixed multi-hot counts
    int64_t len = fixed_len ? avg_len : 1 + static_cast<int64_t>(xorshift(x) % static_cast<uint64_t>(2 * avg_len + 1));
    l.offsets.push_back(l.offsets.back() + len);
  }
  l.n = l.offsets.back();
  l.idx.resize(static_cast<size_t>(sets));
  for (auto& s : l.idx) {
    s.resize(static_cast<size_t>(l.n));
    for (auto& v : s) v = static_cast<int64_t>(xorshift(x) % static_cast<uint64_t>(rows));
  }
  l.weights.resize(static_cast<size_t>(l.n));
  for (auto& w : l.weights) w = 0.5f + static_cast<float>(xorshift(x) % 1000) / 1000.0f;
  return l;
}

std::vector<uint8_t> narrow(const std::vector<int64_t>& v, int bits) {
  std::vector<uint8_t> o(v.size() * bits / 8 + 8);
  for (size_t i = 0; i < v.size(); ++i) {
    if (bits == 32) {
      int32_t y = static_cast<int32_t>(v[i]);
      std::memcpy(&o[i * 4], &y, 4);
    } else {
      std::memcpy(&o[i * 8], &v[i], 8);
    }
  }
  return o;
}

// A process-wide stream of random indices: "fresh" calls never see an index set twice.
uint64_t g_fresh = 0x5851f42d4c957f2dull;
void fresh_indices(std::vector<int64_t>& v, int64_t rows) {
  for (auto& x : v) x = static_cast<int64_t>(xorshift(g_fresh) % static_cast<uint64_t>(rows));
}

// The random-gather limit for this exact row layout (unaligned rows of rb bytes, every line
// touched, one load per line), measured on the same table with the same mode as the kernel:
// the best over prefetch distances and hints. A plain loop, so it bounds what any kernel can do.
template <int kHint>
__attribute__((noinline)) uint32_t gather_rows(const uint8_t* t, int64_t rb, const int64_t* idx, int64_t n, int pf) {
  uint32_t a = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i + pf < n) {
      const char* q = reinterpret_cast<const char*>(t + idx[i + pf] * rb);
      for (int64_t o = 0; o < rb; o += 64) _mm_prefetch(q + o, static_cast<_mm_hint>(kHint));
      _mm_prefetch(q + rb - 1, static_cast<_mm_hint>(kHint));
    }
    const volatile uint8_t* p = t + idx[i] * rb;
    for (int64_t o = 0; o < rb; o += 64) a += p[o];
    a += p[rb - 1];
  }
  return a;
}

// The best (hint, distance) of gather_rows for a table, from a short sweep (fresh indices).
struct LimitCfg {
  int hint = _MM_HINT_T2, pf = 32;
};
LimitCfg best_limit_cfg(uint8_t* table, int64_t rb, int64_t rows, int64_t n) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  LimitCfg best;
  double best_s = 1e300;
  for (int hint : {_MM_HINT_T0, _MM_HINT_T2})
    for (int pf : {8, 16, 32, 64, 128}) {
      auto run = [&] {
        uint32_t s = hint == _MM_HINT_T0 ? gather_rows<_MM_HINT_T0>(table, rb, idx.data(), n, pf)
                                         : gather_rows<_MM_HINT_T2>(table, rb, idx.data(), n, pf);
        __asm__ volatile("" : : "r"(s));
      };
      double sec = time_mode("fresh", run, [&](int) { fresh_indices(idx, rows); }, 15);
      if (sec < best_s) {
        best_s = sec;
        best = {hint, pf};
      }
    }
  return best;
}

// The limit loop as a participant of time_rounds (so that it runs interleaved with the kernels,
// round by round: noise from other processes on this shared machine then hits both alike), with
// its own indices: flushed before each call in cold mode, new before each call otherwise.
struct LimitLoop {
  std::vector<int64_t> idx;
  qjb::Participant participant(const std::string& mode, uint8_t* table, int64_t rb, int64_t rows,
                               const LimitCfg& lc) {
    fresh_indices(idx, rows);
    return {[this, table, rb, lc] {
              const int64_t n = static_cast<int64_t>(idx.size());
              uint32_t s = lc.hint == _MM_HINT_T0 ? gather_rows<_MM_HINT_T0>(table, rb, idx.data(), n, lc.pf)
                                                  : gather_rows<_MM_HINT_T2>(table, rb, idx.data(), n, lc.pf);
              __asm__ volatile("" : : "r"(s));
            },
            [this, mode, table, rb, rows](int) {
              if (mode == "cold")
                flush_rows(table, rb, idx);
              else
                fresh_indices(idx, rows);
            }};
  }
};

struct Shape {
  int64_t bags, rows, dim, avg_len;
  bool fixed_len;
};

int run_grid(const Options& o, const std::vector<Shape>& shapes, Report& rep) {
  int rc = 0;
  for (qj_dtype t : o.types) {
    for (const Shape& sh : shapes) {
      if (!o.dims.empty() && std::find(o.dims.begin(), o.dims.end(), sh.dim) == o.dims.end()) continue;
      const int64_t rb = row_bytes(t, sh.dim);
      int64_t rows = sh.rows;
      if (o.max_rows > 0) rows = std::min(rows, o.max_rows);
      const size_t bytes = static_cast<size_t>(rows * rb);
      const int64_t bags = o.batch > 0 ? o.batch : sh.bags;
      Lookups lk = make_lookups(bags, rows, sh.avg_len, sh.fixed_len, 1, 7 + sh.dim);
      struct Result {
        int ib, pf, hint, w;
        std::string mode, kernel;
        bool ok;
        double sec = 0, layout_ns = 0;
        std::pair<double, double> q{0, 0};  // quartiles of an interleaved series (seconds)
      };
      std::vector<Result> res;
      double thp = 0, scales_thp = -1;  // (-1: no scale array)
      {
        Table tb(bytes, o.huge);
        if (!tb.p) {
          std::fprintf(stderr, "embedding: cannot allocate %zu bytes\n", bytes);
          return 1;
        }
        fill_table(tb, t, sh.dim, rows, 0x1234 + sh.dim);
        settle_table(tb.p, rb, rows);
        thp = thp_share(tb.p, bytes);
        // SPLIT MX rows: the scale array, on the table's kind of pages (on 4 KiB pages a 1M-row
        // table's scales miss the TLB on most rows, and a prefetch that misses it may be dropped).
        Table scales(is_mx_split(t) ? static_cast<size_t>(rows * ((sh.dim + 31) / 32)) : 0, o.huge);
        if (scales.bytes) {
          if (!scales.p) {
            std::fprintf(stderr, "embedding: cannot allocate %zu bytes of scales\n", scales.bytes);
            return 1;
          }
          std::memset(scales.p, 124, scales.bytes);
          scales_thp = thp_share(scales.p, scales.bytes);
        }
        // The case's configurations, each with its own plan and buffers, in the order
        // (index width, distance, hint, weights); each is checked once against the reference.
        struct Cfg {
          int ib, pf, hint, w;
          qj_embedding_bag_plan plan = nullptr;
          std::vector<int64_t> cur;   // the indices (fresh mode: replaced before every call)
          std::vector<uint8_t> idx;   // cur at the index width
          std::vector<float> out;
          bool ok = false;
          ~Cfg() { qj_embedding_bag_plan_destroy(plan); }
        };
        auto run_case = [&](Cfg& c) {
          qj_embedding_bag_args a{tb.p, scales.p, rows, bags, c.idx.data(), lk.n, lk.offsets.data(),
                                  c.w ? lk.weights.data() : nullptr, c.out.data()};
          if (o.threads > 1)
            qj_embedding_bag_run_parallel_ex(c.plan, &a, o.threads);
          else
            qj_embedding_bag_run_ex(c.plan, &a, nullptr);
        };
        std::vector<std::unique_ptr<Cfg>> cfgs;
        for (int ib : o.index_bits)
          for (int pf : o.prefetch)
            for (int hint : o.hints)
              for (int w : o.weighted) {
                auto c = std::make_unique<Cfg>();
                c->ib = ib;
                c->pf = pf;
                c->hint = hint;
                c->w = w;
                qj_embedding_bag_desc d;
                std::memset(&d, 0, sizeof d);
                d.row_type = t;
                d.dim = sh.dim;
                d.index_bits = ib;
                d.offset_bits = 64;
                d.weighted = w;
                d.pooling = QJ_POOL_SUM;
                d.out_type = QJ_F32;
                d.prefetch_distance = pf;
                d.prefetch_hint = static_cast<qj_prefetch_hint>(hint);
                if (qj_embedding_bag_plan_create(&d, &c->plan) != QJ_OK) {
                  std::fprintf(stderr, "embedding: %s\n", qj_last_error());
                  return 1;
                }
                c->cur = lk.idx[0];
                c->idx = narrow(c->cur, ib);
                c->out.resize(static_cast<size_t>(bags * sh.dim));
                std::vector<float> want(c->out.size());
                run_case(*c);
                qj::ref::EmbTable rt{t, sh.dim, false, rb, tb.p, rows, scales.p};
                qj::ref::embedding_bag(d, rt, bags, c->idx.data(), lk.n, lk.offsets.data(),
                                       w ? lk.weights.data() : nullptr, want.data(), 0, bags);
                c->ok = std::memcmp(c->out.data(), want.data(), want.size() * 4) == 0;
                cfgs.push_back(std::move(c));
              }
        // Timed groups: with --interleave the configurations of one index width and weighting
        // (the distances and hints) in one series of rounds, their calls alternating; else each
        // configuration by itself.
        std::vector<std::vector<Cfg*>> groups;
        for (auto& c : cfgs) {
          auto g = std::find_if(groups.begin(), groups.end(), [&](const std::vector<Cfg*>& x) {
            return o.interleave && x[0]->ib == c->ib && x[0]->w == c->w;
          });
          if (g == groups.end())
            groups.push_back({c.get()});
          else
            g->push_back(c.get());
        }
        LimitCfg lc;
        bool have_lc = false;
        LimitLoop limit_loop;
        limit_loop.idx.resize(static_cast<size_t>(lk.n));
        for (const std::vector<Cfg*>& grp : groups) {
          for (const std::string& mode : o.modes) {
            std::vector<qjb::Participant> ps;
            std::vector<Cfg*> timed;
            for (Cfg* c : grp) {
              if (!c->ok) {
                res.push_back({c->ib, c->pf, c->hint, c->w, mode, qj_embedding_bag_plan_kernel_name(c->plan), false});
                continue;
              }
              timed.push_back(c);
              ps.push_back({[c, &run_case] { run_case(*c); }, [&, c](int) {
                              if (mode == "cold") {
                                // FBGEMM's cold: the rows and the index, offset, weight and output
                                // arrays are flushed before every timed call.
                                flush_rows(tb.p, rb, c->cur);
                                flush_bytes(c->idx.data(), c->idx.size());
                                flush_bytes(lk.offsets.data(), lk.offsets.size() * 8);
                                if (c->w) flush_bytes(lk.weights.data(), lk.weights.size() * 4);
                                flush_bytes(c->out.data(), c->out.size() * 4);
                              } else if (mode == "fresh") {
                                fresh_indices(c->cur, rows);
                                c->idx = narrow(c->cur, c->ib);
                              }
                            }});
            }
            if (timed.empty()) continue;
            const bool with_limit = mode != "warm" && o.limit;
            if (with_limit && !have_lc) {
              lc = best_limit_cfg(tb.p, rb, rows, lk.n);
              have_lc = true;
            }
            if (with_limit) ps.push_back(limit_loop.participant(mode, tb.p, rb, rows, lc));
            std::vector<std::vector<double>> s;
            if (mode == "warm" && ps.size() == 1) {  // batched short calls (timing.h)
              s = {{time_mode(mode, ps[0].run, ps[0].prepare, o.reps)}};
            } else {
              s = qjb::time_rounds(ps, o.reps > 0 ? o.reps : timed.size() > 1 ? 1001 : 41);
            }
            const double lim = with_limit ? qjb::quantile(s.back(), 0.5) / lk.n * 1e9 : 0;
            for (size_t i = 0; i < timed.size(); ++i) {
              Cfg* c = timed[i];
              Result x{c->ib, c->pf, c->hint, c->w, mode, qj_embedding_bag_plan_kernel_name(c->plan), true,
                       qjb::quantile(s[i], 0.5), lim};
              if (timed.size() > 1) x.q = {qjb::quantile(s[i], 0.25), qjb::quantile(s[i], 0.75)};
              res.push_back(x);
              if (mode == "fresh") {
                c->cur = lk.idx[0];
                c->idx = narrow(c->cur, c->ib);
              }
            }
          }
        }
      }
      // peak's random-gather limit for this table size and page kind (rows rounded up to whole
      // lines), after ours is freed: one big table at a time.
      GatherResult g;
      const bool dram = std::any_of(res.begin(), res.end(), [](const Result& r) { return r.mode != "warm"; });
      if (o.limit && dram) {
        const size_t lb = static_cast<size_t>(std::max<int64_t>(64, (rb + 63) / 64 * 64));
        g = gather_limit(lb, o.huge, std::max(bytes, size_t{64} << 20));
        release_gather_tables();
      }
      for (const Result& x : res) {
        const double ns = x.sec / lk.n * 1e9;
        // FBGEMM's figures are for its own grid only (4,000,000 rows, batch 10, average bag 100,
        // uniform bag lengths): a table of other rows or bags gets none.
        const bool fbgemm_grid = !sh.fixed_len && rows == 4000000 && bags == 10 && sh.avg_len == 100;
        const double fb = fbgemm_grid ? fbgemm_ns(t, sh.dim, x.mode, x.pf != 0) : 0.0;
        static const char* hn[5] = {"auto", "t0", "t1", "t2", "nta"};
        Record& r = rep.add();
        r.set("op", "emb")
            .set("rows_fmt", fmt_name(t))
            .set("dim", sh.dim)
            .set("rows", rows)
            .set("bags", bags)
            .set("lookups", lk.n)
            .set("index_bits", x.ib)
            .set("threads", o.threads)
            .set("prefetch", x.pf == QJ_PREFETCH_AUTO ? std::string("auto") : std::to_string(x.pf))
            .set("hint", hn[x.hint])
            .set("weighted", x.w)
            .set("mode", x.mode)
            .set("pages", o.huge ? "thp" : "4k")
            .set("thp_share", thp, 2);
        if (scales_thp >= 0) r.set("scales_thp_share", scales_thp, 2);
        r.set("kernel", x.kernel);
        if (!x.ok) {
          r.set("error", "mismatch vs reference");
          rc = 1;
          continue;
        }
        r.set("seconds", x.sec, 9)
            .set("us_per_call", x.sec * 1e6, 2)
            .set("ns_per_row", ns, 2)
            .set("rows_per_s", lk.n / x.sec, 0)
            .set("gbps", lk.n * static_cast<double>(rb) / x.sec * 1e-9, 2);
        if (x.q.second > 0) r.set("ns_q1", x.q.first / lk.n * 1e9, 2).set("ns_q3", x.q.second / lk.n * 1e9, 2);
        if (x.mode != "warm" && g.rows_per_s > 0)
          r.set("limit_ns_per_row", g.ns_per_row, 2).set("limit_fraction", (lk.n / x.sec) / g.rows_per_s, 3);
        if (x.layout_ns > 0)
          r.set("layout_limit_ns", x.layout_ns, 2).set("layout_fraction", x.layout_ns / ns, 3);
        if (fb > 0) r.set("fbgemm_ns_per_row", fb, 2).set("vs_fbgemm", fb / ns, 2);
      }
    }
  }
  return rc;
}

int run_adagrad(const Options& o, const std::vector<Shape>& shapes, Report& rep) {
  int rc = 0;
  for (qj_dtype t : o.types) {
    if (t != QJ_F32 && t != QJ_F16) continue;
    for (const Shape& sh : shapes) {
      if (!o.dims.empty() && std::find(o.dims.begin(), o.dims.end(), sh.dim) == o.dims.end()) continue;
      int64_t rows = o.max_rows > 0 ? std::min(sh.rows, o.max_rows) : sh.rows;
      const int64_t eb = t == QJ_F32 ? 4 : 2;
      Table tb(static_cast<size_t>(rows * sh.dim * eb), o.huge);
      std::vector<float> h(static_cast<size_t>(rows), 0.1f);
      fill_table(tb, t, sh.dim, rows, 99);
      // A freshly filled table's first random reads are slower (see settle_table): without this
      // the first configuration on each table timed the transient (10.4 or 17 us per call at
      // f16 dim 32, depending on the process).
      settle_table(tb.p, sh.dim * eb, rows);
      const int64_t bags = o.batch > 0 ? o.batch : sh.bags;
      Lookups lk = make_lookups(bags, rows, sh.avg_len, sh.fixed_len, 1, 3 + sh.dim);
      std::vector<float> g(static_cast<size_t>(bags * sh.dim));
      uint64_t x = 5;
      for (auto& v : g) v = static_cast<float>(xorshift(x) % 2001) * 1e-6f - 1e-3f;
      for (int ib : o.index_bits) {
        std::vector<uint8_t> idx = narrow(lk.idx[0], ib);
        qj_rowwise_adagrad_desc d;
        std::memset(&d, 0, sizeof d);
        d.table_type = t;
        d.dim = sh.dim;
        d.index_bits = ib;
        d.offset_bits = 64;
        d.pooling = QJ_POOL_SUM;
        d.optimizer = QJ_OPT_ROWWISE_ADAGRAD;
        d.mode = o.update;
        d.learning_rate = 1e-4f;  // tiny steps: repeated calls keep the table sane
        d.epsilon = 1e-8f;
        d.stochastic_rounding = t == QJ_F16;
        auto run = [&](int) {
          qj_rowwise_adagrad_fused(&d, tb.p, h.data(), rows, bags, idx.data(), lk.n, lk.offsets.data(), nullptr,
                                   g.data(), 1, o.threads);
        };
        for (const std::string& mode : o.modes) {
          // cold: the rows flushed before each call (FBGEMM's benchmark); fresh: new random
          // indices before each call (rows from DRAM as in training over a large table).
          std::vector<int64_t> cur = lk.idx[0];
          auto prep = [&](int) {
            if (mode == "fresh") {
              fresh_indices(cur, rows);
              idx = narrow(cur, ib);
            } else {
              flush_rows(tb.p, sh.dim * eb, lk.idx[0]);
            }
          };
          const double sec = time_mode(mode, [&] { run(0); }, prep, o.reps);
          if (mode == "fresh") idx = narrow(lk.idx[0], ib);
          Record& r = rep.add();
          r.set("op", "adagrad")
              .set("rows_fmt", fmt_name(t))
              .set("dim", sh.dim)
              .set("rows", rows)
              .set("bags", bags)
              .set("lookups", lk.n)
              .set("index_bits", ib)
              .set("mode", mode)
              .set("update", o.update == QJ_UPDATE_COALESCED ? "coalesced" : "per-occurrence")
              .set("threads", o.threads)
              .set("pages", o.huge ? "thp" : "4k")
              .set("seconds", sec, 9)
              .set("us_per_call", sec * 1e6, 2)
              .set("ns_per_row", sec / lk.n * 1e9, 2)
              .set("rows_per_s", lk.n / sec, 0);
        }
      }
    }
  }
  return rc;
}

}  // namespace

int cmd_embedding(int argc, char** argv) {
  Options o;
  bool help = false;
  if (!parse(argc, argv, &o, &help)) return 2;
  if (help) return usage(0);
  std::vector<Shape> shapes;
  std::string err;
  CsvTable csv;
  const bool dlrm = o.shapes == "dlrm";
  if (!resolve_shapes(o.shapes,
                      {{"fbgemm", {"embedding-fbgemm.csv"}}, {"dlrm", {"embedding-dlrm-dcnv2.csv"}}},
                      {"batch", "rows", "dim", "avg_len"}, &csv, &err)) {
    std::fprintf(stderr, "quantjit-bench embedding: %s\n", err.c_str());
    return 2;
  }
  const int cb = csv.column("batch"), cr = csv.column("rows"), cd = csv.column("dim"), ca = csv.column("avg_len"),
            cp = csv.column("pooling");
  for (const auto& row : csv.rows) {
    Shape s;
    if (cp >= 0) {  // DLRM: one table per line, fixed multi-hot pooling
      s = {512, row[cr], row[cd], row[cp], true};
    } else {
      if (cb < 0 || cr < 0 || cd < 0 || ca < 0) {
        std::fprintf(stderr,
                     "quantjit-bench embedding: the shape file needs batch,rows,dim,avg_len or table,rows,dim,pooling\n");
        return 2;
      }
      s = {row[cb], row[cr], row[cd], row[ca], false};
    }
    // batch, rows, dim >= 1; the average bag length (or pooling) >= 0 (DLRM: >= 1)
    if (s.bags < 1 || s.rows < 1 || s.dim < 1 || s.dim > (int64_t{1} << 24) || s.avg_len < (cp >= 0 ? 1 : 0) ||
        s.avg_len > (int64_t{1} << 20)) {
      std::fprintf(stderr,
                   "quantjit-bench embedding: a shape of '%s' has batch %lld, rows %lld, dim %lld, %s %lld: batch, "
                   "rows and dim must be >= 1 (dim <= 2^24), and %s\n",
                   o.shapes.c_str(), static_cast<long long>(s.bags),
                   static_cast<long long>(s.rows), static_cast<long long>(s.dim), cp >= 0 ? "pooling" : "avg_len",
                   static_cast<long long>(s.avg_len), cp >= 0 ? "1 <= pooling <= 2^20" : "0 <= avg_len <= 2^20");
      return 2;
    }
    shapes.push_back(s);
  }
  Options oo = o;
  if (dlrm && oo.max_rows == 0) oo.max_rows = 4000000;
  if (o.adagrad && oo.max_rows == 0) oo.max_rows = 1000000;  // fp32 dim 1024 x 4M rows would be 16 GB
  Report rep(o.fmt);
  std::vector<std::string> cols = {"op",       "rows_fmt",    "dim",        "rows",       "bags",
                                    "lookups",  "index_bits",  "prefetch",   "hint",       "weighted",
                                    "mode",     "update",      "pages",      "thp_share",  "scales_thp_share", "seconds",
                                    "us_per_call", "ns_per_row"};
  if (o.interleave) cols.insert(cols.end(), {"ns_q1", "ns_q3"});
  cols.insert(cols.end(), {"rows_per_s", "gbps", "limit_ns_per_row", "limit_fraction", "layout_limit_ns",
                           "layout_fraction", "fbgemm_ns_per_row", "vs_fbgemm", "kernel"});
  rep.declare(cols);
  rep.hide(Format::kTable, {"seconds", "rows", "kernel", "pages", "bags", "rows_per_s", "gbps"});
  int rc = o.adagrad ? run_adagrad(oo, shapes, rep) : run_grid(oo, shapes, rep);
  if (rep.records().empty()) {  // (e.g. --dims that no shape has, or an empty shape file)
    std::fprintf(stderr, "quantjit-bench embedding: nothing to measure: no shape of '%s' matches the selection\n",
                 o.shapes.c_str());
    return 2;
  }
  if (!o.adagrad && dlrm) {
    // One model pass = every table once: per row format and mode, the sum of the per-table times.
    for (qj_dtype t : o.types) {
      for (const std::string& mode : o.modes) {
        double total = 0;
        int64_t lookups = 0;
        for (const Record& r : rep.records()) {
          const Field* m = r.find("mode");
          const Field* f = r.find("rows_fmt");
          const Field* s = r.find("seconds");
          const Field* l = r.find("lookups");
          if (m && f && s && l && m->s == mode && f->s == fmt_name(t)) {
            total += s->d;
            lookups += l->i;
          }
        }
        char buf[200];
        std::snprintf(buf, sizeof buf, "dlrm-dcnv2 %s %s (26 tables, batch %lld): %.1f us per batch, %.2f ns per row",
                      fmt_name(t), mode.c_str(), static_cast<long long>(oo.batch > 0 ? oo.batch : 512), total * 1e6,
                      lookups ? total / lookups * 1e9 : 0.0);
        rep.note(buf);
      }
    }
  }
  rep.finish();
  return rc;
}
