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

// What carries the links between hosts under LOOM_TRANSPORT=auto, as this host sees it (for
// loom-info): the rule of Connections::networkCandidates and defaultNetworkTransport.
std::string autoNetworkRule();

class Connections {
 public:
  // Creates the transports LOOM_TRANSPORT's mode (auto, shm, tcp, ucx) allows, with their
  // options; tcp's listen address goes into *me and, under ucx, UCX's worker address into
  // *ucxAddress, which the peers then learn. ctx outlives this.
  Status open(const transports::CommContext* ctx, const std::string& mode,
              const transports::ShmOptions& shm, const transports::tcp::TcpOptions& tcp,
              const transports::ucx::UcxOptions& ucx, transports::PeerInfo* me,
              std::string* ucxAddress);
  // Under auto, on a communicator of several hosts, where loom was built with UCX: creates UCX
  // as the other candidate beside tcp for the links between hosts and returns this rank's part
  // of the exchange that follows (whether this host has an RDMA device, and UCX's worker
  // address; "" where UCX could not start, a WARN). The rest of the time: "".
  std::string openNetworkCandidate(const transports::ucx::UcxOptions& ucx, int hostCount);
  // Reads every rank's part (openNetworkCandidate) of that exchange: the UCX addresses into
  // *ucxAddresses.
  Status learnNetworkCandidates(const std::vector<std::string>& records,
                                std::vector<std::string>* ucxAddresses);
  // The transports the links between hosts may use: the mode's, or under auto "tcp" and, where
  // every rank has UCX, "ucx".
  std::vector<std::string> networkCandidates() const;
  // What carries the links between hosts where the figures cannot decide (none measured or
  // cached): UCX where every rank has it and an RDMA device (topology::rdmaDevices), else tcp;
  // *why says which.
  std::string defaultNetworkTransport(std::string* why) const;
  // The transport of that name ("tcp" or "ucx"), or null where this communicator has none.
  transports::Transport* transportNamed(const std::string& name) const;
  // Makes `name`, one of networkCandidates(), carry the links between hosts. Under auto, UCX
  // is closed where it was a candidate and not chosen.
  void useNetworkTransport(const std::string& name);
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
  // the one useNetworkTransport chose (tcp until then).
  transports::Transport* transportFor(int peer) const;
  // The name of what ranks of one host connect over (for the topology probe's figures): "shm",
  // "tcp" or "ucx".
  std::string hostTransportName() const;

 private:
  const transports::CommContext* ctx_ = nullptr;
  std::string mode_;
  // Declared before the connections, which go first.
  std::unique_ptr<transports::Transport> shm_, tcp_, ucx_;
  transports::Transport* network_ = nullptr;  // across hosts under auto; null: tcp
  bool ucxEverywhere_ = false;   // every rank has UCX (learnNetworkCandidates)
  bool rdmaEverywhere_ = false;  // and an RDMA device
  // By (lane, peer).
  std::vector<std::vector<std::unique_ptr<transports::Connection>>> conns_;
  std::vector<std::vector<transports::Transport*>> connTransport_;
  // Every connection made, with its peer.
  std::vector<std::pair<int, const transports::Connection*>> made_;
  bool unreadOnMade(int* peer, transports::MessageMismatch* out) const;
};

}  // namespace loom
