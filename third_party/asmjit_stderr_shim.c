/* See third_party/CMakeLists.txt: asmjit's one non-PIC reference to `stderr` is renamed to this
 * hidden pointer so that the static asmjit links into libquantjit.so. */
#include <stdio.h>

__attribute__((visibility("hidden"))) FILE* qj_asmjit_stderr;

__attribute__((constructor)) static void qj_asmjit_stderr_init(void) { qj_asmjit_stderr = stderr; }
