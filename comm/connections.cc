#include "comm/connections.h"

#include <algorithm>

#include "base/log.h"
#include "topology/probe.h"

namespace loom {

Status Connections::open(const transports::CommContext* ctx, const std::string& mode,
                         const transports::ShmOptions& shm,
                         const transports::tcp::TcpOptions& tcp,
                         const transports::ucx::UcxOptions& ucx, transports::PeerInfo* me,
                         std::string* ucxAddress) {
  ctx_ = ctx;
  mode_ = mode;
  if (mode_ == "auto" || mode_ == "shm") LOOM_TRY(transports::createShmTransport(ctx_, shm, &shm_));
  if (mode_ == "auto" || mode_ == "tcp") {
    LOOM_TRY(transports::tcp::createTcpTransport(ctx_, tcp, &tcp_));
    transports::tcpListenAddress(*tcp_, me);
  }
  bool withUcx = mode_ == "ucx";
  if (mode_ == "auto" && transports::ucx::ucxBuilt()) {
    const std::vector<std::string> rdma = topology::rdmaDevices();
    withUcx = !rdma.empty();
    if (withUcx)
      LOOM_INFO("INIT", "RDMA device %s found: UCX carries the links to hosts that have one too",
                rdma.front().c_str());
  }
  if (withUcx) {
    LOOM_TRY(transports::ucx::createUcxTransport(ctx_, ucx, &ucx_));
    *ucxAddress = transports::ucx::ucxAddress(*ucx_);
  }
  return Status::ok();
}

transports::Transport* Connections::transportFor(int peer) const {
  if (mode_ == "tcp") return tcp_.get();
  if (mode_ == "shm") return shm_.get();
  if (mode_ == "ucx") return ucx_.get();
  if (shm_->canConnect(peer)) return shm_.get();
  const bool theyHaveUcx =
      size_t(peer) < ctx_->ucxAddresses.size() && !ctx_->ucxAddresses[size_t(peer)].empty();
  return ucx_ && theyHaveUcx ? ucx_.get() : tcp_.get();
}

std::string Connections::hostTransportName() const {
  return mode_ == "auto" ? "shm" : mode_;
}

std::string Connections::networkTransportName() const {
  if (mode_ != "auto") return mode_;
  return ucx_ ? "ucx" : "tcp";
}

Status Connections::get(int peer, int lane, int64_t timeoutMs, transports::Connection** out,
                        transports::Transport** transport) {
  if (lane >= int(conns_.size())) {
    conns_.resize(lane + 1);
    connTransport_.resize(lane + 1);
  }
  if (conns_[lane].empty()) {
    conns_[lane].resize(ctx_->nranks);
    connTransport_[lane].assign(ctx_->nranks, nullptr);
  }
  if (!conns_[lane][peer]) {
    transports::Transport* t = transportFor(peer);
    Status st = t->connect(peer, lane, Deadline(timeoutMs), &conns_[lane][peer]);
    if (!st.isOk())
      return st.withContext(strprintf("connecting to rank %d over %s", peer, t->name()));
    connTransport_[lane][peer] = t;
    made_.emplace_back(peer, conns_[lane][peer].get());
    LOOM_INFO("INIT", "connected to rank %d lane %d over %s", peer, lane, t->name());
  }
  *out = conns_[lane][peer].get();
  *transport = connTransport_[lane][peer];
  return Status::ok();
}

bool Connections::unreadOnMade(int* peer, transports::MessageMismatch* out) const {
  for (const auto& [p, conn] : made_)
    if (conn->unreadMessage(out)) {
      *peer = p;
      return true;
    }
  return false;
}

void Connections::paceTcp(const topology::Topology& topo) {
  std::vector<uint64_t> rates(size_t(ctx_->nranks), 0);
  double lowest = 0, highest = 0;
  for (int r = 0; r < ctx_->nranks; ++r) {
    const double rate = topology::slowestNetworkLink(topo, ctx_->rank, r);
    rates[size_t(r)] = uint64_t(rate);
    if (rate == 0) continue;  // a rank of this host
    lowest = lowest == 0 ? rate : std::min(lowest, rate);
    highest = std::max(highest, rate);
  }
  transports::setTcpPeerPacing(*tcp_, std::move(rates));
  if (highest > 0)
    LOOM_INFO("TCP", "LOOM_TCP_PACING=-1: connections to other hosts paced at %.4g..%.4g Gbit/s "
              "(the slowest network link on the way to each peer)",
              lowest * 8e-9, highest * 8e-9);
}

}  // namespace loom
