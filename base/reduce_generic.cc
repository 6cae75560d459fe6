// The reduction kernels built for the x86-64 baseline (SSE2); also the fallback everywhere.
#define LOOM_REDUCE_NS generic
#define LOOM_REDUCE_ISA_NAME "generic"
#include "base/reduce_impl.h"
