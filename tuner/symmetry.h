// The simulator's fast path (docs/SIMULATOR.md "The fast path"): a call whose plans and topology
// look the same from every host is simulated for one block of hosts' ranks only.
//
// Ranks are numbered host by host, rank = e·P + i with P ranks a block of hosts and e the block
// (a block: the fewest hosts that move as a whole, a fat-tree's leaf; findFolding). A group
// of M = nranks / P elements acts on the blocks, either by shifting them (e → e + g mod M: ring,
// hierarchical, torus, pairwise and Bruck plans) or by xor (e → e ^ g, M a power of two:
// recursive doubling). Where every rank's plan is the plan of its block-0 counterpart with every
// peer moved by the same element, and every host has the same nodes and links, the timelines of
// all the ranks of an orbit are the same: one representative per orbit (block 0's ranks) is
// simulated, a message to another block's rank becomes a message to its representative over
// the routes the real ones take, and each link on them stands for the links of its class
// (RankSymmetry::linkClass).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collectives/plan.h"
#include "topology/topology.h"

namespace loom::tuner {

struct RankSymmetry {
  enum class Kind : uint8_t { Shift, Xor };
  Kind kind = Kind::Shift;
  int period = 1;    // P: ranks per block; ranks 0..P-1 represent their orbits
  int elements = 1;  // M: blocks, the group's order
  // Per topology link: the link that stands for its class in the simulation, and the links of
  // the class one crossing of it is worth there (1 for a host's own link; for a link between
  // switches, shared by all hosts' traffic, M over the class's size: the class's links carry
  // M copies of every route through it evenly, as ECMP spreads them).
  std::vector<int32_t> linkClass;
  std::vector<double> linkScale;
  std::vector<uint8_t> switchLink;  // per link: between two switches (no host's own)

  int element(int rank) const { return rank / period; }
  int representative(int rank) const { return rank % period; }
  // The rank that `rank` becomes under group element g.
  int act(int g, int rank) const {
    const int e = element(rank);
    return (kind == Kind::Shift ? (e + g) % elements : (e ^ g)) * period + representative(rank);
  }
  int inverse(int g) const { return kind == Kind::Shift ? (elements - g) % elements : g; }
};

// How the fast path folds a call: its symmetry, and the plans it simulates.
struct Folding {
  RankSymmetry symmetry;
  // Whether every host's plans are host 0's up to a rotation of each lane's range of each
  // buffer (chunk indices move with the rank in ring-like plans). Then the timelines of an orbit are the same and one
  // view, host 0's, is simulated. Otherwise the hosts' plans differ in where their steps'
  // regions lie (recursive halving keeps the lower half on one rank and the upper on its
  // partner), which changes how their slices pipeline: a few hosts' views are simulated, each as
  // if every host were like it, and the call takes the longest.
  bool exact = true;
  // Per view: host h's ranks' plans, every peer moved back by h, as host 0's ranks would run
  // them. The first view is host 0's.
  std::vector<std::vector<collectives::RankPlan>> views;
};

// Whether plans (planOf(r): rank r's plan, built on demand, for a few ranks only) and topo are
// symmetric under a group of the hosts, and if so how to fold them. Returns "" and fills *out,
// or why the fast path does not apply. The plans are checked on every representative against
// its images under a few group elements (a shift's first, middle and last, an xor's lowest,
// middle and highest generator), not on every rank: a builder whose plans differed only
// elsewhere would be folded wrongly, which the tests against the full simulator would show.
std::string findFolding(int nranks, const std::function<collectives::RankPlan(int)>& planOf,
                        const topology::Topology& topo, Folding* out);

}  // namespace loom::tuner
