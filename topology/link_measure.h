// The short measurement of one kind of link by one pair of ranks at init (docs/TOPOLOGY.md,
// "Discovery at init"): pings, bursts and bulk transfers over a connection of the pair's own,
// from which the initiator computes the link's LinkFigures.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "topology/discover.h"
#include "transports/transport.h"

namespace loom::topology {

// One end's part in a pair's measurement.
struct PairMeasurement {
  // The initiator drives the exchange and computes the figures; the other end (the responder)
  // echoes pings and acknowledges bulk transfers until the initiator says stop.
  bool initiator = false;
  // A CPU for the pings, the same at both ends (the which-th of the thread's CPUs, see OneCore
  // in link_measure.cc), or -1 for none: the pings then run with both ends on one core, so every
  // answer waits for the other end to be scheduled, as it does in a collective between two
  // ranks of one core when the host has more ranks than cores, which a pair pinging on two
  // otherwise idle cores would never show.
  int sharedCore = -1;
  // With sharedCore as well, pings with the ends on two cores give the latency, and what one
  // core adds is LinkFigures::sharedCore: LOOM_BIND puts the host's consecutive ranks on
  // different cores, so most of a collective's messages see the two-core figure.
  bool apart = false;
  // Probe for a shaper's burst as well (LinkFigures::burstBytes; the network link).
  bool shaper = false;
  double budgetSeconds = 0;  // for the timed rounds, after at least a few of each
  int64_t timeoutMs = -1;    // the communicator's; the measurement takes at most 3 s in any case
};

// Runs this end's part of the measurement with `peer` over a connection of `transport` of its
// own (on a lane no plan uses), closed before returning; *out: the figures (initiator only).
Status measureLinkPair(transports::Transport* transport, int peer, const PairMeasurement& how,
                       LinkFigures* out);

}  // namespace loom::topology
