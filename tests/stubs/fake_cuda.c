/* tests/stubs/fake_cuda.c - a stand-in libcuda.so.1: only enough for a process to "have CUDA
 * loaded", so tests can check that libkestrel refuses to change CUDA_VISIBLE_DEVICES then. */
#include <stdlib.h>

#define API __attribute__((visibility("default")))

API int cuInit(unsigned int flags) { return flags ? 1 : 0; }
API int cuDriverGetVersion(int *v) { *v = 12040; return 0; }
