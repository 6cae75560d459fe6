// Comm::discoverTopology: the communicator's side of topology::discoverCommTopology, which
// takes its settings (LOOM_TOPO_*), the bootstrap as the ranks' exchange and the transports the
// measurement connects over.
#include "base/params.h"
#include "comm/comm.h"
#include "topology/comm_discovery.h"
#include "topology/discover.h"

namespace loom {

Status Comm::discoverTopology(const Deadline& deadline) {
  topology::DiscoverySetup setup;
  setup.comm = &ctx_;
  setup.hostOf = hostOf_;
  setup.hostCount = hostCount_;
  setup.machineRanks = machineRanks_;
  setup.hostTransport = transportMode_ == "tcp" ? "tcp" : "shm";
  setup.transportTo = [this](int peer) { return transportFor(peer); };
  topology::DiscoveryOptions options;
  options.file = params::getString("LOOM_TOPO_FILE");
  options.dump = params::getString("LOOM_TOPO_DUMP");
  if (options.file.empty()) {  // what detection alone reads
    options.measureMode = params::getInt("LOOM_TOPO_MEASURE");
    options.measureMs = params::getInt("LOOM_TOPO_MEASURE_MS");
    options.cacheDir = cacheDir_;
  }
  return topology::discoverCommTopology(setup, options, boot_, deadline, &topo_);
}

}  // namespace loom
