/* loom: collective communication for distributed training and HPC.
 *
 * The public C API. C99-clean: opaque handles, plain enums, a versioned config struct.
 * Shaped like NCCL's API (same call order and argument meaning), named loom*. */
#ifndef LOOM_LOOM_H_
#define LOOM_LOOM_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_MAJOR 0
#define LOOM_MINOR 1
#define LOOM_PATCH 0
/** Encoded as MAJOR*10000 + MINOR*100 + PATCH, like NCCL_VERSION_CODE. */
#define LOOM_VERSION_CODE (LOOM_MAJOR * 10000 + LOOM_MINOR * 100 + LOOM_PATCH)

/** Result of every call. */
typedef enum {
  loomSuccess = 0,
  loomInvalidArgument = 1, /**< a bad value was passed (null buffer, bad dtype, ...) */
  loomInvalidUsage = 2,    /**< a call made in the wrong state (destroyed comm, ...) */
  loomSystemError = 3,     /**< the OS refused (socket, shared memory, ...) */
  loomInternalError = 4,   /**< a bug in loom */
  loomRemoteError = 5,     /**< a peer failed, died or aborted */
  loomTimeout = 6,         /**< a wait passed its deadline (LOOM_TIMEOUT_MS) */
  loomInProgress = 7,      /**< a non-blocking operation has not finished yet */
  loomNumResults = 8
} loomResult_t;

typedef enum {
  loomInt8 = 0,
  loomUint8 = 1,
  loomInt32 = 2,
  loomUint32 = 3,
  loomInt64 = 4,
  loomUint64 = 5,
  loomFloat16 = 6,
  loomBfloat16 = 7,
  loomFloat32 = 8,
  loomFloat64 = 9,
  loomFloat8e4m3 = 10,
  loomFloat8e5m2 = 11,
  loomNumTypes = 12
} loomDataType_t;

typedef enum {
  loomSum = 0,
  loomProd = 1,
  loomMin = 2,
  loomMax = 3,
  loomAvg = 4,
  loomNumOps = 5,
  /** Ops from loomRedOpCreatePreMulSum are numbered from loomNumOps up, per communicator. */
  loomMaxRedOp = 0x7fffffff
} loomRedOp_t;

/** Opaque communicator handle. */
typedef struct loomComm* loomComm_t;

#define LOOM_UNIQUE_ID_BYTES 128
/** Created by one process with loomGetUniqueId and handed to every rank (out of band). */
typedef struct {
  char internal[LOOM_UNIQUE_ID_BYTES];
} loomUniqueId;

#define LOOM_CONFIG_VERSION 2
/** Communicator options. Initialise with LOOM_CONFIG_INITIALIZER; the size and version
 *  fields let the struct grow without breaking callers built against an older header.
 *  Fields left at their initializer value fall back to the LOOM_* parameters. */
typedef struct {
  size_t size;           /**< sizeof(loomConfig_t) as the caller was built */
  unsigned int version;  /**< LOOM_CONFIG_VERSION as the caller was built */
  int timeoutMs;         /**< deadline of every wait; -1: LOOM_TIMEOUT_MS */
  const char* algorithms; /**< e.g. "allreduce=ring"; NULL: LOOM_ALGO */
  const char* transport;  /**< "auto", "shm", "tcp" or "ucx"; NULL: LOOM_TRANSPORT */
  /** 1 (the default): init, split and shrink return once the communicator is ready. 0: they
   *  return loomInProgress at once and finish in the background; loomCommGetAsyncError says
   *  loomInProgress until then, and a call on the communicator waits for it. (Version 2.) */
  int blocking;
} loomConfig_t;

#define LOOM_CONFIG_INITIALIZER \
  { sizeof(loomConfig_t), LOOM_CONFIG_VERSION, -1, NULL, NULL, 1 }

/** Text of a result code (never NULL). */
const char* loomGetErrorString(loomResult_t result);
/** The last error message of a communicator with its context (rank, peer, collective,
 *  sequence number, plan step); of the calling thread when comm is NULL. Never NULL. */
const char* loomGetLastError(loomComm_t comm);
/** LOOM_VERSION_CODE of the library in use. */
loomResult_t loomGetVersion(int* version);
/** Writes message as one INFO line of loom's log (shown with LOOM_DEBUG=INFO, filtered by
 *  LOOM_DEBUG_SUBSYS on subsys, e.g. "INIT"), with the rank and host like loom's own lines:
 *  for libraries built on this API, whose users read loom's log. */
void loomLogInfo(const char* subsys, const char* message);
/** What loom-info prints, as one JSON object in *json (valid until the calling thread's next
 *  loomGetInfo): "version", "version_code", "transports", "reduction_kernels", "algorithms"
 *  (collective -> builder names) and "parameters" (every LOOM_* variable -> its "value",
 *  "default", "source" and "description"). For programs that read these facts as data. */
loomResult_t loomGetInfo(const char** json);

/** Creates an id for a new communicator. The calling process serves the bootstrap
 *  rendezvous for it (a thread that lives until every rank has left). With LOOM_ROOT (or
 *  NCCL_COMM_ID) = host:port set, it serves nothing: the id names that address, every rank
 *  may make it itself, and rank 0 serves the rendezvous there when it initialises. */
loomResult_t loomGetUniqueId(loomUniqueId* uniqueId);
loomResult_t loomCommInitRank(loomComm_t* comm, int nranks, loomUniqueId commId, int rank);
loomResult_t loomCommInitRankConfig(loomComm_t* comm, int nranks, loomUniqueId commId,
                                    int rank, const loomConfig_t* config);
/** Builds a communicator from the environment: LOOM_RANK / LOOM_WORLD_SIZE / LOOM_ROOT
 *  (host:port of rank 0), else torchrun's RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT,
 *  else the rank variables of Open MPI, PMI or Slurm with LOOM_ROOT or MASTER_ADDR. */
loomResult_t loomCommInitFromEnv(loomComm_t* comm, const loomConfig_t* config);
/** Splits comm into sub-communicators of the ranks with equal color, ordered by key
 *  (then by rank). color < 0 (LOOM_SPLIT_NOCOLOR) gives *newcomm = NULL. Collective. */
#define LOOM_SPLIT_NOCOLOR (-1)
loomResult_t loomCommSplit(loomComm_t comm, int color, int key, loomComm_t* newcomm,
                           const loomConfig_t* config);
/** A communicator of comm's ranks but those in excludeRanks (which must not call it: they
 *  may be dead), in the same order. Collective over the others, which must pass the same
 *  list; it goes through comm's bootstrap root, so the process that made comm's unique id
 *  must be alive. flags: LOOM_SHRINK_DEFAULT (comm must be healthy and idle) or
 *  LOOM_SHRINK_ABORT (comm may have failed or be revoked; its in-flight calls end first). */
#define LOOM_SHRINK_DEFAULT 0
#define LOOM_SHRINK_ABORT 1
loomResult_t loomCommShrink(loomComm_t comm, const int* excludeRanks, int excludeCount,
                            loomComm_t* newcomm, const loomConfig_t* config, int flags);
/** Ends every call in flight on comm, here and on every other rank, with loomRemoteError
 *  (there) or loomInvalidUsage (here); later calls fail the same way. Here,
 *  loomCommGetAsyncError says loomInProgress until no call holds comm, then loomSuccess: comm
 *  can then be shrunk (LOOM_SHRINK_ABORT), destroyed or aborted. Not collective; any thread
 *  may call it. */
loomResult_t loomCommRevoke(loomComm_t comm);
/** Frees comm. On the rank whose process made the unique id (and serves its rendezvous), it
 *  returns once every other rank has destroyed or aborted comm, or died, or after
 *  LOOM_TIMEOUT_MS: that process exiting earlier would fail the ranks still at work. */
loomResult_t loomCommDestroy(loomComm_t comm);
/** Stops every operation of comm (a call in flight in another thread returns an error
 *  first), tells the peers, and frees it (waiting as loomCommDestroy does). */
loomResult_t loomCommAbort(loomComm_t comm);
loomResult_t loomCommCount(const loomComm_t comm, int* count);
loomResult_t loomCommUserRank(const loomComm_t comm, int* rank);
/** The first error met asynchronously (e.g. a peer's abort), or loomSuccess. */
loomResult_t loomCommGetAsyncError(loomComm_t comm, loomResult_t* asyncError);
/** The algorithm and parameters comm ran its last collective with, in LOOM_TUNE's spelling
 *  ("direct lanes=1", "ring"); "" before the first. Valid until the next call on comm. */
loomResult_t loomCommGetLastAlgorithm(loomComm_t comm, const char** algorithm);
/** Writes comm's flight recorder (its last LOOM_FLIGHT_RECORDER calls: collective, count,
 *  type, op, algorithm, state, times) as JSON to path, or where path is NULL or "" to
 *  LOOM_FLIGHT_RECORDER_DIR/loom-trace-<communicator>-rank<r>.json. Any thread, also while a
 *  call runs, and after a failure. `loom-trace` merges the files of all ranks. */
loomResult_t loomCommDumpTrace(loomComm_t comm, const char* path);

/** Host memory that the ranks of one host can read in each other's processes with plain
 *  loads (pages of a memfd, mapped shared; zero-filled): buffers from here let the "peer"
 *  algorithms copy straight between processes instead of through the kernel. Any loom call
 *  takes other memory too. Each allocation is at least a page and holds one file descriptor
 *  while it lives (peers open it by number), so allocate few, large buffers.
 *  *ptr = NULL on failure. */
loomResult_t loomMemAlloc(void** ptr, size_t size);
/** Frees what loomMemAlloc returned (NULL is a no-op). */
loomResult_t loomMemFree(void* ptr);

/** A reduction op of comm that multiplies each rank's input by *scalar (one element of
 *  datatype, read now) and sums: calls with it reduce as loomSum over the scaled inputs (fp16,
 *  bf16 and fp8 scale in fp32 and round back). Valid with datatype only, until
 *  loomRedOpDestroy. Local. */
loomResult_t loomRedOpCreatePreMulSum(loomRedOp_t* op, const void* scalar,
                                      loomDataType_t datatype, loomComm_t comm);
loomResult_t loomRedOpDestroy(loomRedOp_t op, loomComm_t comm);

/* Collectives. `stream` orders device work (cudaStream_t); NULL with host buffers is a
 * synchronous call. sendbuff == recvbuff is in place; for allgather in place means
 * sendbuff == recvbuff + rank*sendcount, for reduce-scatter sendbuff + rank*recvcount. */
loomResult_t loomAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                           void* stream);
loomResult_t loomBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           loomDataType_t datatype, int root, loomComm_t comm, void* stream);
loomResult_t loomReduce(const void* sendbuff, void* recvbuff, size_t count,
                        loomDataType_t datatype, loomRedOp_t op, int root, loomComm_t comm,
                        void* stream);
loomResult_t loomAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           loomDataType_t datatype, loomComm_t comm, void* stream);
loomResult_t loomReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                               void* stream);
/** Every rank sends `count` elements to each rank: block j of sendbuff goes to rank j. */
loomResult_t loomAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          loomDataType_t datatype, loomComm_t comm, void* stream);
/** MPI_Alltoallv semantics; counts and displacements are in elements. */
loomResult_t loomAlltoAllv(const void* sendbuff, const size_t sendcounts[],
                           const size_t sdispls[], void* recvbuff, const size_t recvcounts[],
                           const size_t rdispls[], loomDataType_t datatype, loomComm_t comm,
                           void* stream);
/** The root receives every rank's `count` elements, rank r's at recvbuff + r*count. In
 *  place: sendbuff == recvbuff + root*count on the root. recvbuff is read on the root only. */
loomResult_t loomGather(const void* sendbuff, void* recvbuff, size_t count,
                        loomDataType_t datatype, int root, loomComm_t comm, void* stream);
/** Rank r receives the root's sendbuff + r*count (count elements). In place:
 *  recvbuff == sendbuff + root*count on the root. sendbuff is read on the root only. */
loomResult_t loomScatter(const void* sendbuff, void* recvbuff, size_t count,
                         loomDataType_t datatype, int root, loomComm_t comm, void* stream);
loomResult_t loomSend(const void* sendbuff, size_t count, loomDataType_t datatype, int peer,
                      loomComm_t comm, void* stream);
loomResult_t loomRecv(void* recvbuff, size_t count, loomDataType_t datatype, int peer,
                      loomComm_t comm, void* stream);
/** Calls between GroupStart and GroupEnd are queued and run together at GroupEnd, so
 *  send/recv pairs in any order cannot deadlock. Groups nest. A group may hold calls of
 *  several communicators (several ranks of one process included: each communicator's calls
 *  run in a thread of their own), and loomCommInitRank* calls, which run, one thread each,
 *  before the group's other calls: that is how one thread creates several ranks. */
loomResult_t loomGroupStart(void);
loomResult_t loomGroupEnd(void);
/** Ends the group like loomGroupEnd but runs nothing: *estimatedUs is what loom's cost
 *  model predicts the group's calls take, in microseconds, as the tuner would run them. */
loomResult_t loomGroupSimulateEnd(float* estimatedUs);
/** Ends the group like loomGroupSimulateEnd, but prices each collective call as `algorithm`
 *  (a name LOOM_ALGO takes for that collective, e.g. "rd" or "ring" for an allreduce) would
 *  run it, not as the tuner chooses: what another library's algorithm would take on loom's
 *  model. An algorithm the collective lacks, or one that cannot serve the call, is
 *  loomInvalidArgument. NULL or "": loomGroupSimulateEnd. */
loomResult_t loomGroupSimulateEndAs(const char* algorithm, float* estimatedUs);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_LOOM_H_ */
