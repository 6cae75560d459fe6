/* loom's model of NCCL's own algorithms on a cluster: the cost, in µs, of each of NCCL's
 * algorithms (Tree, Ring, CollNet direct/chain, NVLS, NVLS tree, PAT) × protocols (LL, LL128,
 * Simple) for a collective of a given size, priced over loom's topology model of the cluster.
 * It is what the NCCL tuner plugin libnccl-tuner-loom.so answers NCCL with
 * (docs/NCCL_PLUGINS.md, "Tuner plugin"); the indices are NCCL's (NCCL_ALGO_TREE = 0,
 * NCCL_ALGO_RING = 1, ...; NCCL_PROTO_LL = 0, ...; ncclFuncBroadcast = 0 ... ncclFuncAllReduce
 * = 4). Part of libloom. */
#ifndef LOOM_LOOM_NCCL_MODEL_H_
#define LOOM_LOOM_NCCL_MODEL_H_

#include <stddef.h>

#include "loom/loom.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_NCCL_NUM_ALGORITHMS 7
#define LOOM_NCCL_NUM_PROTOCOLS 3
#define LOOM_NCCL_NUM_FUNCTIONS 5 /**< Broadcast, Reduce, AllGather, ReduceScatter, AllReduce */

typedef struct loomNcclModel* loomNcclModel_t;

/** The model of a communicator of nRanks ranks on nNodes hosts: the topology LOOM_TOPO_FILE
 *  names where it is set, else the corpus model LOOM_TOPO_MODEL names (default dgx-rail-16)
 *  with nNodes hosts of nRanks / nNodes ranks. Every size's costs are tabled here, so that
 *  loomNcclModelCosts is a lookup. loomInvalidArgument for nRanks or nNodes 0, more nodes than
 *  ranks, or a topology that cannot describe them (loomGetLastError(NULL) says why). */
loomResult_t loomNcclModelCreate(size_t nRanks, size_t nNodes, loomNcclModel_t* model);

/** costs[a][p]: the µs algorithm a with protocol p takes for `function` on nBytes (NCCL's
 *  nBytes: for AllGather and ReduceScatter the whole buffer of all ranks), or -1 where the
 *  cluster has no such algorithm (CollNet always: no loom topology has in-network reduction).
 *  *nChannels: the channels the model prices Ring, Tree and PAT with at that size.
 *  loomInvalidArgument for a NULL model, costs or nChannels, or a function outside 0..4. */
loomResult_t loomNcclModelCosts(loomNcclModel_t model, int function, size_t nBytes,
                                float costs[LOOM_NCCL_NUM_ALGORITHMS][LOOM_NCCL_NUM_PROTOCOLS],
                                int* nChannels);

/** One line saying what the model is of: its topology and the figures read off it. */
const char* loomNcclModelDescription(loomNcclModel_t model);

loomResult_t loomNcclModelDestroy(loomNcclModel_t model);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_LOOM_NCCL_MODEL_H_ */
