/* A stand-in for another copy of cpuinfo in the process (PyTorch's libc10.so exports one, of
 * another version): it exports cpuinfo's entry points with contents that no real copy would have
 * (an ISA structure of zeros, no caches, no cores). Linked ahead of libquantjit.so into
 * cpuinfo_interposed_test, it takes the symbols the library imports from libcpuinfo. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* cpuinfo's ISA flags structure, far larger than any version's, all false */
unsigned char cpuinfo_isa[4096];

bool cpuinfo_initialize(void) { return true; }
void cpuinfo_deinitialize(void) {}
uint32_t cpuinfo_get_cores_count(void) { return 0; }
const void* cpuinfo_get_core(uint32_t i) { (void)i; return NULL; }
uint32_t cpuinfo_get_l1d_caches_count(void) { return 0; }
const void* cpuinfo_get_l1d_cache(uint32_t i) { (void)i; return NULL; }
uint32_t cpuinfo_get_l2_caches_count(void) { return 0; }
const void* cpuinfo_get_l2_cache(uint32_t i) { (void)i; return NULL; }
uint32_t cpuinfo_get_l3_caches_count(void) { return 0; }
const void* cpuinfo_get_l3_cache(uint32_t i) { (void)i; return NULL; }

/* the test's way to see that the process resolves cpuinfo_initialize here */
void* qj_test_interposer_initialize_address(void) { return (void*)&cpuinfo_initialize; }
