// The communicator's topology at init (docs/TOPOLOGY.md, "Discovery at init"): a model from a
// file (LOOM_TOPO_FILE), or one built from the per-host probe and cache and a short
// measurement of each link kind by one pair of ranks (topology/link_measure.h). Every rank
// builds it from the same allgathered records, so every rank holds the same model. The
// communicator provides the exchange and the transports; the pure parts are discover.h's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/rank_exchange.h"
#include "base/status.h"
#include "topology/discover.h"
#include "topology/topology.h"
#include "transports/transport.h"

namespace loom::topology {

// The communicator as init has set it up when discovery runs (the same on every rank but for
// `comm->rank`).
struct DiscoverySetup {
  const transports::CommContext* comm = nullptr;  // rank, nranks and every rank's PeerInfo
  std::vector<int32_t> hostOf;  // host index of every rank (hosts numbered by first appearance)
  int hostCount = 1;
  int machineRanks = 0;  // ranks on this rank's machine (several hosts' when they share it)
  std::string hostTransport = "shm";  // what ranks of one host connect over: shm, tcp or ucx
  // What ranks of two hosts may connect over ("tcp", "ucx"): discovery measures the network
  // link over each and chooses (NetworkChoice).
  std::vector<std::string> networkTransports = {"tcp"};
  // The choice where the figures of some candidate are unknown (LOOM_TOPO_MEASURE=0 and not
  // cached, a failed measurement, LOOM_TOPO_FILE), and why.
  std::string defaultNetworkTransport = "tcp";
  std::string defaultNetworkReason;
  // The transport a measurement's connection to rank `peer` of this host uses.
  std::function<transports::Transport*(int peer)> transportTo;
  // The transport of that name (one of networkTransports).
  std::function<transports::Transport*(const std::string& name)> transportNamed;
};

// The transport of the links between hosts, the same on every rank: where every candidate has
// figures, the default unless another moves an 8-byte and a 1 MiB message over the model's
// network link in at least kNetworkMarginPercent less time (networkMessagesTime); else the
// default. The margin is more than a short measurement's noise on a busy host, so that two
// transports over the same wire (UCX's TCP and loom's) do not trade places from run to run.
constexpr int kNetworkMarginPercent = 20;
struct NetworkChoice {
  std::string transport;
  std::string reason;  // for the init log
};
// The time that criterion weighs: latency + 8 B / bandwidth plus latency + 1 MiB / bandwidth.
double networkMessagesTime(const LinkFigures& f);

// What discovery does (docs/TOPOLOGY.md lists the settings).
struct DiscoveryOptions {
  std::string file;         // LOOM_TOPO_FILE: the model to load; "": detect one
  std::string dump;         // LOOM_TOPO_DUMP: where rank 0 saves the model; "": nowhere
  int64_t measureMode = 1;  // LOOM_TOPO_MEASURE: 0 never measure, 1 when not cached, 2 always
  int64_t measureMs = 4;    // LOOM_TOPO_MEASURE_MS: each measurement's budget
  std::string cacheDir;     // the per-host caches' directory (cacheDirectory()); "": none
};

// Fills *out with the communicator's model, identical on every rank. Every rank calls it at
// the same point of init: it runs allgathers over `ranks` and measures over the transports.
Status discoverCommTopology(const DiscoverySetup& setup, const DiscoveryOptions& options,
                            RankExchange& ranks, const Deadline& deadline, Topology* out,
                            NetworkChoice* network);

}  // namespace loom::topology
