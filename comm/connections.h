// The communicator's transports and its connections to its peers, made at first use.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "topology/topology.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/transport.h"
#include "transports/ucx/ucx_transport.h"

namespace loom {

class Connections {
 public:
  // Creates the transports LOOM_TRANSPORT's mode (auto, shm, tcp, ucx) allows, with their
  // options; tcp's listen address goes into *me and UCX's worker address into *ucxAddress,
  // which the peers then learn. Under auto, UCX is created where this host has an RDMA device
  // (topology::rdmaDevices) and loom was built with it. ctx outlives this.
  Status open(const transports::CommContext* ctx, const std::string& mode,
              const transports::ShmOptions& shm, const transports::tcp::TcpOptions& tcp,
              const transports::ucx::UcxOptions& ucx, transports::PeerInfo* me,
              std::string* ucxAddress);
  // The connection to peer on lane, made the first time (within timeoutMs), and its transport.
  Status get(int peer, int lane, int64_t timeoutMs, transports::Connection** out,
             transports::Transport** transport);
  // Whether a message has arrived on a connection that no posted receive takes
  // (Connection::unreadMessage): *peer its sender, *out what it is. Inline while no connection
  // is made (a communicator whose calls all go through the host's arena).
  bool unreadMessage(int* peer, transports::MessageMismatch* out) const {
    return !made_.empty() && unreadOnMade(peer, out);
  }
  // Whether the TCP connections are paced per peer (LOOM_TCP_PACING=-1).
  bool tcpPacedPerPeer() const { return tcp_ && transports::tcpPacesPerPeer(*tcp_); }
  // Paces the TCP connections to each peer at the slowest network link of topo on the way
  // there (topology::slowestNetworkLink): a flow faster than that only fills the queue in front
  // of the link, and a short queue overflows (docs/CALIBRATION.md, netns).
  void paceTcp(const topology::Topology& topo);
  // The transport a connection to `peer` uses: the mode's; under auto shm within a host, else
  // UCX where both ranks published a UCX address, else tcp.
  transports::Transport* transportFor(int peer) const;
  // The name of what ranks of one host connect over, and ranks of two hosts (for the topology
  // probe's figures): "shm", "tcp" or "ucx".
  std::string hostTransportName() const;
  std::string networkTransportName() const;

 private:
  const transports::CommContext* ctx_ = nullptr;
  std::string mode_;
  // Declared before the connections, which go first.
  std::unique_ptr<transports::Transport> shm_, tcp_, ucx_;
  // By (lane, peer).
  std::vector<std::vector<std::unique_ptr<transports::Connection>>> conns_;
  std::vector<std::vector<transports::Transport*>> connTransport_;
  // Every connection made, with its peer.
  std::vector<std::pair<int, const transports::Connection*>> made_;
  bool unreadOnMade(int* peer, transports::MessageMismatch* out) const;
};

}  // namespace loom
