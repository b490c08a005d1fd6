// quantjit-bench: the benchmark sweep tool. See README.md ("Benchmarks") for every option.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "driver/commands.h"

static int usage(int status = 2) {  // --help (status 0): on stdout
  std::fprintf(status ? stderr : stdout,
               "usage: quantjit-bench <command> [options]\n"
               "  peak                      measure this machine's VNNI, FMA, memory and gather limits\n"
               "  gemm [--shapes F|fbgemm|llm|...] [--weights s8|s4|u4|f16|bf16|mx...] [--threads N]\n"
               "       [--format table|csv|json] [--vs onednn] [--cold] [--plot FILE.png]\n"
               "  embedding [--shapes F|fbgemm|dlrm] [--format ...]\n"
               "  mx-quantize [--format ...]\n"
               "Run a command with --help for its options.\n");
  return status;
}

int main(int argc, char** argv) {
  // oneDNN's OpenMP workers spin after each parallel region by default and would steal the cores
  // our threads run on when both libraries are timed alternately. The OpenMP runtime reads its
  // settings when it loads, so set a passive wait policy and restart once.
  if (!std::getenv("OMP_WAIT_POLICY")) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
  }
  if (argc < 2) return usage();
  const char* c = argv[1];
  if (!std::strcmp(c, "peak")) return cmd_peak(argc - 1, argv + 1);
  if (!std::strcmp(c, "gemm")) return cmd_gemm(argc - 1, argv + 1);
  if (!std::strcmp(c, "embedding")) return cmd_embedding(argc - 1, argv + 1);
  if (!std::strcmp(c, "mx-quantize")) return cmd_mx_quantize(argc - 1, argv + 1);
  if (!std::strcmp(c, "--help") || !std::strcmp(c, "-h")) return usage(0);
  std::fprintf(stderr, "quantjit-bench: unknown command '%s'\n", c);
  return usage();
}
