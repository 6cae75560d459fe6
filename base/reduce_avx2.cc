// The reduction kernels built for AVX2 + FMA + F16C; CMake adds the -m flags.
#define LOOM_REDUCE_NS avx2
#define LOOM_REDUCE_ISA_NAME "avx2"
#include "base/reduce_impl.h"
