// C API: status names, errors, version, ISA cap, cache statistics, the pool hook.
// Argument checks and error text only; no kernel logic (DESIGN.md layering).
#include <quantjit/quantjit.h>

#include "src/core/isa.h"
#include "src/core/kernel_cache.h"
#include "src/core/status.h"
#include "src/core/threading.h"

extern "C" {

const char* qj_status_name(qj_status s) {
  switch (s) {
    case QJ_OK: return "QJ_OK";
    case QJ_ERR_INVALID_ARGUMENT: return "QJ_ERR_INVALID_ARGUMENT";
    case QJ_ERR_OUT_OF_RANGE: return "QJ_ERR_OUT_OF_RANGE";
    case QJ_ERR_UNSUPPORTED: return "QJ_ERR_UNSUPPORTED";
    case QJ_ERR_OUT_OF_MEMORY: return "QJ_ERR_OUT_OF_MEMORY";
    case QJ_ERR_CORRUPT_DATA: return "QJ_ERR_CORRUPT_DATA";
    case QJ_ERR_VERSION_MISMATCH: return "QJ_ERR_VERSION_MISMATCH";
    case QJ_ERR_ISA_UNAVAILABLE: return "QJ_ERR_ISA_UNAVAILABLE";
    case QJ_ERR_INTERNAL: return "QJ_ERR_INTERNAL";
  }
  return "QJ_ERR_UNKNOWN";
}

const char* qj_last_error(void) { return qj::last_error(); }
const char* qj_version(void) { return QJ_VERSION_STRING; }

qj_isa qj_cpu_isa(void) { return qj::cpu_isa(); }
qj_isa qj_max_isa(void) { return qj::max_isa(); }
qj_status qj_set_max_isa(qj_isa isa) { return qj::set_max_isa(isa); }
const char* qj_isa_name(qj_isa isa) { return qj::isa_name(isa); }

const char* qj_dtype_name(qj_dtype t) {
  switch (t) {
    case QJ_U8: return "u8";
    case QJ_S8: return "s8";
    case QJ_S32: return "s32";
    case QJ_F32: return "f32";
    case QJ_F16: return "f16";
    case QJ_BF16: return "bf16";
    case QJ_S4: return "s4";
    case QJ_U4: return "u4";
    case QJ_MXFP8_E4M3: return "mxfp8_e4m3";
    case QJ_MXFP8_E5M2: return "mxfp8_e5m2";
    case QJ_MXFP6_E3M2: return "mxfp6_e3m2";
    case QJ_MXFP6_E2M3: return "mxfp6_e2m3";
    case QJ_MXFP4_E2M1: return "mxfp4";
    case QJ_MXINT8: return "mxint8";
    case QJ_BDR_MX9: return "mx9";
    case QJ_BDR_MX6: return "mx6";
    case QJ_BDR_MX4: return "mx4";
    case QJ_FUSED_8BIT: return "fused8";
    case QJ_FUSED_4BIT: return "fused4";
    case QJ_FUSED_2BIT: return "fused2";
    default: return "undefined";
  }
}

void qj_set_parallel_for(qj_parallel_for_fn fn, void* pool) { qj::set_parallel_for(fn, pool); }

void qj_cache_stats(qj_cache_stats_t* out) {
  if (out) qj::cache_stats(out);
}
void qj_cache_clear(void) { qj::cache_clear(); }

}  // extern "C"
