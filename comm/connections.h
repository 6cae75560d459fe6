// The communicator's transports and its connections to its peers, made at first use.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "topology/topology.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/transport.h"

namespace loom {

class Connections {
 public:
  // Creates the transports LOOM_TRANSPORT's mode (auto, shm, tcp) allows, with their options;
  // tcp's listen address goes into *me, which the peers then learn. ctx outlives this.
  Status open(const transports::CommContext* ctx, const std::string& mode,
              const transports::ShmOptions& shm, const transports::tcp::TcpOptions& tcp,
              transports::PeerInfo* me);
  // The connection to peer on lane, made the first time (within timeoutMs), and its transport.
  Status get(int peer, int lane, int64_t timeoutMs, transports::Connection** out,
             transports::Transport** transport);
  // Whether the TCP connections are paced per peer (LOOM_TCP_PACING=-1).
  bool tcpPacedPerPeer() const { return tcp_ && transports::tcpPacesPerPeer(*tcp_); }
  // Paces the TCP connections to each peer at the slowest network link of topo on the way
  // there (topology::slowestNetworkLink): a flow faster than that only fills the queue in front
  // of the link, and a short queue overflows (docs/CALIBRATION.md, netns).
  void paceTcp(const topology::Topology& topo);
  // The transport a connection to `peer` uses (the mode's, else shm within a host).
  transports::Transport* transportFor(int peer) const;

 private:
  const transports::CommContext* ctx_ = nullptr;
  std::string mode_;
  // Declared before the connections, which go first.
  std::unique_ptr<transports::Transport> shm_, tcp_;
  // By (lane, peer).
  std::vector<std::vector<std::unique_ptr<transports::Connection>>> conns_;
  std::vector<std::vector<transports::Transport*>> connTransport_;
};

}  // namespace loom
