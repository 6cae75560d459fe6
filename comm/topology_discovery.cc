// Comm::discoverTopology: the communicator's side of topology::discoverCommTopology, which
// takes its settings (CommOptions::discovery), the bootstrap as the ranks' exchange and the
// transports the measurement connects over.
#include "base/log.h"
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
  setup.networkTransports = connections_.networkCandidates();
  setup.defaultNetworkTransport =
      connections_.defaultNetworkTransport(&setup.defaultNetworkReason);
  setup.transportTo = [this](int peer) { return transportFor(peer); };
  setup.transportNamed = [this](const std::string& name) {
    return connections_.transportNamed(name);
  };
  topology::NetworkChoice network;
  LOOM_TRY(topology::discoverCommTopology(setup, options, boot_, deadline, &topo_, &network));
  if (hostCount_ > 1) {
    connections_.useNetworkTransport(network.transport);
    LOOM_INFO("INIT", "links between hosts over %s: %s", network.transport.c_str(),
              network.reason.c_str());
  }
  return Status::ok();
}

}  // namespace loom
