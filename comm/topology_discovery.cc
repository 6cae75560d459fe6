// Comm::discoverTopology: the communicator's side of topology::discoverCommTopology, which
// takes its settings (CommOptions::discovery), the bootstrap as the ranks' exchange and the
// transports the measurement connects over.
#include "comm/comm.h"
#include "topology/comm_discovery.h"
#include "topology/discover.h"

namespace loom {

Status Comm::discoverTopology(const topology::DiscoveryOptions& options,
                              const Deadline& deadline) {
  topology::DiscoverySetup setup;
  setup.comm = &ctx_;
  setup.hostOf = hostOf_;
  setup.hostCount = hostCount_;
  setup.machineRanks = machineRanks_;
  setup.hostTransport = connections_.hostTransportName();
  setup.networkTransport = connections_.networkTransportName();
  setup.transportTo = [this](int peer) { return transportFor(peer); };
  return topology::discoverCommTopology(setup, options, boot_, deadline, &topo_);
}

}  // namespace loom
