// This machine's measured limits, for `quantjit-bench peak` and for the "% of peak" columns of
// every other subcommand.
//
// Every figure is measured on the calling thread (pin it: `taskset -c 1`), in a few milliseconds,
// the first time it is asked for, and cached in the process; later calls return the cached value.
// Compute loops are generated with asmjit here in the bench (not in the library): chains of
// vpdpbusd / vfmadd231ps on independent accumulators, so the figure is the issue-rate limit.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <quantjit/quantjit.h>

namespace bench {

// Peaks of one core (ops = 2 per multiply-add). width is 512 (zmm) or 256 (ymm).
double measure_vnni_gops(int width = 512);   // vpdpbusd u8*s8->s32; 0 if the CPU lacks AVX512-VNNI
double measure_fma_gflops(int width = 512);  // vfmadd231ps fp32;   0 if the CPU lacks it
double measure_core_ghz();                   // from a chain of dependent integer adds

// Detailed compute result: the best of several accumulator counts.
struct ComputePeak {
  double gops = 0;          // GOPS (VNNI) or GFLOPS (FMA)
  int accumulators = 0;     // independent accumulators of the best loop
  double instr_per_clock = 0;
};
ComputePeak measure_vnni(int width);
ComputePeak measure_fma(int width);
ComputePeak measure_maddubs(int width);  // vpmaddubsw u8*s8 pairs -> s16: AVX2 / AVX-512 BW

// The peak a tier's kernels are divided by: the issue rate of the widest multiply the tier may
// use, and its name. Integer math: vpdpbusd zmm (VNNI tier), vpmaddubsw zmm / ymm (AVX-512 /
// AVX2 tiers; the exact INT8 kernels there multiply s16 pairs with vpmaddwd, half as many
// products an instruction, so they reach at most about half of it); float math: vfmadd231ps zmm
// (AVX-512 tiers) / ymm (AVX2). {0, ""} for the scalar tier.
struct TierPeak {
  double gops = 0;
  const char* instr = "";
};
TierPeak tier_peak(qj_isa isa, bool float_math);

// Cache capacities of this core (bytes), from sysconf / sysfs; L3 is the whole shared L3.
struct CacheSizes {
  size_t l1 = 32 << 10, l2 = 1 << 20, l3 = 32 << 20;
};
const CacheSizes& cache_sizes();

// Sequential-read bandwidth (GB/s, 1e9 bytes/s) of one core over a working set of `bytes`
// (zmm loads, ymm without AVX-512, read repeatedly), on 2 MiB pages: hardware prefetchers stop at
// page boundaries, and the library's big buffers ask for huge pages too.
double measure_bandwidth(size_t bytes);

// An anonymous mapping of `bytes`, 2 MiB aligned, first-touched, with madvise(MADV_HUGEPAGE)
// (huge = true: 2 MiB transparent huge pages where the kernel grants them, as the library asks
// for its packed weights and embedding tables) or MADV_NOHUGEPAGE (4 KiB pages). Move-only.
class PageBuffer {
 public:
  PageBuffer() = default;
  PageBuffer(size_t bytes, bool huge);
  ~PageBuffer();
  PageBuffer(PageBuffer&& o) noexcept;
  PageBuffer& operator=(PageBuffer&& o) noexcept;
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  uint8_t* data() const { return p_; }
  size_t size() const { return bytes_; }
  explicit operator bool() const { return p_ != nullptr; }
  double thp_fraction() const;  // share actually backed by huge pages (/proc/self/smaps)

 private:
  uint8_t* p_ = nullptr;
  size_t bytes_ = 0;
  void* base_ = nullptr;
  size_t map_bytes_ = 0;
};

// One sequential read of [p, p + bytes) with the same loop (bytes rounded down to 512, at
// least 512 must be readable). For timing a read side by side with a kernel, e.g. the cold M = 1
// roof: flush, then stream the weights' size from DRAM, exactly as the kernel must.
void read_once(const void* p, size_t bytes);

// The memory level a working set sits in when warm, its representative working set, and that
// level's measured bandwidth (the roof for bandwidth-bound kernels such as M = 1 GEMM).
enum class MemLevel { kL1 = 0, kL2 = 1, kL3 = 2, kDram = 3 };
const char* level_name(MemLevel l);               // "l1", "l2", "l3", "dram"
MemLevel level_of(size_t bytes);                  // smallest level holding bytes (<= 3/4 of it)
size_t level_working_set(MemLevel l);             // the size measure_level_bandwidth() uses
double level_bandwidth(MemLevel l);               // GB/s, cached

// Random row gather + sum (the embedding-bag limit): random rows of row_bytes (a multiple of 64)
// from a table of table_bytes, summed into ymm accumulators, with software prefetch of the row
// `prefetch` lookups ahead (0: none). huge_pages: table mapped with madvise(MADV_HUGEPAGE) (2 MiB
// transparent huge pages), else MADV_NOHUGEPAGE (4 KiB pages). The table is kept for later calls
// with the same (table_bytes, huge_pages); release_gather_tables() frees it.
struct GatherResult {
  double ns_per_row = 0;
  double rows_per_s = 0;
  double gbs = 0;            // useful bytes (row_bytes * rows/s)
  int prefetch = 0;          // the distance used
  double thp_fraction = 0;   // share of the table actually backed by huge pages
};
GatherResult measure_gather(size_t row_bytes, bool huge_pages, int prefetch,
                            size_t table_bytes = size_t{1} << 30);
// The best over prefetch distances {4, 8, 16, 32}: the limit quoted in PERF.md's table. Cached.
GatherResult gather_limit(size_t row_bytes, bool huge_pages, size_t table_bytes = size_t{1} << 30);
void release_gather_tables();

}  // namespace bench
