#include "comm/connections.h"

#include <algorithm>

#include "base/log.h"
#include "base/status.h"
#include "topology/comm_discovery.h"
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
  if (mode_ == "ucx") {
    LOOM_TRY(transports::ucx::createUcxTransport(ctx_, ucx, &ucx_));
    *ucxAddress = transports::ucx::ucxAddress(*ucx_);
  }
  return Status::ok();
}

std::string autoNetworkRule() {
  if (!transports::ucx::ucxBuilt()) return "tcp (loom is built without UCX)";
  const std::vector<std::string> rdma = topology::rdmaDevices();
  return strprintf("ucx where every host has an RDMA device (this host: %s), else tcp, unless "
                   "the network link's measured or cached figures make the other at least %d%% "
                   "cheaper",
                   rdma.empty() ? "none" : rdma.front().c_str(), topology::kNetworkMarginPercent);
}

std::string Connections::openNetworkCandidate(const transports::ucx::UcxOptions& ucx,
                                              int hostCount) {
  if (mode_ != "auto" || hostCount < 2 || !transports::ucx::ucxBuilt()) return "";
  transports::ucx::UcxOptions betweenHosts = ucx;
  betweenHosts.betweenHostsOnly = true;
  if (Status st = transports::ucx::createUcxTransport(ctx_, betweenHosts, &ucx_); !st.isOk()) {
    LOOM_WARN("INIT", "UCX cannot start (%s): tcp carries the links between hosts",
              st.message().c_str());
    return "";
  }
  const std::vector<std::string> rdma = topology::rdmaDevices();
  if (!rdma.empty()) LOOM_INFO("INIT", "RDMA device %s found", rdma.front().c_str());
  return (rdma.empty() ? "-" : "r") + transports::ucx::ucxAddress(*ucx_);
}

Status Connections::learnNetworkCandidates(const std::vector<std::string>& records,
                                           std::vector<std::string>* ucxAddresses) {
  ucxEverywhere_ = rdmaEverywhere_ = !records.empty();
  for (size_t r = 0; r < records.size(); ++r) {
    const std::string& record = records[r];
    if (!record.empty() && record[0] != 'r' && record[0] != '-')
      return errorf(loomInternalError, "bootstrap: rank %zu sent a malformed UCX record", r);
    ucxEverywhere_ = ucxEverywhere_ && !record.empty();
    rdmaEverywhere_ = rdmaEverywhere_ && !record.empty() && record[0] == 'r';
    (*ucxAddresses)[r] = record.empty() ? "" : record.substr(1);
  }
  // A rank without UCX leaves tcp the only candidate: UCX closes at useNetworkTransport.
  return Status::ok();
}

std::vector<std::string> Connections::networkCandidates() const {
  if (mode_ != "auto") return {mode_};
  if (ucx_ && ucxEverywhere_) return {"tcp", "ucx"};
  return {"tcp"};
}

std::string Connections::defaultNetworkTransport(std::string* why) const {
  if (mode_ != "auto") {
    *why = "LOOM_TRANSPORT=" + mode_;
    return mode_;
  }
  if (!ucx_ || !ucxEverywhere_) {
    *why = transports::ucx::ucxBuilt() ? "not every rank has UCX" : "loom is built without UCX";
    return "tcp";
  }
  *why = rdmaEverywhere_ ? "no figures of both transports; every rank has an RDMA device"
                         : "no figures of both transports; not every rank has an RDMA device";
  return rdmaEverywhere_ ? "ucx" : "tcp";
}

transports::Transport* Connections::transportNamed(const std::string& name) const {
  if (name == "tcp") return tcp_.get();
  if (name == "ucx") return ucx_.get();
  if (name == "shm") return shm_.get();
  return nullptr;
}

void Connections::useNetworkTransport(const std::string& name) {
  if (mode_ != "auto") return;
  if (name == "ucx") {
    network_ = ucx_.get();
    return;
  }
  network_ = tcp_.get();
  ucx_.reset();  // no connection uses it: the probe's closed with its measurement
}

transports::Transport* Connections::transportFor(int peer) const {
  if (mode_ == "tcp") return tcp_.get();
  if (mode_ == "shm") return shm_.get();
  if (mode_ == "ucx") return ucx_.get();
  if (shm_->canConnect(peer)) return shm_.get();
  return network_ != nullptr ? network_ : tcp_.get();
}

std::string Connections::hostTransportName() const {
  return mode_ == "auto" ? "shm" : mode_;
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
