// The UCX transport: loom's transfers over UCP's tag API, so that on InfiniBand and RoCE
// clusters the bytes move by RDMA (UCX picks verbs, shared memory, CMA or TCP at run time) and,
// where UCX is built with CUDA, GPU memory moves without staging.
//
// One UCP context and worker per communicator (its transport); one endpoint per peer and lane,
// made from the worker address the peer published through the bootstrap (PeerInfo's exchange
// carries it: CommContext::ucxAddresses). Each direction of a connection cuts its ops into
// chunks of the pair's chunk size (the smaller of the two ranks' LOOM_UCX_CHUNK_BYTES, which
// travels with the address), each chunk one tagged message whose tag names the lane, the
// sending rank and the chunk's number in that direction, so both ends derive the same
// boundaries from the op sizes alone, as the TCP transport does. A send chunk is handed to UCX
// once the executor's limit covers it, a receive chunk once the destination may be written; a
// RecvReduce chunk lands in a bounce buffer and is reduced into place when its limit allows.
// UCX sends a chunk above its rendezvous threshold zero-copy (RDMA read or CMA from the
// sender's buffer), below it eagerly.
//
// Progress is the executor's (ucp_worker_progress in each connection's progress(); no thread
// of UCX's own is asked for), and an idle wait arms the worker and polls its event fd
// (ucp_worker_arm, ucp_worker_get_efd; 1 ms at a time while transfers are in flight), so an
// idle rank uses no CPU. Every endpoint uses UCX's peer error handling (without it UCX 1.13
// aborts the process when a transfer with a failed peer fails; LOOM_UCX_PEER_ERRORS=0 gives it
// up within a host for CMA): a peer that dies fails the endpoint, and the connection's next
// progress() returns loomRemoteError naming the rank; loom also watches the process of a peer
// on this machine, which sees its exit at once (docs/ARCHITECTURE.md, "The UCX transport"). A
// peer that merely stops answering runs into the executor's deadline.
//
// Buffers from loomMemAlloc are registered with ucp_mem_map once per segment, on first use,
// and the handle goes with every transfer from or into it; loomMemFree and the communicator's
// destruction unmap them. Other buffers (malloc, the stack) are left to UCX, which registers
// them in its own registration cache where a transport needs it (verbs) and drops an entry
// when its pages are unmapped (UCX's memory hooks).
//
// Built when CMake finds UCX (pkg-config ucx); without it createUcxTransport says so.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "transports/transport.h"

namespace loom::transports::ucx {

// Settings of one UCX transport (a communicator's: LOOM_UCX_CHUNK_BYTES, comm/options.h).
struct UcxOptions {
  // Bytes per tagged message. Large enough that a chunk's rendezvous handshake costs little
  // against its bytes, small enough that a ring's steps pipeline.
  size_t chunkBytes = size_t(4) << 20;
  // UCX's peer error handling on endpoints to ranks of this host too (LOOM_UCX_PEER_ERRORS).
  // Off, UCX may use CMA for them (1.13 offers no CMA under peer error handling: it asks for
  // memory invalidation, which CMA lacks), but aborts this process when a transfer with a peer
  // that died fails.
  bool peerErrors = true;
  // It carries the links between hosts only (LOOM_TRANSPORT=auto's candidate beside tcp):
  // where UCX_TLS is unset, UCX leaves its shared-memory transports out. Between two hosts they
  // reach only where the hosts share a kernel (network namespaces, containers), and there they
  // would stand in for the network the communicator takes the link for.
  bool betweenHostsOnly = false;
};

inline constexpr size_t kChunkAlign = 64;  // keeps chunk boundaries on element boundaries

// Whether this library was built with UCX.
bool ucxBuilt();

// What this process's UCX offers, for loom-info and the log: its version, its transports
// ("tcp/eth0", "posix/memory", "rc_mlx5/mlx5_0:1"...), the memory types its context supports
// ("host", "cuda"...), and whether any transport is an RDMA one (verbs). `error` says why the
// rest is empty (no UCX in this build, or UCX failed to initialise).
struct UcxDescription {
  std::string version;
  std::vector<std::string> transports;
  std::vector<std::string> memoryTypes;
  bool rdma = false;
  bool cudaMemory = false;
  std::string error;
};
UcxDescription describeUcx();

Status createUcxTransport(const CommContext* ctx, const UcxOptions& options,
                          std::unique_ptr<Transport>* out);

// What this rank publishes for its peers (its worker's address and chunk size), to be carried
// by the bootstrap into every rank's CommContext::ucxAddresses.
std::string ucxAddress(const Transport& ucx);

}  // namespace loom::transports::ucx
