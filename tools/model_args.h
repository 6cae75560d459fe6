// Command-line pieces that loom-sim and loom-tune share: the model to work on (--topo FILE or
// --uniform HxR), the size sweep (--sizes MIN:MAX:F) and the collective (nccl-tests' names).
#pragma once

#include <cstddef>
#include <string>

#include "topology/topology.h"
#include "tuner/uniform_topology.h"

namespace loom::tools {

// "MIN:MAX:F": sizes in bytes from MIN to MAX, times F (K, M, G suffixes).
bool parseSizeSweep(const std::string& text, size_t* minBytes, size_t* maxBytes, int* factor);

// The model a tool works on, as its command line names it: --topo FILE, or --uniform HxR with
// the uniform cluster's figures.
struct ModelChoice {
  std::string topoFile;
  tuner::UniformCluster uniform;
  bool useUniform = false;
};

// --uniform "HxR": H hosts of R ranks each; false with the message for the tool to print.
bool chooseUniform(const std::string& text, ModelChoice* out, std::string* error);

// Why the command line does not name one model (neither or both of --topo and --uniform), or "".
std::string modelChoiceError(const ModelChoice& choice);

// --net-burst: the uniform cluster's host links' burst in bytes ("18000", "18K"); false with
// the message for the tool to print.
bool parseNetBurst(const std::string& text, tuner::UniformCluster* out, std::string* error);

// The model named on the command line: the JSON file (or, when there is no such file, the
// corpus model of that name, topology/builders.h), else the uniform cluster; then only its
// first `ranks` ranks when ranks > 0. On failure *error says why.
bool loadModel(const ModelChoice& choice, int ranks, topology::Topology* out, std::string* error);

// Host index of every rank of topo, numbered by first appearance (CollArgs::hostOf).
std::vector<int32_t> hostsByFirstAppearance(const topology::Topology& topo);

}  // namespace loom::tools
