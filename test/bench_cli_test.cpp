// quantjit-bench's output contract, run on the built tool: other tools and the README's sweep read
// its JSON Lines, so every documented field is checked on small cases of each subcommand (gemm
// for every weight type, with and without the oneDNN peer; embedding, the fused AdaGrad and
// mx-quantize), together with the relations between fields (gops from seconds, ns per row from
// seconds, ratios). Bad arguments must exit with status 2 and name the option and its value.
// Nothing here asserts a time; the cases are small so that the test runs in seconds.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <set>
#include <string>
#include <vector>

namespace {

// One flat JSON object: numbers as doubles, strings (and true / false / null) as text.
struct Json {
  std::map<std::string, double> num;
  std::map<std::string, std::string> str;
  bool has(const std::string& k) const { return num.count(k) || str.count(k); }
  double n(const std::string& k) const {
    auto it = num.find(k);
    return it == num.end() ? NAN : it->second;
  }
  std::string s(const std::string& k) const {
    auto it = str.find(k);
    return it == str.end() ? "" : it->second;
  }
};

// Parses {"key": value, ...} with string, number, true, false or null values; false on anything
// else (the bench prints flat objects only).
bool parse_json(const std::string& line, Json* out) {
  size_t i = 0;
  auto ws = [&] {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  };
  auto str = [&](std::string* s) {
    if (i >= line.size() || line[i] != '"') return false;
    for (++i; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) ++i;
      s->push_back(line[i]);
    }
    if (i >= line.size()) return false;
    ++i;
    return true;
  };
  ws();
  if (i >= line.size() || line[i++] != '{') return false;
  for (;;) {
    ws();
    std::string key;
    if (!str(&key)) return false;
    ws();
    if (i >= line.size() || line[i++] != ':') return false;
    ws();
    if (i < line.size() && line[i] == '"') {
      std::string v;
      if (!str(&v)) return false;
      out->str[key] = v;
    } else {
      const size_t j = line.find_first_of(",}", i);
      if (j == std::string::npos) return false;
      std::string v = line.substr(i, j - i);
      while (!v.empty() && v.back() == ' ') v.pop_back();
      i = j;
      if (v == "true" || v == "false" || v == "null") {
        out->str[key] = v;
      } else {
        char* end = nullptr;
        const double d = std::strtod(v.c_str(), &end);
        if (v.empty() || *end) return false;
        out->num[key] = d;
      }
    }
    ws();
    if (i < line.size() && line[i] == ',') {
      ++i;
      continue;
    }
    return i < line.size() && line[i] == '}';
  }
}

struct BenchRun {
  int status = -1;
  std::string out, err;
  std::vector<Json> records;  // stdout's lines that start with '{', parsed
  bool all_parsed = true;
};

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class BenchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/qj-bench-cli-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  std::string file(const std::string& name, const std::string& text) {
    const std::string p = dir_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  // Runs quantjit-bench with `args` (shell words).
  BenchRun bench(const std::string& args) {
    BenchRun r;
    const std::string o = dir_ + "/out", e = dir_ + "/err";
    // (no settling pause after filling tables: only the fields are checked here)
    const std::string cmd = std::string("QJ_BENCH_SETTLE_MS=0 '") + QJ_BENCH_EXE + "' " + args + " > '" + o + "' 2> '" + e + "'";
    const int st = std::system(cmd.c_str());
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r.out = read_file(o);
    r.err = read_file(e);
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      if (line.empty() || line[0] != '{') continue;
      Json j;
      if (parse_json(line, &j))
        r.records.push_back(j);
      else
        r.all_parsed = false;
    }
    return r;
  }
  std::string dir_;
};

// a and b agree to a relative `tol` (the fields are printed with 9 significant digits or more,
// the derived ones rounded to 2-6 decimals).
void expect_rel(double a, double b, double tol, const std::string& what) {
  EXPECT_TRUE(std::isfinite(a) && std::isfinite(b)) << what << ": " << a << " vs " << b;
  EXPECT_LE(std::fabs(a - b), tol * std::max(std::fabs(a), std::fabs(b))) << what << ": " << a << " vs " << b;
}

// The fields every gemm record carries (issue: m, n, k, types, seconds, gops, peak_fraction,
// gen_us), their relations, and the reference check.
void check_gemm_record(const Json& j, int64_t m, int64_t n, int64_t k, const std::string& w_type) {
  const std::string at = "gemm " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " " + w_type;
  EXPECT_FALSE(j.has("error")) << at << ": " << j.s("error");
  EXPECT_EQ(j.n("m"), m) << at;
  EXPECT_EQ(j.n("n"), n) << at;
  EXPECT_EQ(j.n("k"), k) << at;
  EXPECT_EQ(j.s("w_type"), w_type) << at;
  EXPECT_FALSE(j.s("a_type").empty()) << at;
  EXPECT_FALSE(j.s("c_type").empty()) << at;
  EXPECT_FALSE(j.s("isa").empty()) << at;
  EXPECT_EQ(j.s("mode"), "warm") << at;
  EXPECT_GT(j.n("seconds"), 0) << at;
  expect_rel(j.n("gops"), 2.0 * m * n * k / j.n("seconds") * 1e-9, 1e-4, at + " gops");
  EXPECT_GT(j.n("peak_gops"), 0) << at;
  expect_rel(j.n("peak_fraction"), j.n("gops") / j.n("peak_gops"), 2e-3, at + " peak_fraction");
  EXPECT_GE(j.n("gen_us"), 0) << at;
  EXPECT_GE(j.n("kernels"), 1) << at;
  EXPECT_EQ(j.n("fallbacks"), 0) << at;
  EXPECT_GE(j.n("reps"), 1) << at;
  if (j.has("check")) {
    EXPECT_EQ(j.s("check"), "ok") << at;
  }
  if (m == 1) {  // the bandwidth roof of the level the weights sit in
    const std::string lv = j.s("level");
    EXPECT_TRUE(lv == "l1" || lv == "l2" || lv == "l3" || lv == "dram") << at << " level " << lv;
    EXPECT_GT(j.n("roof_gbs"), 0) << at;
    expect_rel(j.n("roof_fraction"), j.n("weight_gbs") / j.n("roof_gbs"), 2e-2, at + " roof_fraction");
    if (w_type == "s8") {  // the bytes the kernel streams: s16 pairs at the avx512 tier, else s8
      const double bytes_per_weight = j.s("isa") == "avx512" ? 2 : 1;
      expect_rel(j.n("weight_gbs"), bytes_per_weight * n * k / j.n("seconds") * 1e-9, 2e-2, at + " weight_gbs");
    }
  } else {
    EXPECT_FALSE(j.has("roof_fraction")) << at;
  }
}

TEST_F(BenchCli, GemmJsonLinesCarryTheDocumentedFields) {
  const BenchRun r = bench("gemm --shapes '3,20,40;1,64,128;17,33,65' --format json --reps 3");
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_TRUE(r.all_parsed) << r.out;
  ASSERT_EQ(r.records.size(), 3u) << r.out;
  const int64_t shapes[3][3] = {{3, 20, 40}, {1, 64, 128}, {17, 33, 65}};
  for (int i = 0; i < 3; ++i) {
    check_gemm_record(r.records[i], shapes[i][0], shapes[i][1], shapes[i][2], "s8");
    EXPECT_EQ(r.records[i].n("ref_max_diff"), 0);  // u8 output against the exact reference
    EXPECT_FALSE(r.records[i].has("peer")) << "no peer was asked for";
  }
  // (with --format json the summary lines go to stderr, stdout holds the records only)
  EXPECT_NE(r.err.find("geomean over 3 shapes"), std::string::npos) << r.err;
}

// Every tier below the CPU's own is measured with its own peak and its own weight bytes.
TEST_F(BenchCli, GemmAtTheAvx2Tier) {
  const BenchRun r = bench("gemm --isa avx2 --weights s8,f16 --shapes '1,64,256;4,32,64' --format json --reps 3");
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(r.records.size(), 4u) << r.out;
  for (int i = 0; i < 4; ++i) {
    const Json& j = r.records[i];
    check_gemm_record(j, i < 2 ? 1 : 4, i < 2 ? 64 : 32, i < 2 ? 256 : 64, i % 2 ? "f16" : "s8");
    EXPECT_EQ(j.s("isa"), "avx2");
    EXPECT_EQ(j.s("peak_instr"), i % 2 ? "vfmadd231ps ymm" : "vpmaddubsw ymm");
  }
}

TEST_F(BenchCli, GemmWithTheOnednnPeer) {
#if QJ_BENCH_HAVE_ONEDNN
  const BenchRun r = bench("gemm --shapes '8,32,64;1,48,96' --vs onednn --format json --reps 3");
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(r.records.size(), 2u) << r.out;
  for (const Json& j : r.records) {
    check_gemm_record(j, static_cast<int64_t>(j.n("m")), static_cast<int64_t>(j.n("n")),
                      static_cast<int64_t>(j.n("k")), "s8");
    EXPECT_EQ(j.s("peer"), "onednn");
    EXPECT_FALSE(j.has("peer_error")) << j.s("peer_error");
    EXPECT_GT(j.n("peer_seconds"), 0);
    expect_rel(j.n("ratio"), j.n("peer_seconds") / j.n("seconds"), 1e-4, "ratio");
    EXPECT_EQ(j.n("ref_max_diff"), 0);
    EXPECT_EQ(j.s("check"), "ok");
    if (j.n("peer_max_diff") != 0) {
      // The same output stage on the same data differs only where oneDNN's int8 GEMM has no
      // VNNI path and saturates s16 pairs: then its output is off the exact reference.
      EXPECT_GT(j.n("peer_ref_max_diff"), 1) << "a disagreement with an exact peer";
      EXPECT_NE(r.err.find("oneDNN off the exact reference"), std::string::npos) << r.err;
    }
  }
  EXPECT_NE(r.err.find("geomean ratio over 2 shapes"), std::string::npos) << r.err;
#else
  GTEST_SKIP() << "quantjit-bench was built without oneDNN";
#endif
}

TEST_F(BenchCli, GemmEveryWeightType) {
  const char* kinds[] = {"s8",         "s4",         "u4",         "s4a8",       "u4a8",   "f16",
                         "bf16",       "mxfp4",      "mxfp6_e2m3", "mxfp6_e3m2", "mxfp8_e4m3",
                         "mxfp8_e5m2", "mxint8",     "mx9",        "mx6",        "mx4"};
  for (const std::string w : kinds) {
    const BenchRun r = bench("gemm --weights " + w + " --shapes '4,48,256;1,40,256' --format json --reps 3");
    ASSERT_EQ(r.status, 0) << w << ": " << r.err;
    ASSERT_EQ(r.records.size(), 2u) << w << ": " << r.out;
    // s4a8 / u4a8: S4 / U4 weights with u8 activations (w_type is the weights' type)
    const bool a8 = w.size() > 2 && w.compare(w.size() - 2, 2, "a8") == 0;
    const std::string wt = a8 ? w.substr(0, w.size() - 2) : w;
    check_gemm_record(r.records[0], 4, 48, 256, wt);
    check_gemm_record(r.records[1], 1, 40, 256, wt);
    for (const Json& j : r.records) {
      if (a8) {
        EXPECT_EQ(j.s("a_type"), "u8") << w;
      }
    }
  }
}

// --weights LIST: each shape with each format in turn (shape-major), one summary per format, and
// the table keeps the A and weight type columns.
TEST_F(BenchCli, GemmComparesFormats) {
  BenchRun r = bench("gemm --weights s8,s4,f16 --shapes '2,32,128;1,40,256' --format json --reps 3");
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(r.records.size(), 6u) << r.out;
  const char* types[3] = {"s8", "s4", "f16"};
  for (int i = 0; i < 6; ++i)
    check_gemm_record(r.records[i], i < 3 ? 2 : 1, i < 3 ? 32 : 40, i < 3 ? 128 : 256, types[i % 3]);
  for (const char* t : types)
    EXPECT_NE(r.err.find(std::string(t) + " weights, "), std::string::npos) << t << "\n" << r.err;
  r = bench("gemm --weights s8,f16 --shapes '2,32,64' --format table --reps 3");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("w_type"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("a_type"), std::string::npos) << r.out;
}

// A case the library rejects is a record with the library's message, and the run exits 1.
TEST_F(BenchCli, GemmFailedCaseIsARecord) {
  const BenchRun r = bench("gemm --weights s4 --group 128 --shapes '2,32,64' --format json --reps 3");
  EXPECT_EQ(r.status, 1) << r.err;
  ASSERT_EQ(r.records.size(), 1u) << r.out;
  EXPECT_NE(r.records[0].s("error").find("group_size=128 does not divide k=64"), std::string::npos)
      << r.records[0].s("error");
  EXPECT_FALSE(r.records[0].has("seconds"));
  EXPECT_NE(r.err.find("FAILED cases: 1"), std::string::npos) << r.err;
}

TEST_F(BenchCli, GemmCsvAndTable) {
  BenchRun r = bench("gemm --shapes '2,16,32;5,17,33' --format csv --reps 3");
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream lines(r.out);
  std::string header;
  std::getline(lines, header);
  EXPECT_EQ(header.rfind("m,n,k,", 0), 0u) << header;
  EXPECT_NE(header.find(",seconds,"), std::string::npos) << header;
  EXPECT_NE(header.find(",gops,"), std::string::npos) << header;
  int rows = 0;
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] != '#') ++rows;
  EXPECT_EQ(rows, 2) << r.out;
  r = bench("gemm --shapes '2,16,32;5,17,33' --format table --reps 3");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("time_us"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("w_type"), std::string::npos) << "one format: no type columns\n" << r.out;
  EXPECT_NE(r.out.find("geomean over 2 shapes"), std::string::npos) << r.out;
}

// ns_per_row, rows_per_s and gbps follow from seconds and the lookups; the cold records carry
// the random-gather limit; a table that is not FBGEMM's grid gets no FBGEMM figure.
TEST_F(BenchCli, EmbeddingJsonLines) {
  const std::string shapes = file("emb.csv", "batch,rows,dim,avg_len\n10,2000,17,8\n4,500,64,3\n");
  const BenchRun r = bench("embedding --shapes '" + shapes + "' --rows fused8,f32 --mode warm,cold --reps 3 --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_TRUE(r.all_parsed) << r.out;
  ASSERT_EQ(r.records.size(), 8u) << r.out;  // 2 formats x 2 shapes x 2 modes
  for (const Json& j : r.records) {
    const std::string at = j.s("rows_fmt") + " dim " + std::to_string(j.n("dim")) + " " + j.s("mode");
    EXPECT_EQ(j.s("op"), "emb") << at;
    EXPECT_FALSE(j.has("error")) << at << ": " << j.s("error");
    EXPECT_TRUE(j.s("rows_fmt") == "fused8" || j.s("rows_fmt") == "f32") << at;
    EXPECT_TRUE(j.n("dim") == 17 || j.n("dim") == 64) << at;
    EXPECT_EQ(j.n("rows"), j.n("dim") == 17 ? 2000 : 500) << at;
    EXPECT_GT(j.n("lookups"), 0) << at;
    EXPECT_GT(j.n("seconds"), 0) << at;
    expect_rel(j.n("ns_per_row"), j.n("seconds") / j.n("lookups") * 1e9, 1e-2, at + " ns_per_row");
    expect_rel(j.n("rows_per_s"), j.n("lookups") / j.n("seconds"), 1e-4, at + " rows_per_s");
    EXPECT_GT(j.n("gbps"), 0) << at;
    if (j.s("mode") == "cold") {
      EXPECT_GT(j.n("limit_ns_per_row"), 0) << at;
      expect_rel(j.n("limit_fraction"), j.n("limit_ns_per_row") / j.n("ns_per_row"), 2e-2, at + " limit_fraction");
    }
    EXPECT_FALSE(j.has("fbgemm_ns_per_row")) << at << ": not FBGEMM's grid";
  }
}

// Two threads (qj_embedding_bag_run_parallel_ex) also for SPLIT MX rows, checked against the
// reference before timing like every case.
TEST_F(BenchCli, EmbeddingTwoThreadsSplitRows) {
  const std::string shapes = file("emb2.csv", "batch,rows,dim,avg_len\n12,800,40,9\n");
  const BenchRun r = bench("embedding --shapes '" + shapes + "' --rows mxint8,mxfp8_e4m3,fused4 --threads 2 --mode warm --reps 3 --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(r.records.size(), 3u) << r.out << r.err;
  for (const Json& j : r.records) {
    EXPECT_FALSE(j.has("error")) << j.s("rows_fmt") << ": " << j.s("error");
    EXPECT_EQ(j.n("threads"), 2) << j.s("rows_fmt");
    EXPECT_GT(j.n("seconds"), 0) << j.s("rows_fmt");
  }
}

// --interleave: every (distance, hint) configuration of a case gets its own record, its own
// kernel, its quartile fields, and the limit loop timed in the same series.
TEST_F(BenchCli, EmbeddingInterleavedConfigurations) {
  const std::string shapes = file("emb3.csv", "batch,rows,dim,avg_len\n6,3000,48,5\n");
  const BenchRun r = bench("embedding --shapes '" + shapes +
                           "' --rows fused8 --prefetch 0,8,16 --hint auto,t2 --mode warm,fresh --reps 9 --interleave "
                           "--format json");
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_TRUE(r.all_parsed) << r.out;
  ASSERT_EQ(r.records.size(), 12u) << r.out;  // 3 distances x 2 hints x 2 modes
  std::set<std::string> configs, kernels;
  for (const Json& j : r.records) {
    const std::string at = j.s("prefetch") + " " + j.s("hint") + " " + j.s("mode");
    EXPECT_FALSE(j.has("error")) << at << ": " << j.s("error");
    EXPECT_TRUE(configs.insert(at).second) << at << " twice";
    kernels.insert(j.s("kernel"));
    ASSERT_TRUE(j.has("ns_q1") && j.has("ns_q3")) << at;  // (their values are timings: not checked)
    EXPECT_EQ(j.has("limit_ns_per_row"), j.s("mode") == "fresh") << at;
  }
  // distance 0 is one kernel whatever the hint; 8 and 16 with t2 or the automatic hint (t0 here
  // or t2) give two or four more
  EXPECT_GE(kernels.size(), 3u) << r.out;
}

TEST_F(BenchCli, EmbeddingFbgemmGridCarriesTheFbgemmFigure) {
  const BenchRun r = bench("embedding --dims 32 --rows fused8 --mode warm --reps 3 --no-limit --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(r.records.size(), 1u) << r.out;
  const Json& j = r.records[0];
  EXPECT_EQ(j.n("rows"), 4000000);
  EXPECT_EQ(j.n("bags"), 10);
  EXPECT_GT(j.n("fbgemm_ns_per_row"), 0);
  expect_rel(j.n("vs_fbgemm"), j.n("fbgemm_ns_per_row") / j.n("ns_per_row"), 2e-2, "vs_fbgemm");
}

TEST_F(BenchCli, AdagradJsonLines) {
  const std::string shapes = file("ada.csv", "batch,rows,dim,avg_len\n10,3000,33,6\n");
  const BenchRun r = bench("embedding --adagrad --shapes '" + shapes + "' --mode warm --reps 3 --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(r.records.size(), 2u) << r.out;  // fp32 and fp16 tables
  for (const Json& j : r.records) {
    EXPECT_EQ(j.s("op"), "adagrad");
    EXPECT_EQ(j.s("update"), "coalesced");
    EXPECT_EQ(j.n("dim"), 33);
    EXPECT_GT(j.n("seconds"), 0);
    expect_rel(j.n("ns_per_row"), j.n("seconds") / j.n("lookups") * 1e9, 1e-2, "ns_per_row");
  }
}

TEST_F(BenchCli, MxQuantizeJsonLines) {
  const BenchRun r = bench("mx-quantize --types mxfp4,mx6 --n 4096 --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(r.records.size(), 4u) << r.out;  // quantize and dequantize per type
  for (const Json& j : r.records) {
    EXPECT_TRUE(j.s("type") == "mxfp4" || j.s("type") == "mx6") << j.s("type");
    EXPECT_TRUE(j.s("op") == "quantize" || j.s("op") == "dequantize") << j.s("op");
    EXPECT_EQ(j.n("n"), 4096);
    EXPECT_GT(j.n("seconds"), 0);
    expect_rel(j.n("gbps"), 4096 * 4.0 / j.n("seconds") * 1e-9, 1e-4, "gbps (fp32 side)");
  }
}

// Each compute row is a measured rate, or is named as not measured; none is a zero.
TEST_F(BenchCli, PeakComputeRowsAreMeasuredOrNamedAbsent) {
  const BenchRun r = bench("peak --only compute --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  std::set<std::string> rows;
  for (const Json& j : r.records) {
    const std::string at = j.s("instr") + " " + j.s("reg");
    EXPECT_EQ(j.s("kind"), "compute") << at;
    EXPECT_GT(j.n("value"), 0) << at;
    EXPECT_GT(j.n("instr_per_clock"), 0) << at;
    EXPECT_TRUE(rows.insert(at).second) << at << " listed twice";
  }
  const size_t note = r.err.find("not measured (this CPU lacks them): ");
  int absent = 0;
  for (const char* instr : {"vpdpbusd zmm", "vpdpbusd ymm", "vpmaddubsw zmm", "vpmaddubsw ymm",
                            "vfmadd231ps zmm", "vfmadd231ps ymm"}) {
    const bool named = note != std::string::npos && r.err.find(instr, note) != std::string::npos;
    EXPECT_NE(rows.count(instr) != 0, named) << instr << ": measured or named absent, one of the two\n" << r.err;
    absent += named;
  }
  EXPECT_EQ(rows.size() + absent, 6u) << r.out;
  EXPECT_EQ(rows.count("vfmadd231ps ymm"), 1u) << "every CPU the bench runs on has AVX2 + FMA";
}

TEST_F(BenchCli, PeakMixJsonLines) {
  const BenchRun r = bench("peak --only mix --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  if (r.records.empty()) GTEST_SKIP() << "no AVX512-VNNI here: the mix section is not measured";
  std::map<std::string, int> seen;
  for (const Json& j : r.records) {
    const std::string at = j.s("instr") + " " + j.s("operands");
    EXPECT_EQ(j.s("kind"), "mix") << at;
    ++seen[at];
    for (const char* f : {"alone_cycles", "mixed_cycles", "vnni_alone_cycles"}) EXPECT_GT(j.n(f), 0) << at << " " << f;
    // (printed with 2 decimals each)
    EXPECT_NEAR(j.n("vnni_slots"), (j.n("mixed_cycles") - j.n("vnni_alone_cycles")) / 8, 0.01) << at;
  }
  for (const char* want : {"vpdpbusd zmm", "vfmadd231ps zmm", "vcvtdq2ps zmm", "vpshufb zmm", "vmovdqu32 m512, zmm"})
    EXPECT_EQ(seen[want], 1) << want;
  for (const auto& [instr, count] : seen) EXPECT_EQ(count, 1) << instr << " listed more than once";
}

TEST_F(BenchCli, BadArgumentsAreNamed) {
  const struct {
    const char* args;
    const char* message;
  } cases[] = {
      {"gemm --weights s3", "--weights: 's3' is not a weight type"},
      {"gemm --weights s8,,f16", "--weights: 's8,,f16' is not a weight type"},
      {"gemm --threads 0", "--threads: '0' is not"},
      {"gemm --threads 2x", "--threads: '2x' is not"},
      {"gemm --reps", "--reps needs a value"},
      {"gemm --isa avx9", "--isa: 'avx9' is not"},
      {"gemm --shapes nowhere.csv", "'nowhere.csv' is not a named list"},
      {"gemm --frobnicate", "unknown option '--frobnicate'"},
      {"embedding --dims 12a", "--dims: '12a' is not"},
      {"embedding --prefetch far", "--prefetch: 'far' is not"},
      {"embedding --max-rows -3", "--max-rows: '-3' is not"},
      {"embedding --rows fused9", "--rows: 'fused9' is not"},
      {"embedding --mode lukewarm", "--mode: 'lukewarm' is not"},
      {"embedding --index 16", "--index: '16' is not"},
      {"embedding --frobnicate 1", "unknown option '--frobnicate'"},
      {"embedding --adagrad --interleave", "--interleave times the embedding-bag kernels"},
      {"mx-quantize --n 0", "--n: '0' is not"},
      {"mx-quantize --types mxfp5", "--types: 'mxfp5' is not"},
      {"peak --table-mib 10", "--table-mib: '10' is not"},
      {"peak --only everything", "--only: 'everything' is not"},
      {"frobnicate", "unknown command 'frobnicate'"},
  };
  for (const auto& c : cases) {
    const BenchRun r = bench(c.args);
    EXPECT_EQ(r.status, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_TRUE(r.records.empty()) << c.args << ": nothing measured";
  }
}

TEST_F(BenchCli, HelpExitsZero) {
  for (const char* c : {"--help", "gemm --help", "embedding --help", "mx-quantize --help", "peak --help"}) {
    const BenchRun r = bench(c);
    EXPECT_EQ(r.status, 0) << c << "\n" << r.err;
    EXPECT_NE(r.out.find("usage: quantjit-bench"), std::string::npos) << c << "\n" << r.out;
  }
}

}  // namespace
