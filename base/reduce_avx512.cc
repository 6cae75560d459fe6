// The reduction kernels built for AVX-512 (F, BW, VL) with AVX2, FMA and F16C; CMake adds the
// -m flags. (With -mtune=generic GCC 12 already vectorises these loops at 512 bits.)
#define LOOM_REDUCE_NS avx512
#define LOOM_REDUCE_ISA_NAME "avx512"
#include "base/reduce_impl.h"
