// `quantjit-bench mx-quantize`: single-thread throughput of the MX / BDR conversions through the
// C API (qj_mx_quantize_ex / qj_mx_dequantize_ex), per type, ISA tier and size.
//
// GB/s counts the fp32 (or bf16) side only: bytes of input for quantize, bytes of output for
// dequantize, so the figures compare directly with a memcpy of the float data. The time is the
// median of repeated calls (timing.h): warm by default (the same buffers every call: n = 1 Mi
// values = 4 MiB of fp32 sits in L3 here), --cold streams 512 MiB through the caches before each
// call so the input comes from DRAM. Every run is checked once against the scalar reference
// before it is timed, so a fast wrong kernel cannot produce a number.
#include <quantjit/quantjit.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "driver/cli.h"
#include "driver/commands.h"
#include "driver/report.h"
#include "driver/timing.h"
#include "src/formats/half.h"
#include "src/formats/mx_bdr.h"
#include "src/ref/mx_ref.h"

namespace {

using namespace bench;

struct TypeRow {
  const char* name;
  qj_dtype t;
};
const TypeRow kTypes[] = {
    {"mxfp4", QJ_MXFP4_E2M1}, {"mxint8", QJ_MXINT8},    {"mxfp8_e4m3", QJ_MXFP8_E4M3},
    {"mxfp8_e5m2", QJ_MXFP8_E5M2}, {"mxfp6_e3m2", QJ_MXFP6_E3M2}, {"mxfp6_e2m3", QJ_MXFP6_E2M3},
    {"mx9", QJ_BDR_MX9},      {"mx6", QJ_BDR_MX6},       {"mx4", QJ_BDR_MX4},
};

struct Options {
  Format fmt = Format::kTable;
  std::vector<qj_dtype> types;
  std::vector<int64_t> sizes = {int64_t{1} << 20};
  std::vector<qj_isa> isas;
  qj_dtype fp = QJ_F32;
  qj_rounding rounding = QJ_ROUND_FLOOR;
  bool cold = false;
};

int usage(int status = 2) {  // --help (status 0): on stdout
  std::fprintf(status ? stderr : stdout,
               "usage: quantjit-bench mx-quantize [options]\n"
               "  --types LIST    comma-separated: mxfp4,mxint8,mxfp8_e4m3,mxfp8_e5m2,mxfp6_e3m2,\n"
               "                  mxfp6_e2m3,mx9,mx6,mx4 or 'all' (default all)\n"
               "  --n LIST        values per call, comma-separated (default 1048576)\n"
               "  --isa LIST      scalar,avx2,avx512,avx512_vnni or 'all' (default: the current cap)\n"
               "  --src f32|bf16  float side of the conversion (default f32)\n"
               "  --rounding floor|rceil  OCP scale rule (default floor)\n"
               "  --cold          flush the caches before every timed call (input from DRAM)\n"
               "  --format F      table | csv | json (JSON Lines, one object per case)\n"
               "GB/s = float-side bytes (input of quantize, output of dequantize) per second,\n"
               "single thread, median of repeated calls.\n");
  return status;
}

bool parse_isa_name(const std::string& s, qj_isa* out) {
  for (int i = QJ_ISA_SCALAR; i <= QJ_ISA_AVX512_VNNI; ++i)
    if (s == qj_isa_name(static_cast<qj_isa>(i))) {
      *out = static_cast<qj_isa>(i);
      return true;
    }
  return false;
}

// False after a message (cli.h) on a bad argument; *help for --help.
bool parse_options(int argc, char** argv, Options* o, bool* help) {
  const char* cmd = "mx-quantize";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (is_help(a)) {
      *help = true;
      return true;
    }
    if (a == "--cold") {
      o->cold = true;
      continue;
    }
    if (a != "--format" && a != "--types" && a != "--n" && a != "--isa" && a != "--src" && a != "--rounding")
      return arg_error(cmd, "unknown option '%s'", a.c_str());
    const char* v = i + 1 < argc ? argv[++i] : nullptr;
    if (!v) return bad_value(cmd, a, v, "");
    if (a == "--format") {
      if (!parse_format(v, &o->fmt)) return bad_value(cmd, a, v, "table, csv or json");
    } else if (a == "--types") {
      for (const std::string& s : split_list(v)) {
        bool found = false;
        for (const TypeRow& r : kTypes)
          if (s == "all" || s == r.name) {
            o->types.push_back(r.t);
            found = true;
          }
        if (!found) return bad_value(cmd, a, v, "a list of MX / BDR types");
      }
    } else if (a == "--n") {
      o->sizes.clear();
      for (const std::string& s : split_list(v)) {
        int64_t n = 0;
        if (!parse_int(s, 1, int64_t{1} << 34, &n)) return bad_value(cmd, a, v, "a list of positive value counts");
        o->sizes.push_back(n);
      }
    } else if (a == "--isa") {
      for (const std::string& s : split_list(v)) {
        if (s == "all") {
          for (int t = qj_cpu_isa(); t >= QJ_ISA_SCALAR; --t) o->isas.push_back(static_cast<qj_isa>(t));
          continue;
        }
        qj_isa isa;
        if (!parse_isa_name(s, &isa)) return bad_value(cmd, a, v, "a list of scalar, avx2, avx512, avx512_vnni, all");
        o->isas.push_back(isa);
      }
    } else if (a == "--src") {
      if (!std::strcmp(v, "f32")) o->fp = QJ_F32;
      else if (!std::strcmp(v, "bf16")) o->fp = QJ_BF16;
      else return bad_value(cmd, a, v, "f32 or bf16");
    } else {  // --rounding
      if (!std::strcmp(v, "floor")) o->rounding = QJ_ROUND_FLOOR;
      else if (!std::strcmp(v, "rceil")) o->rounding = QJ_ROUND_RCEIL;
      else return bad_value(cmd, a, v, "floor or rceil");
    }
  }
  if (o->types.empty())
    for (const TypeRow& r : kTypes) o->types.push_back(r.t);
  if (o->isas.empty()) o->isas.push_back(qj_max_isa());
  return true;
}

const char* type_name(qj_dtype t) {
  for (const TypeRow& r : kTypes)
    if (r.t == t) return r.name;
  return "?";
}

// Activation-like data: a normal-ish bulk with a few outliers, so blocks have varied scales.
std::vector<float> make_input(int64_t n) {
  std::vector<float> v(n);
  uint32_t s = 12345;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    const float u = static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
    v[i] = (i % 97 == 0) ? u * 40.0f : u * 2.0f;
  }
  return v;
}

// One untimed check of the API result against the scalar reference (byte-exact).
bool check_once(qj_dtype t, qj_rounding r, const std::vector<float>& v, const std::vector<uint8_t>& elems,
                const std::vector<uint8_t>& scales) {
  const int64_t n = static_cast<int64_t>(std::min<size_t>(v.size(), 1 << 16));
  size_t eb = 0, sb = 0;
  qj_mx_storage_size(QJ_MX_LAYOUT_SPLIT, t, n, &eb, &sb);
  std::vector<uint8_t> e(eb), s(sb);
  if (qj::bdr::is_bdr_type(t)) {
    qj::ref::bdr_quantize(t, v.data(), n, e.data());
  } else {
    qj::ref::mx_quantize(t, r, v.data(), n, e.data(), s.data());
    if (std::memcmp(s.data(), scales.data(), sb) != 0) return false;
  }
  // Compare the whole blocks that lie inside the first n values (the API ran on the full size).
  const size_t whole = qj::bdr::is_bdr_type(t) ? (n / 16) * (eb / ((n + 15) / 16)) : (n / 32) * (eb / ((n + 31) / 32));
  return std::memcmp(e.data(), elems.data(), whole) == 0;
}

}  // namespace

int cmd_mx_quantize(int argc, char** argv) {
  Options o;
  bool help = false;
  if (!parse_options(argc, argv, &o, &help)) return 2;
  if (help) return usage(0);
  const qj_isa saved = qj_max_isa();
  Report rep(o.fmt);
  rep.declare({"type", "op", "src", "isa", "n", "seconds", "gbps", "reps"});
  rep.hide(Format::kTable, {"seconds"});
  TimingOptions topt;
  topt.cold = o.cold;
  int rc = 0;
  for (int64_t n : o.sizes) {
    const std::vector<float> v = make_input(n);
    std::vector<uint16_t> vh(n);
    for (int64_t i = 0; i < n; ++i) vh[i] = qj::f32_to_bf16(v[i]);
    const std::vector<float>& vq = v;  // the reference check runs on fp32 input
    const void* src = o.fp == QJ_BF16 ? static_cast<const void*>(vh.data()) : v.data();
    const double fbytes = static_cast<double>(n) * (o.fp == QJ_BF16 ? 2 : 4);
    std::vector<float> outf(n);
    for (qj_isa isa : o.isas) {
      if (qj_set_max_isa(isa) != QJ_OK) {
        std::fprintf(stderr, "mx-quantize: %s\n", qj_last_error());
        return 1;
      }
      for (qj_dtype t : o.types) {
        const bool bdr = qj::bdr::is_bdr_type(t);
        size_t eb = 0, sb = 0;
        qj_mx_storage_size(QJ_MX_LAYOUT_SPLIT, t, n, &eb, &sb);
        std::vector<uint8_t> elems(eb), scales(sb + 1);
        uint8_t* sp = bdr ? nullptr : scales.data();
        const qj_rounding r = bdr ? QJ_ROUND_FLOOR : o.rounding;
        if (qj_mx_quantize_ex(t, r, QJ_F32, vq.data(), n, elems.data(), sp) != QJ_OK ||
            !check_once(t, r, vq, elems, scales)) {
          std::fprintf(stderr, "mx-quantize: %s at %s does not match the reference: not timed\n",
                       type_name(t), qj_isa_name(isa));
          rc = 1;
          continue;
        }
        const Timing tq = time_median([&] { qj_mx_quantize_ex(t, r, o.fp, src, n, elems.data(), sp); }, topt);
        rep.add().set("type", type_name(t)).set("op", "quantize").set("src", o.fp == QJ_BF16 ? "bf16" : "f32")
            .set("isa", qj_isa_name(isa)).set("n", n).set("seconds", tq.median, 9)
            .set("gbps", fbytes / tq.median * 1e-9, 2).set("reps", tq.reps);
        const Timing td = time_median(
            [&] { qj_mx_dequantize_ex(t, elems.data(), sp, n, o.fp, outf.data()); }, topt);
        rep.add().set("type", type_name(t)).set("op", "dequantize").set("src", o.fp == QJ_BF16 ? "bf16" : "f32")
            .set("isa", qj_isa_name(isa)).set("n", n).set("seconds", td.median, 9)
            .set("gbps", fbytes / td.median * 1e-9, 2).set("reps", td.reps);
      }
    }
  }
  qj_set_max_isa(saved);
  rep.note(o.cold ? "cold: caches flushed before every call" : "warm: same buffers every call");
  rep.finish();
  return rc;
}
