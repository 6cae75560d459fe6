/* For fortran_test.f90: the preload's loomMpiCounts, found with dlsym (-1 without it). */
#define _GNU_SOURCE
#include <dlfcn.h>

void loom_calls_on_loom_(long long* onLoom) {
  void (*counts)(long*, long*, int*) =
      (void (*)(long*, long*, int*))dlsym(RTLD_DEFAULT, "loomMpiCounts");
  long n = -1;
  if (counts) counts(&n, 0, 0);
  *onLoom = n;
}
