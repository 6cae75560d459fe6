// A lower bound on the time the simulator (tuner/simulator.h) predicts for a call's plans, from
// the plans alone: the tuner simulates its candidates in order of it and stops once no candidate
// left can change the decision (Tuner::decide, docs/TUNING.md "Decision cost").
//
// It is the larger of two times no simulation can beat, with the fast path or without it:
//  - bytes: all that a rank's endpoint node sends to (receives from) other nodes crosses the
//    node's outgoing (incoming) links, at most their bandwidths together; and all that a host's
//    ranks send to (receive from) other hosts' crosses the links that leave (enter) its nodes;
//  - latency: along the chain of steps that wait for one another (on a lane, a step's first
//    piece waits for the earlier steps that touch the same elements; a receive's first piece
//    arrives a route latency after its send's first piece could start; a connection delivers in
//    order), each message costs at least the latency of the links that leave its sender's node
//    and enter its receiver's, and one between hosts at least the least latency of any path
//    between two hosts' endpoints (the fast path's routes are averages over pairs of ranks, so
//    no one pair's route bounds them). Transmission, local work, bookkeeping and barriers count
//    nothing.
#pragma once

#include <vector>

#include "collectives/plan.h"
#include "topology/topology.h"
#include "tuner/simulator.h"

namespace loom::tuner {

// The figures of a topology the bound reads, built once per topology: per node the sum of the
// bandwidths and the least latency of its outgoing and incoming links, and the nodes it links
// to directly; per host the bandwidth of the links that leave and enter its nodes; the least
// latency of a path between endpoints of two hosts.
struct NodeLinks {
  std::vector<double> outBandwidth, inBandwidth, outLatency, inLatency;
  std::vector<std::vector<int32_t>> next;  // sorted
  std::vector<double> hostOut, hostIn;     // by host index (topology::Rank::host)
  double crossHostLatency = 0;
  bool shaped = false;  // a link has a burst (topology::Link::burstBytes)
  explicit NodeLinks(const topology::Topology& topo);
};

// Lanes of more steps than this get no latency bound (its search is quadratic in a lane's
// steps); the byte bound still holds.
constexpr size_t kBoundLaneSteps = 512;

// The bound is the larger of two, each in seconds for plans[r] (rank r's plan) of
// elemSize-byte elements, and 0 where plans do not match (the simulation reports why). The byte
// bound costs a pass over the plans' steps, so the tuner orders its candidates by it first.
double planByteBound(const std::vector<collectives::RankPlan>& plans,
                     const topology::Topology& topo, const NodeLinks& links, uint32_t elemSize);

// The latency bound, its steps cut into `slices` pieces as the simulator cuts them; its search
// costs more, so the tuner draws it for a candidate only when that one comes next.
double planLatencyBound(const std::vector<collectives::RankPlan>& plans,
                        const topology::Topology& topo, const NodeLinks& links, int slices);

}  // namespace loom::tuner
