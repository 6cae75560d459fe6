/* Every MPI collective that libloom-mpi-preload.so interposes, against PMPI_*'s own result
 * (called directly here, so never interposed), on MPI_COMM_WORLD, a duplicate and a split, in
 * place and out of place, with every datatype and op the interposer maps and the cases it
 * hands to MPI; and where each call went, through the preload's loomMpiCounts.
 *
 *   mpirun -np 4 [-x LD_PRELOAD=libloom-mpi-preload.so] loom_mpi_collectives_test MODE
 *
 * MODE says what the run expects of the routing: "loom" (preloaded: calls loom can honour of at
 * least LOOM_MPI_MIN_BYTES run on it, the rest fall through), "off" (preloaded with
 * LOOM_MPI_INTERPOSE=0: everything falls through), "model" (preloaded with no threshold: calls
 * loom can honour run where loom's model and the sizes' trial calls send them, either way, and
 * the rest fall through) or "none" (not preloaded: no loomMpiCounts).
 * Every case is checked bit for bit: the inputs are small integers, whose sums, products,
 * minima and maxima are exact in every type and every order. */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum Kind { SIGNED, UNSIGNED, REAL };
typedef struct {
  MPI_Datatype type;
  const char* name;
  enum Kind kind;
  int width;  /* bytes of one part */
  int parts;  /* 2 for a complex number */
  int mapped; /* loom reduces it (with every op for parts == 1, with MPI_SUM for 2) */
} Type;

typedef void (*CountsFn)(long*, long*, int*);
static CountsFn gCounts;
static int gExpectLoom; /* MODE "loom" */
static int gEitherWay;  /* MODE "model": a call loom can honour may run on loom or on MPI */
static size_t gMinBytes;
static long gLastLoom, gLastOther;
static unsigned char *gSend, *gRecv, *gRef;
static const size_t kBufferBytes = 1 << 22;

#define BIG 4099   /* elements of a reduction or broadcast: at least 4096 bytes */
#define BLOCK 2053 /* elements of one rank's block: times 2 or more ranks, over 4096 bytes */

/* The call just made went to loom (1) or fell through (0), as loomMpiCounts says. */
static void expectRoute(int onLoom, const char* what) {
  long loom = 0, other = 0;
  if (gCounts == NULL) return;
  gCounts(&loom, &other, NULL);
  const int want = gExpectLoom && onLoom;
  if (gEitherWay && onLoom)
    CHECK(loom - gLastLoom + other - gLastOther == 1, "%s: %ld calls counted", what,
          loom - gLastLoom + other - gLastOther);
  else CHECK(loom - gLastLoom == want && other - gLastOther == !want,
        "%s: expected it %s (loom calls +%ld, fall-throughs +%ld)", what,
        want ? "on loom" : "to fall through", loom - gLastLoom, other - gLastOther);
  gLastLoom = loom;
  gLastOther = other;
}

/* The preload's threshold for call ("MPI_Alltoall"): LOOM_MPI_MIN_BYTES_ALLTOALL where set,
 * else LOOM_MPI_MIN_BYTES. */
static size_t minBytesOf(const char* call) {
  char name[64] = "LOOM_MPI_MIN_BYTES_";
  size_t at = strlen(name);
  for (const char* c = call + 4; *c != '\0' && at + 1 < sizeof(name); ++c)
    name[at++] = (char)toupper((unsigned char)*c);
  name[at] = '\0';
  const char* value = getenv(name);
  return value != NULL ? (size_t)strtoull(value, NULL, 0) : gMinBytes;
}

/* Input i of rank for op: small integers (negative ones for signed and real types). */
static long long inputValue(MPI_Op op, enum Kind kind, int rank, size_t i) {
  const int sign = kind == UNSIGNED ? 0 : 1;
  if (op == MPI_PROD) {
    const long long v = 1 + (long long)((rank + i) % 3);
    return sign && (rank + i) % 4 == 0 ? -v : v;
  }
  if (op == MPI_SUM) return (long long)((rank * 7 + i * 3) % 11) - 5 * sign;
  return (long long)((rank * 13 + i * 7) % 50) - 25 * sign;
}

static void store(void* buf, size_t i, const Type* t, long long v) {
  if (t->kind == REAL) {
    if (t->width == 4) ((float*)buf)[i] = (float)v;
    else ((double*)buf)[i] = (double)v;
    return;
  }
  switch (t->width) {
    case 1: ((int8_t*)buf)[i] = (int8_t)v; break;
    case 2: ((int16_t*)buf)[i] = (int16_t)v; break;
    case 4: ((int32_t*)buf)[i] = (int32_t)v; break;
    default: ((int64_t*)buf)[i] = (int64_t)v; break;
  }
}

static void fill(void* buf, const Type* t, MPI_Op op, int rank, size_t elements) {
  for (size_t i = 0; i < elements * (size_t)t->parts; ++i)
    store(buf, i, t, inputValue(op, t->kind, rank, i));
}

static size_t typeBytes(MPI_Datatype type) {
  int size = 0;
  PMPI_Type_size(type, &size);
  return (size_t)size;
}

static const char* commName(MPI_Comm comm) {
  static char name[MPI_MAX_OBJECT_NAME];
  int length = 0;
  PMPI_Comm_get_name(comm, name, &length);
  return name;
}

enum Reduction { ALLREDUCE, REDUCE, REDUCE_SCATTER_BLOCK };
static const char* const kReductionNames[] = {"MPI_Allreduce", "MPI_Reduce",
                                              "MPI_Reduce_scatter_block"};

/* One reduction of count elements (per block for reduce-scatter) against PMPI's. */
static void checkReduction(enum Reduction call, MPI_Comm comm, const Type* t, MPI_Op op,
                           const char* opName, int count, int inPlace, int viaLoom) {
  int n = 0, rank = 0;
  PMPI_Comm_size(comm, &n);
  PMPI_Comm_rank(comm, &rank);
  const int root = n - 1;
  const size_t element = (size_t)t->width * (size_t)t->parts;
  const size_t inElements = (size_t)count * (call == REDUCE_SCATTER_BLOCK ? (size_t)n : 1);
  const size_t outBytes = (size_t)count * element;
  fill(gSend, t, op, rank, inElements);
  memset(gRef, 0x5a, inElements * element);
  memcpy(gRecv, gSend, inElements * element); /* the input, for the in-place forms */
  const void* in = inPlace ? MPI_IN_PLACE : gSend;
  if (call == ALLREDUCE) {
    PMPI_Allreduce(gSend, gRef, count, t->type, op, comm);
    MPI_Allreduce(in, gRecv, count, t->type, op, comm);
  } else if (call == REDUCE) {
    PMPI_Reduce(gSend, gRef, count, t->type, op, root, comm);
    MPI_Reduce(inPlace && rank == root ? MPI_IN_PLACE : gSend, gRecv, count, t->type, op, root,
               comm);
  } else {
    PMPI_Reduce_scatter_block(gSend, gRef, count, t->type, op, comm);
    MPI_Reduce_scatter_block(in, gRecv, count, t->type, op, comm);
  }
  char what[256];
  snprintf(what, sizeof(what), "%s %s %s count %d %s on %s", kReductionNames[call], t->name,
           opName, count, inPlace ? "in place" : "out of place", commName(comm));
  if (call != REDUCE || rank == root)
    CHECK(memcmp(gRecv, gRef, outBytes) == 0, "%s: result differs from PMPI's", what);
  const size_t bytes = outBytes * (call == REDUCE_SCATTER_BLOCK ? (size_t)n : 1);
  expectRoute(viaLoom && bytes >= minBytesOf(kReductionNames[call]), what);
}

static const Type* reductionTypes(int* count) {
  static Type types[48];
  int k = 0;
#define T(type, kind, width, parts, mapped) \
  types[k++] = (Type){type, #type, kind, width, parts, mapped}
  T(MPI_SIGNED_CHAR, SIGNED, 1, 1, 1);
  T(MPI_UNSIGNED_CHAR, UNSIGNED, 1, 1, 1);
  T(MPI_INT, SIGNED, (int)sizeof(int), 1, 1);
  T(MPI_UNSIGNED, UNSIGNED, (int)sizeof(unsigned), 1, 1);
  T(MPI_LONG, SIGNED, (int)sizeof(long), 1, 1);
  T(MPI_UNSIGNED_LONG, UNSIGNED, (int)sizeof(long), 1, 1);
  T(MPI_LONG_LONG, SIGNED, 8, 1, 1);
  T(MPI_UNSIGNED_LONG_LONG, UNSIGNED, 8, 1, 1);
  T(MPI_INT8_T, SIGNED, 1, 1, 1);
  T(MPI_UINT8_T, UNSIGNED, 1, 1, 1);
  T(MPI_INT32_T, SIGNED, 4, 1, 1);
  T(MPI_UINT32_T, UNSIGNED, 4, 1, 1);
  T(MPI_INT64_T, SIGNED, 8, 1, 1);
  T(MPI_UINT64_T, UNSIGNED, 8, 1, 1);
  T(MPI_AINT, SIGNED, (int)sizeof(MPI_Aint), 1, 1);
  /* Open MPI 4.1 orders it as unsigned in MIN and MAX: left to MPI. */
  T(MPI_OFFSET, SIGNED, (int)sizeof(MPI_Offset), 1, 0);
  T(MPI_COUNT, SIGNED, (int)sizeof(MPI_Count), 1, 1);
  T(MPI_FLOAT, REAL, 4, 1, 1);
  T(MPI_DOUBLE, REAL, 8, 1, 1);
  T(MPI_C_FLOAT_COMPLEX, REAL, 4, 2, 1);
  T(MPI_C_DOUBLE_COMPLEX, REAL, 8, 2, 1);
  /* Fortran's, as a Fortran program's calls carry them. */
  T(MPI_INTEGER, SIGNED, (int)typeBytes(MPI_INTEGER), 1, 1);
  T(MPI_INTEGER1, SIGNED, 1, 1, 1);
  T(MPI_INTEGER4, SIGNED, 4, 1, 1);
  T(MPI_INTEGER8, SIGNED, 8, 1, 1);
  T(MPI_REAL, REAL, 4, 1, 1);
  T(MPI_DOUBLE_PRECISION, REAL, 8, 1, 1);
  T(MPI_REAL4, REAL, 4, 1, 1);
  T(MPI_REAL8, REAL, 8, 1, 1);
  T(MPI_COMPLEX, REAL, 4, 2, 1);
  T(MPI_DOUBLE_COMPLEX, REAL, 8, 2, 1);
  /* No 16-bit integers in loom: these fall through. */
  T(MPI_INTEGER2, SIGNED, 2, 1, 0);
  T(MPI_SHORT, SIGNED, 2, 1, 0);
  T(MPI_UNSIGNED_SHORT, UNSIGNED, 2, 1, 0);
  T(MPI_INT16_T, SIGNED, 2, 1, 0);
#undef T
  *count = k;
  return types;
}

static void checkReductions(MPI_Comm comm) {
  const MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX};
  const char* const opNames[] = {"MPI_SUM", "MPI_PROD", "MPI_MIN", "MPI_MAX"};
  int ntypes = 0;
  const Type* types = reductionTypes(&ntypes);
  for (int t = 0; t < ntypes; ++t) {
    for (int o = 0; o < 4; ++o) {
      /* Complex numbers have no order, and loom only adds them. */
      if (types[t].parts == 2 && (ops[o] == MPI_MIN || ops[o] == MPI_MAX)) continue;
      const int mapped = types[t].mapped && (types[t].parts == 1 || ops[o] == MPI_SUM);
      for (int inPlace = 0; inPlace < 2; ++inPlace) {
        for (int call = ALLREDUCE; call <= REDUCE_SCATTER_BLOCK; ++call) {
          const int count = call == REDUCE_SCATTER_BLOCK ? BLOCK : BIG;
          checkReduction(call, comm, &types[t], ops[o], opNames[o], count, inPlace, mapped);
          checkReduction(call, comm, &types[t], ops[o], opNames[o], 3, inPlace, mapped);
        }
      }
    }
  }
}

/* Bytes that differ by rank and position, for the calls that only move data. */
static void pattern(unsigned char* buf, size_t bytes, int rank) {
  for (size_t i = 0; i < bytes; ++i) buf[i] = (unsigned char)(rank * 31 + i * 7 + 1);
}

static size_t extentOf(MPI_Datatype type) {
  MPI_Aint lb = 0, extent = 0;
  PMPI_Type_get_extent(type, &lb, &extent);
  return (size_t)extent;
}

static void compareMoved(size_t bytes, int viaLoom, size_t callBytes, const char* call,
                         const Type* t, int count, int inPlace, MPI_Comm comm) {
  char what[256];
  snprintf(what, sizeof(what), "%s %s count %d %s on %s", call, t->name, count,
           inPlace ? "in place" : "out of place", commName(comm));
  CHECK(memcmp(gRecv, gRef, bytes) == 0, "%s: result differs from PMPI's", what);
  expectRoute(viaLoom && callBytes >= minBytesOf(call), what);
}

static void checkBcast(MPI_Comm comm, const Type* t, int count) {
  int n = 0, rank = 0;
  PMPI_Comm_size(comm, &n);
  PMPI_Comm_rank(comm, &rank);
  const size_t span = (size_t)count * extentOf(t->type);
  pattern(gRecv, span, rank);
  memcpy(gRef, gRecv, span);
  PMPI_Bcast(gRef, count, t->type, 1 % n, comm);
  MPI_Bcast(gRecv, count, t->type, 1 % n, comm);
  compareMoved(span, t->mapped, (size_t)count * typeBytes(t->type), "MPI_Bcast", t, count, 0,
               comm);
}

static void checkAllgather(MPI_Comm comm, const Type* t, int count, int inPlace) {
  int n = 0, rank = 0;
  PMPI_Comm_size(comm, &n);
  PMPI_Comm_rank(comm, &rank);
  const size_t span = (size_t)count * extentOf(t->type);
  pattern(gSend, span, rank);
  memset(gRecv, 0x33, span * n);
  memset(gRef, 0x33, span * n);
  if (inPlace) { /* MPI's in place: this rank's block already in the output, where it goes */
    memcpy(gRecv + rank * span, gSend, span);
    memcpy(gRef + rank * span, gSend, span);
  }
  PMPI_Allgather(gSend, count, t->type, gRef, count, t->type, comm);
  MPI_Allgather(inPlace ? MPI_IN_PLACE : gSend, count, t->type, gRecv, count, t->type, comm);
  compareMoved(span * n, t->mapped, (size_t)count * typeBytes(t->type) * n, "MPI_Allgather", t,
               count, inPlace, comm);
}

static void checkAlltoall(MPI_Comm comm, const Type* t, int count, int inPlace) {
  int n = 0, rank = 0;
  PMPI_Comm_size(comm, &n);
  PMPI_Comm_rank(comm, &rank);
  const size_t total = (size_t)count * extentOf(t->type) * n;
  pattern(gSend, total, rank);
  memset(gRecv, 0x33, total);
  memset(gRef, 0x33, total);
  if (inPlace) { /* MPI's in place: the input is in the output buffer */
    memcpy(gRecv, gSend, total);
    memcpy(gRef, gSend, total);
  }
  PMPI_Alltoall(gSend, count, t->type, gRef, count, t->type, comm);
  MPI_Alltoall(inPlace ? MPI_IN_PLACE : gSend, count, t->type, gRecv, count, t->type, comm);
  /* loom has no in-place all-to-all: it falls through. */
  compareMoved(total, t->mapped && !inPlace, (size_t)count * typeBytes(t->type) * n,
               "MPI_Alltoall", t, count, inPlace, comm);
}

/* Block j of rank r holds base + (r + j) % 3 elements (so what r sends j is what j expects
 * from r), one element apart: displacements matter. */
static void checkAlltoallv(MPI_Comm comm, const Type* t, int base, int inPlace) {
  int n = 0, rank = 0;
  PMPI_Comm_size(comm, &n);
  PMPI_Comm_rank(comm, &rank);
  int counts[64], displs[64];
  size_t elements = 0;
  for (int j = 0; j < n; ++j) {
    counts[j] = base + (rank + j) % 3;
    displs[j] = (int)elements;
    elements += (size_t)counts[j] + 1;
  }
  const size_t span = elements * extentOf(t->type);
  pattern(gSend, span, rank);
  memset(gRecv, 0x33, span);
  memset(gRef, 0x33, span);
  if (inPlace) {
    memcpy(gRecv, gSend, span);
    memcpy(gRef, gSend, span);
  }
  PMPI_Alltoallv(gSend, counts, displs, t->type, gRef, counts, displs, t->type, comm);
  MPI_Alltoallv(inPlace ? MPI_IN_PLACE : gSend, counts, displs, t->type, gRecv, counts, displs,
                t->type, comm);
  /* No size threshold (the sizes differ by rank); no in-place form on loom. */
  compareMoved(span, t->mapped && !inPlace, SIZE_MAX, "MPI_Alltoallv", t, base, inPlace, comm);
}

/* The datatypes the data-moving calls send as bytes: every dense one, derived ones included;
 * a vector (with holes) falls through. */
static const Type* movingTypes(int* count) {
  static Type types[64];
  static MPI_Datatype contiguous = MPI_DATATYPE_NULL, vector = MPI_DATATYPE_NULL;
  if (contiguous == MPI_DATATYPE_NULL) {
    PMPI_Type_contiguous(3, MPI_INT, &contiguous);
    PMPI_Type_commit(&contiguous);
    PMPI_Type_vector(2, 1, 2, MPI_INT, &vector);
    PMPI_Type_commit(&vector);
  }
  int k = 0;
  const Type* reduced = reductionTypes(&k);
  memcpy(types, reduced, sizeof(Type) * (size_t)k);
  for (int i = 0; i < k; ++i) types[i].mapped = 1;
#define T(type, name, mapped) types[k++] = (Type){type, name, UNSIGNED, 1, 1, mapped}
  T(MPI_BYTE, "MPI_BYTE", 1);
  T(MPI_CHAR, "MPI_CHAR", 1);
  T(MPI_LONG_DOUBLE, "MPI_LONG_DOUBLE", 1);
  T(MPI_2INT, "MPI_2INT", 1);
  T(MPI_C_BOOL, "MPI_C_BOOL", 1);
  T(contiguous, "a contiguous type of 3 MPI_INT", 1);
  T(vector, "a vector type of 2 MPI_INT with holes", 0);
#undef T
  *count = k;
  return types;
}

static void checkMoving(MPI_Comm comm) {
  int ntypes = 0;
  const Type* types = movingTypes(&ntypes);
  for (int i = 0; i < ntypes; ++i) {
    const Type* t = &types[i];
    checkBcast(comm, t, BIG);
    checkBcast(comm, t, 3);
    for (int inPlace = 0; inPlace < 2; ++inPlace) {
      checkAllgather(comm, t, BLOCK, inPlace);
      checkAllgather(comm, t, 1, inPlace);
      checkAlltoall(comm, t, BLOCK, inPlace);
      checkAlltoall(comm, t, 1, inPlace);
      checkAlltoallv(comm, t, BLOCK, inPlace);
      checkAlltoallv(comm, t, 0, inPlace);
    }
  }
}

static void intSum(void* in, void* inout, int* len, MPI_Datatype* type) {
  (void)type;
  for (int i = 0; i < *len; ++i) ((int*)inout)[i] += ((int*)in)[i];
}

/* What loom cannot do gives MPI's answer: a user-defined op, MPI_MAXLOC, an intercommunicator
 * (between the two halves of split). */
static void checkFallThrough(MPI_Comm split) {
  int rank = 0, size = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Op userSum;
  PMPI_Op_create(intSum, 1, &userSum);
  int* in = (int*)gSend;
  for (int i = 0; i < BIG * 2; ++i) in[i] = rank * 5 + i % 17;
  PMPI_Allreduce(in, gRef, BIG, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(in, gRecv, BIG, MPI_INT, userSum, MPI_COMM_WORLD);
  CHECK(memcmp(gRecv, gRef, BIG * sizeof(int)) == 0, "a user-defined sum differs from MPI_SUM");
  expectRoute(0, "MPI_Allreduce with a user-defined op");
  PMPI_Op_free(&userSum);

  PMPI_Allreduce(in, gRef, BIG, MPI_2INT, MPI_MAXLOC, MPI_COMM_WORLD);
  MPI_Allreduce(in, gRecv, BIG, MPI_2INT, MPI_MAXLOC, MPI_COMM_WORLD);
  CHECK(memcmp(gRecv, gRef, BIG * 2 * sizeof(int)) == 0, "MPI_MAXLOC differs from PMPI's");
  expectRoute(0, "MPI_Allreduce with MPI_MAXLOC");

  if (size < 2) return;
  /* The split's leaders are the highest world rank of each parity (its key is reversed). */
  const int other = 1 - rank % 2;
  const int remoteLeader = (size - 1) % 2 == other ? size - 1 : size - 2;
  MPI_Comm inter;
  PMPI_Intercomm_create(split, 0, MPI_COMM_WORLD, remoteLeader, 7, &inter);
  PMPI_Allreduce(in, gRef, BIG, MPI_INT, MPI_SUM, inter);
  MPI_Allreduce(in, gRecv, BIG, MPI_INT, MPI_SUM, inter);
  CHECK(memcmp(gRecv, gRef, BIG * sizeof(int)) == 0, "MPI_Allreduce on an intercommunicator");
  expectRoute(0, "MPI_Allreduce on an intercommunicator");
  PMPI_Comm_free(&inter);
}

/* Bad input gets MPI's error through the communicator's error handler, here
 * MPI_ERRORS_RETURN: a send buffer that is the receive buffer (not MPI_IN_PLACE) goes to MPI,
 * which refuses it (or not) as without the preload; a NULL output, which Open MPI does not check (it would crash), loom
 * refuses (preloaded runs only). */
static void checkBadInput(MPI_Comm comm) {
  MPI_Comm returning;
  PMPI_Comm_dup(comm, &returning);
  PMPI_Comm_set_errhandler(returning, MPI_ERRORS_RETURN);
  /* Open MPI reports a bad buffer on MPI_COMM_WORLD, whichever the communicator. */
  PMPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rc = MPI_Allreduce(gSend, gSend, BIG, MPI_INT, MPI_SUM, returning);
  CHECK(rc != MPI_SUCCESS, "MPI_Allreduce with sendbuf == recvbuf succeeded");
  expectRoute(0, "MPI_Allreduce with sendbuf == recvbuf");
  /* Open MPI takes this one (as in place): so does the preload, by handing it to MPI. */
  MPI_Alltoall(gSend, BLOCK, MPI_INT, gSend, BLOCK, MPI_INT, returning);
  expectRoute(0, "MPI_Alltoall with sendbuf == recvbuf");
  if (gExpectLoom) {
    rc = MPI_Allreduce(gSend, NULL, BIG, MPI_INT, MPI_SUM, returning);
    CHECK(rc == MPI_ERR_ARG, "MPI_Allreduce into NULL returned %d, not MPI_ERR_ARG", rc);
    expectRoute(1, "MPI_Allreduce into NULL");
  }
  PMPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  PMPI_Comm_free(&returning);
}

/* No rank leaves the barrier before the last one enters it: rank 0 enters 0.3 s late. */
static void checkBarrier(MPI_Comm comm) {
  int rank = 0;
  PMPI_Comm_rank(comm, &rank);
  PMPI_Barrier(comm);
  const double start = MPI_Wtime();
  if (rank == 0) {
    while (MPI_Wtime() - start < 0.5) {
    }
  }
  MPI_Barrier(comm);
  /* The ranks leave the first barrier up to a scheduling delay apart: 0.1 s of margin. */
  const double waited = MPI_Wtime() - start;
  CHECK(waited >= 0.4, "left MPI_Barrier after %.3f s, before rank 0 entered it", waited);
  expectRoute(0 >= minBytesOf("MPI_Barrier"), "MPI_Barrier");
}

/* The loom communicators alive, once those being destroyed in the background (rank 0's, which
 * wait for the other ranks) are gone: a few seconds at most. */
static int liveAfterDestruction(int expected) {
  int live = -1;
  const double start = MPI_Wtime();
  do {
    gCounts(NULL, NULL, &live);
  } while (live != expected && MPI_Wtime() - start < 30);
  return live;
}

/* Communicators made and freed over and over leave no loom communicator behind. */
static void checkLifetimes(void) {
  /* MPI_COMM_WORLD's is the one left from the checks before (when calls run on loom). */
  /* Made by the first call loom can honour, in modes loom and model alike. */
  const int made = gExpectLoom || gEitherWay;
  int rank = 0, base = made, live = 0, ntypes = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (gCounts) {
    live = liveAfterDestruction(base);
    CHECK(live == base, "%d loom communicators live before the rounds, not %d", live, base);
  }
  const Type* t = &reductionTypes(&ntypes)[2]; /* MPI_INT */
  for (int round = 0; round < 10; ++round) {
    MPI_Comm dup, split;
    PMPI_Comm_dup(MPI_COMM_WORLD, &dup);
    PMPI_Comm_split(MPI_COMM_WORLD, (rank + round) % 2, rank, &split);
    checkReduction(ALLREDUCE, dup, t, MPI_SUM, "MPI_SUM", BIG, 0, 1);
    checkReduction(ALLREDUCE, split, t, MPI_SUM, "MPI_SUM", BIG, 1, 1);
    if (gCounts) {
      gCounts(NULL, NULL, &live);
      CHECK(live == base + 2 * made, "round %d: %d loom communicators live, not %d", round,
            live, base + 2 * made);
    }
    PMPI_Comm_free(&dup);
    PMPI_Comm_free(&split);
    if (gCounts) {
      live = liveAfterDestruction(base);
      CHECK(live == base, "round %d: %d loom communicators live after MPI_Comm_free, not %d",
            round, live, base);
    }
  }
}

/* MPI_Comm_free does not wait for the other ranks: rank 0 frees a communicator before a
 * collective on another one that the other ranks enter first, and they free it after. */
static void checkFreeOrder(void) {
  int rank = 0, ntypes = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const Type* t = &reductionTypes(&ntypes)[2]; /* MPI_INT */
  MPI_Comm dup;
  PMPI_Comm_dup(MPI_COMM_WORLD, &dup);
  checkReduction(ALLREDUCE, dup, t, MPI_SUM, "MPI_SUM", BIG, 0, 1);
  if (rank == 0) PMPI_Comm_free(&dup);
  const double start = MPI_Wtime();
  checkReduction(ALLREDUCE, MPI_COMM_WORLD, t, MPI_SUM, "MPI_SUM", BIG, 0, 1);
  const double took = MPI_Wtime() - start;
  CHECK(took < 5, "an allreduce took %.1f s while rank 0 freed another communicator", took);
  if (rank != 0) PMPI_Comm_free(&dup);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const char* mode = argc > 1 ? argv[1] : "";
  gExpectLoom = strcmp(mode, "loom") == 0;
  gEitherWay = strcmp(mode, "model") == 0;
  const char* min = getenv("LOOM_MPI_MIN_BYTES");
  gMinBytes = min ? (size_t)strtoull(min, NULL, 0) : 0;
  gCounts = (CountsFn)dlsym(RTLD_DEFAULT, "loomMpiCounts");
  CHECK((gCounts != NULL) == (strcmp(mode, "none") != 0), "loomMpiCounts %s in mode '%s'",
        gCounts ? "found" : "missing", mode);
  CHECK(strcmp(mode, "none") == 0 || strcmp(mode, "off") == 0 || gExpectLoom || gEitherWay,
        "unknown mode '%s' (loom, model, off or none)", mode);
  CHECK(!gExpectLoom || min != NULL, "mode loom needs LOOM_MPI_MIN_BYTES set");
  CHECK(!gEitherWay || min == NULL, "mode model needs LOOM_MPI_MIN_BYTES unset");
  if (gCounts) gCounts(&gLastLoom, &gLastOther, NULL);
  gSend = malloc(kBufferBytes);
  gRecv = malloc(kBufferBytes);
  gRef = malloc(kBufferBytes);

  int rank = 0, size = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm dup, split;
  PMPI_Comm_dup(MPI_COMM_WORLD, &dup);
  PMPI_Comm_set_name(dup, "a duplicate of MPI_COMM_WORLD");
  /* Reversed: rank r of the split is not rank r of the world. */
  PMPI_Comm_split(MPI_COMM_WORLD, rank % 2, size - rank, &split);
  PMPI_Comm_set_name(split, "a split of MPI_COMM_WORLD");
  const MPI_Comm comms[] = {MPI_COMM_WORLD, dup, split};
  for (int c = 0; c < 3; ++c) {
    checkReductions(comms[c]);
    checkMoving(comms[c]);
  }
  checkFallThrough(split);
  checkBarrier(dup);
  checkBadInput(dup);
  PMPI_Comm_free(&dup);
  PMPI_Comm_free(&split);
  checkLifetimes();
  checkFreeOrder();
  const int rc = finishTest("loom_mpi_collectives_test");
  MPI_Finalize();
  /* MPI_Finalize released the world's and self's loom communicators: none is left. */
  int live = 0;
  if (gCounts) gCounts(NULL, NULL, &live);
  if (live != 0) fprintf(stderr, "rank %d: %d loom communicators left after MPI_Finalize\n",
                         rank, live);
  return rc || live != 0;
}
