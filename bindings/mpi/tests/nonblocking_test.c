/* MPI_Iallreduce and MPI_Ibcast through libloom-mpi-preload.so against PMPI's blocking
 * results, bit for bit: several in flight at once on one communicator, with a blocking call
 * made between them and their wait (which must not overtake them), on MPI_COMM_WORLD and a
 * duplicate; and where each went, through the preload's loomMpiCounts.
 *
 *   mpirun -np 4 [-x LD_PRELOAD=libloom-mpi-preload.so] loom_mpi_nonblocking_test MODE
 *
 * MODE: "loom" (MPI_THREAD_MULTIPLE: the calls run on loom once a blocking call has made the
 * communicator's loom communicator, and fall through before), "single" (MPI_Init: they fall
 * through, as the preload's thread cannot complete a request without MPI_THREAD_MULTIPLE) or
 * "none" (not preloaded). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

#define COUNT 5003 /* elements: over LOOM_MPI_MIN_BYTES in every type used */

typedef void (*CountsFn)(long*, long*, int*);
static CountsFn gCounts;
static long gLastLoom, gLastOther;

/* Since the last look: `loom` calls ran on loom and `other` fell through. */
static void expectCounts(long loom, long other, const char* what) {
  long nowLoom = 0, nowOther = 0;
  if (gCounts == NULL) return;
  gCounts(&nowLoom, &nowOther, NULL);
  CHECK(nowLoom - gLastLoom == loom && nowOther - gLastOther == other,
        "%s: expected %ld on loom and %ld through (got %ld and %ld)", what, loom, other,
        nowLoom - gLastLoom, nowOther - gLastOther);
  gLastLoom = nowLoom;
  gLastOther = nowOther;
}

static int32_t in32[COUNT], out32[COUNT], ref32[COUNT], place32[COUNT];
static double inF64[COUNT], outF64[COUNT], refF64[COUNT];
static int64_t bcast[COUNT], refBcast[COUNT];

static void fillInputs(int rank, int round) {
  for (int i = 0; i < COUNT; ++i) {
    in32[i] = (rank * 7 + i * 3 + round) % 11 - 5;
    place32[i] = in32[i];
    inF64[i] = (double)((rank * 13 + i * 7 + round) % 50 - 25);
    bcast[i] = -1;
  }
  memset(out32, 0x5a, sizeof(out32));
  memset(outF64, 0x5a, sizeof(outF64));
}

/* Three non-blocking calls in flight, a blocking one after them, then the wait: every result
 * equal to PMPI's blocking one. viaLoom: the non-blocking calls are expected on loom. */
static void checkRound(MPI_Comm comm, const char* name, int round, int viaLoom) {
  int rank = 0, n = 0;
  PMPI_Comm_rank(comm, &rank);
  PMPI_Comm_size(comm, &n);
  const int root = n - 1;
  fillInputs(rank, round);
  for (int i = 0; i < COUNT && rank == root; ++i) bcast[i] = (int64_t)i * 1000003 + round;
  PMPI_Allreduce(in32, ref32, COUNT, MPI_INT32_T, MPI_SUM, comm);
  PMPI_Allreduce(inF64, refF64, COUNT, MPI_DOUBLE, MPI_MAX, comm);
  memcpy(refBcast, bcast, sizeof(bcast));
  PMPI_Bcast(refBcast, COUNT, MPI_INT64_T, root, comm);

  MPI_Request requests[3];
  CHECK(MPI_Iallreduce(in32, out32, COUNT, MPI_INT32_T, MPI_SUM, comm, &requests[0]) ==
            MPI_SUCCESS, "%s: MPI_Iallreduce", name);
  CHECK(MPI_Ibcast(bcast, COUNT, MPI_INT64_T, root, comm, &requests[1]) == MPI_SUCCESS,
        "%s: MPI_Ibcast", name);
  CHECK(MPI_Iallreduce(MPI_IN_PLACE, place32, COUNT, MPI_INT32_T, MPI_SUM, comm,
                       &requests[2]) == MPI_SUCCESS, "%s: MPI_Iallreduce in place", name);
  expectCounts(viaLoom ? 3 : 0, viaLoom ? 0 : 3, name);
  /* A blocking call on the same communicator before the wait: it runs after them. */
  MPI_Allreduce(inF64, outF64, COUNT, MPI_DOUBLE, MPI_MAX, comm);
  expectCounts(1, 0, name);
  MPI_Status statuses[3];
  CHECK(MPI_Waitall(3, requests, statuses) == MPI_SUCCESS, "%s: MPI_Waitall", name);
  for (int i = 0; i < 3; ++i) {
    CHECK(requests[i] == MPI_REQUEST_NULL, "%s: request %d not freed by the wait", name, i);
  }
  CHECK(memcmp(out32, ref32, sizeof(out32)) == 0, "%s round %d: MPI_Iallreduce differs", name,
        round);
  CHECK(memcmp(place32, ref32, sizeof(place32)) == 0,
        "%s round %d: MPI_Iallreduce in place differs", name, round);
  CHECK(memcmp(bcast, refBcast, sizeof(bcast)) == 0, "%s round %d: MPI_Ibcast differs", name,
        round);
  CHECK(memcmp(outF64, refF64, sizeof(outF64)) == 0, "%s round %d: MPI_Allreduce differs",
        name, round);
}

/* On comm, which no blocking call has used: the non-blocking calls fall through (making a loom
 * communicator is collective and would block them) until the first blocking one, in round 1,
 * has made it; from round 2 they run on loom. */
static void checkComm(MPI_Comm comm, const char* name, int multiple) {
  int rank = 0;
  PMPI_Comm_rank(comm, &rank);
  fillInputs(rank, 0);
  PMPI_Allreduce(in32, ref32, COUNT, MPI_INT32_T, MPI_SUM, comm);
  MPI_Request request;
  MPI_Iallreduce(in32, out32, COUNT, MPI_INT32_T, MPI_SUM, comm, &request);
  expectCounts(0, 1, name);
  int done = 0;
  while (!done) MPI_Test(&request, &done, MPI_STATUS_IGNORE);
  CHECK(memcmp(out32, ref32, sizeof(out32)) == 0, "%s: MPI_Iallreduce (through) differs", name);
  for (int round = 1; round <= 3; ++round) checkRound(comm, name, round, multiple && round > 1);
}

/* A non-blocking call on one communicator in flight while a blocking one runs on another: loom
 * runs both at once (the preload's thread and the caller's), as MPI does. */
static void checkAcross(MPI_Comm nonblocking, MPI_Comm blocking, int viaLoom) {
  int rank = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  fillInputs(rank, 7);
  PMPI_Allreduce(in32, ref32, COUNT, MPI_INT32_T, MPI_SUM, nonblocking);
  PMPI_Allreduce(inF64, refF64, COUNT, MPI_DOUBLE, MPI_MAX, blocking);
  MPI_Request request;
  MPI_Iallreduce(in32, out32, COUNT, MPI_INT32_T, MPI_SUM, nonblocking, &request);
  MPI_Allreduce(inF64, outF64, COUNT, MPI_DOUBLE, MPI_MAX, blocking);
  expectCounts(viaLoom ? 2 : 1, viaLoom ? 0 : 1, "across communicators");
  CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE) == MPI_SUCCESS, "across: MPI_Wait");
  CHECK(memcmp(out32, ref32, sizeof(out32)) == 0, "across: MPI_Iallreduce differs");
  CHECK(memcmp(outF64, refF64, sizeof(outF64)) == 0, "across: MPI_Allreduce differs");
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "loom";
  int provided = MPI_THREAD_SINGLE;
  if (strcmp(mode, "single") == 0) MPI_Init(&argc, &argv);
  else MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const int multiple = strcmp(mode, "loom") == 0;
  CHECK(!multiple || provided == MPI_THREAD_MULTIPLE, "MPI_THREAD_MULTIPLE was not provided");
  gCounts = (CountsFn)dlsym(RTLD_DEFAULT, "loomMpiCounts");
  CHECK((gCounts != NULL) == (strcmp(mode, "none") != 0), "loomMpiCounts %s",
        gCounts != NULL ? "found, not preloaded" : "missing, preloaded");
  if (gCounts != NULL) gCounts(&gLastLoom, &gLastOther, NULL);
  MPI_Comm dup;
  PMPI_Comm_dup(MPI_COMM_WORLD, &dup);
  checkComm(MPI_COMM_WORLD, "MPI_COMM_WORLD", multiple);
  checkComm(dup, "a duplicate", multiple);
  checkAcross(dup, MPI_COMM_WORLD, multiple);
  MPI_Comm_free(&dup);
  const int rc = finishTest("loom_mpi_nonblocking_test");
  MPI_Finalize();
  return rc;
}
