// quantjit-bench: the benchmark sweep tool. See README.md ("Benchmarks") for every option.
#include <cstdio>
#include <cstring>

#include "driver/commands.h"

static int usage() {
  std::fprintf(stderr,
               "usage: quantjit-bench <command> [options]\n"
               "  peak                      measure this machine's VNNI, FMA, memory and gather limits\n"
               "  gemm [--shapes F|fbgemm|llm|...] [--weights s8|s4|u4|f16|bf16|mx...] [--threads N]\n"
               "       [--format table|csv|json] [--vs onednn] [--cold] [--plot FILE.png]\n"
               "  embedding [--shapes F|fbgemm|dlrm] [--format ...]\n"
               "  mx-quantize [--format ...]\n"
               "Run a command with --help for its options.\n");
  return 2;
}

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const char* c = argv[1];
  if (!std::strcmp(c, "peak")) return cmd_peak(argc - 1, argv + 1);
  if (!std::strcmp(c, "gemm")) return cmd_gemm(argc - 1, argv + 1);
  if (!std::strcmp(c, "embedding")) return cmd_embedding(argc - 1, argv + 1);
  if (!std::strcmp(c, "mx-quantize")) return cmd_mx_quantize(argc - 1, argv + 1);
  return usage();
}
