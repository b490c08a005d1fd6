// quantjit-bench subcommands. One driver, many shape files (like oneDNN's benchdnn): each
// subcommand lives in its own file and prints through report.h (table, csv or JSON Lines).
#pragma once

int cmd_peak(int argc, char** argv);         // peak.cpp: VNNI / FMA / bandwidth / gather limits
int cmd_gemm(int argc, char** argv);         // gemm.cpp: GEMM sweeps (all weight types), --vs onednn
int cmd_embedding(int argc, char** argv);    // embedding.cpp: embedding-bag grids
int cmd_mx_quantize(int argc, char** argv);  // mx_quantize.cpp: MX quantize throughput
