// libloom-mpi-preload.so: MPI's collectives on loom, under an unchanged MPI program (PMPI).
//
// Every MPI_* entry point asks the same questions in the same order: is interposition on, is
// the communicator an intracommunicator, can loom express the datatype and op, is the message
// at least LOOM_MPI_MIN_BYTES; then it finds (or collectively makes) the communicator's loom
// communicator. Any "no" sends the call to PMPI_* unchanged. The answers depend only on
// arguments that MPI requires to agree on every rank (the datatype's signature, the op, the
// count of a rooted or symmetric call), so every rank of a collective takes the same path.
#pragma once

#include <mpi.h>

#include <cstddef>

#include "loom/loom.h"

// An interposed C entry point: exported from the preload, whose other symbols are hidden (Open
// MPI's mpi.h marks its functions visible itself, MPICH's does not).
#define LOOM_MPI_ENTRY extern "C" __attribute__((visibility("default")))

namespace loom::mpi {

enum class Call { Allreduce, Reduce, Bcast, Allgather, ReduceScatterBlock, Alltoall, Alltoallv,
                  Barrier, Iallreduce, Ibcast, Count };

/** Where a call went, and why. */
enum class Route {
  Loom,        // ran on loom
  Disabled,    // LOOM_MPI_INTERPOSE=0
  BadComm,     // MPI_COMM_NULL or an intercommunicator
  Datatype,    // not a predefined type loom reduces, or not dense (derived, with holes)
  Op,          // an op loom lacks (user-defined, MAXLOC, logical, bitwise)
  Small,       // below LOOM_MPI_MIN_BYTES
  Model,       // loom's model prices MPI's own algorithm for it no slower than loom's plan
  Trial,       // one of the size's timed calls on MPI, against loom's (measuredRoute)
  Measured,    // the size's timed calls (a non-blocking call's: its blocking counterpart's)
               // were no faster on loom than on MPI
  InPlace,     // an MPI_IN_PLACE form loom has no counterpart for
  Mismatch,    // send and receive sides of different sizes (MPI reports what is wrong)
  BadArgument, // a negative count or a root out of range (MPI reports it)
  NoLoom,      // the loom communicator could not be made
  NotMade,     // a non-blocking call on a communicator with no loom communicator yet
  Threads,     // a non-blocking call where some rank lacks MPI_THREAD_MULTIPLE
  Count
};

/** LOOM_MPI_INTERPOSE (default 1), read once. */
bool interposing();
/** The threshold of call: LOOM_MPI_MIN_BYTES_<CALL>, else LOOM_MPI_MIN_BYTES, read once;
 *  SIZE_MAX where neither is set, and loom's model decides (modelPrefersLoom). */
size_t minBytes(Call call);

/** The call a model decision prices: `call` issued on a loom communicator, which routing
 *  queues in a simulated group (loomGroupSimulateEnd), never runs. */
struct Issue {
  loomResult_t (*fn)(const void* context, loomComm_t comm);
  const void* context;
};
/** Open MPI's own algorithm (its tuned component's fixed decision, 4.1) for call of `bytes`
 *  (as admit counts them) on `ranks` ranks, by the name of loom's plan that runs it. */
const char* mpiAlgorithm(Call call, size_t bytes, int ranks);
/** Whether call, of `bytes`, runs on loom by loom's model: loom's model prices loom's plan for
 *  it (issue on comm), plus LOOM_MPI_MODEL_CALL_NS, at least LOOM_MPI_MODEL_MARGIN percent
 *  faster than MPI's own algorithm (mpiAlgorithm) on the same model. A pure function of the
 *  communicator's model, which every rank holds alike, and of the size, so every rank decides
 *  alike; kept per communicator, call and size until forgetDecisions. Where the model cannot
 *  price one of them, loom runs the call from the old default threshold (4 KiB) up. */
bool modelPrefersLoom(loomComm_t comm, Call call, size_t bytes, const Issue& issue);

/** Where a blocking call that the model sends to loom runs: the first calls of each
 *  communicator, call and size take turns on loom and on MPI (LOOM_MPI_TRIALS timed calls on
 *  each, after one untimed call on each), and the last of them agrees with the other ranks on
 *  the verdict from the times (recordTrial); every later call takes the verdict. The turn is a
 *  function of how many calls of that size the communicator has had, which every rank counts
 *  alike, so every rank takes the same route on every call. */
struct Measured {
  bool onLoom;
  bool trial;  // one of the size's calls before its verdict
  bool timed;  // a trial call to time and hand to recordTrial (not the untimed first ones)
};
Measured measuredRoute(loomComm_t comm, Call call, size_t bytes);
/** A non-blocking call's verdict from its blocking counterpart's trials of the same size on
 *  comm (MPI_Iallreduce's from MPI_Allreduce's, MPI_Ibcast's from MPI_Bcast's): 1 loom, 0 MPI,
 *  -1 none yet, where the model's decision stands. A non-blocking call is never timed itself: its
 *  time includes whatever the program overlaps with it, and the verdict's agreement waits for
 *  the other ranks. Every rank issues a communicator's collectives in one order and reaches a
 *  verdict within the same blocking call, so every rank finds the same one here. */
int blockingVerdict(loomComm_t comm, Call call, size_t bytes);
/** Records a trial call's time (ran on loom or on MPI); on the last trial call, collective over
 *  mpiComm (every rank makes it on the same call): sums the ranks' median times of each side
 *  with PMPI_Allreduce and keeps the verdict, loom where MPI's sum is at least
 *  LOOM_MPI_TRIAL_MARGIN percent above loom's. */
void recordTrial(loomComm_t comm, MPI_Comm mpiComm, Call call, size_t bytes, bool onLoom,
                 long long nanoseconds);
/** Drops comm's decisions (before comm is destroyed). */
void forgetDecisions(loomComm_t comm);
/** Counts the call and logs (LOOM_DEBUG=INFO) its first of each (call, route). */
void note(Call call, Route route);
/** A loom call's result as MPI's error code; on failure loom's message goes to stderr. */
int mpiError(Call call, loomComm_t loomComm, loomResult_t result);
/** A loom call's result as MPI's: on failure loom's message goes to stderr and the
 *  communicator's error handler is called, as MPI would for its own failure. */
int finish(Call call, MPI_Comm comm, loomComm_t loomComm, loomResult_t result);

/** What a reduction becomes on loom: elements of `type` (count * perElement of them). */
struct Reduction {
  loomDataType_t type;
  loomRedOp_t op;
  size_t perElement;  // 2 for a complex type (its parts summed one by one)
  size_t elementBytes;
};
/** Route::Loom with *out filled, or why not (Datatype, Op). */
Route reduction(MPI_Datatype type, MPI_Op op, Reduction* out);
/** Whether count elements of type are count * size contiguous bytes (no holes, lower bound
 *  0), which the data-moving calls send as bytes; *bytes is one element's size. */
bool dense(MPI_Datatype type, size_t* bytes);

/** comm's loom communicator, made on the first call that asks (every rank of comm must be in
 *  the same collective), cached in an attribute of comm and destroyed with it. NULL with
 *  *route set when there is none: BadComm or NoLoom. */
loomComm_t loomCommOf(MPI_Comm comm, Route* route);
/** For the non-blocking calls, which must not make one (that is collective, and they return
 *  before the other ranks enter them): comm's loom communicator if a blocking call made it
 *  and every rank runs MPI_THREAD_MULTIPLE, else NULL with *route set (NotMade, Threads, or
 *  why it could not be made). */
loomComm_t madeLoomCommOf(MPI_Comm comm, Route* route);
/** Destroys the loom communicators of MPI_COMM_SELF and MPI_COMM_WORLD, before MPI ends. */
void releaseAtFinalize();
/** Loom communicators alive now. */
int liveComms();

/** A non-blocking call's arguments, as loom takes them (Iallreduce: in, out, count, type,
 *  op; Ibcast: out, count bytes, root). */
struct Pending {
  const void* in;
  void* out;
  size_t count;
  loomDataType_t type;
  loomRedOp_t op;
  int root;
};
/** Runs call (Iallreduce or Ibcast) with args on comm, in the calling thread. */
loomResult_t runPending(loomComm_t comm, Call call, const Pending& args);
/** Runs call (Iallreduce or Ibcast) on comm's own thread, after the non-blocking calls queued
 *  before it, and then completes request, a generalized request of MPI's, with its result.
 *  MPI_SUCCESS, or MPI's error code where no request could be made. */
int enqueue(loomComm_t comm, Call call, const Pending& args, MPI_Request* request);
/** Waits until comm's queued non-blocking calls have run: a blocking call on comm runs after
 *  them, as every rank's calls on a communicator must run in one order. Cheap when none is
 *  queued anywhere. */
void awaitQueue(loomComm_t comm);
/** Runs comm's queued calls and ends its thread (before the loom communicator is destroyed). */
void endQueue(loomComm_t comm);

}  // namespace loom::mpi
