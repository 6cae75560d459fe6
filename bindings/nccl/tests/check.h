/* The tests' one assertion: CHECK(cond) reports a failed condition and counts it; a test's
 * exit status is failures == 0. */
#ifndef LOOM_BINDINGS_NCCL_TESTS_CHECK_H_
#define LOOM_BINDINGS_NCCL_TESTS_CHECK_H_
#include <stdio.h>

static int failures;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

#endif
