/* loom communicators from MPI communicators (libloom_mpi, built when an MPI is found).
 *
 * A program that runs under mpirun and knows loom builds a loom communicator of the same ranks
 * as an MPI communicator, with no address or environment of its own to set: the ranks meet
 * through the MPI communicator itself. Link with -lloom_mpi -lloom and the MPI library. */
#ifndef LOOM_LOOM_MPI_H_
#define LOOM_LOOM_MPI_H_

#include <mpi.h>

#include "loom/loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A loom communicator of mpiComm's ranks, rank r of it being rank r of mpiComm. Collective
 *  over mpiComm (an intracommunicator: MPI_COMM_WORLD, a duplicate, a split...): rank 0 makes
 *  the unique id and broadcasts it over mpiComm, then every rank joins with config (NULL: the
 *  LOOM_* defaults). Every rank returns the same result when loomGetUniqueId fails on rank 0
 *  (or LOOM_ROOT or NCCL_COMM_ID is set there: loomInvalidUsage, since that one address would
 *  be every communicator's rendezvous) or mpiComm is not usable; MPI must be initialised.
 *  *comm = NULL on failure. */
loomResult_t loomCommInitFromMpi(loomComm_t* comm, MPI_Comm mpiComm, const loomConfig_t* config);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_LOOM_MPI_H_ */
