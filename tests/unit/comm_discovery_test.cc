// The communicator's discovery without a communicator (topology/comm_discovery.h): one rank
// over an exchange that only echoes it, so the probe, the per-host cache and the model run
// without sockets.
#include "topology/comm_discovery.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "tests/support/temp_dir.h"
#include "topology/analysis.h"
#include "topology/discover.h"

namespace loom::topology {
namespace {

// One rank's exchange: every allgather gives back its own blob.
class OneRank final : public RankExchange {
 public:
  int allgathers = 0;
  Status allgather(const std::string& mine, std::vector<std::string>* all,
                   const Deadline&) override {
    ++allgathers;
    all->assign(1, mine);
    return Status::ok();
  }
};

struct OneRankComm {
  transports::CommContext comm;
  DiscoverySetup setup;
  OneRankComm() {
    transports::PeerInfo& me = comm.peers.emplace_back();
    std::string hostname;
    me.hostId = hostIdentity(&hostname);
    me.machineId = machineIdentity();
    snprintf(me.hostname, sizeof(me.hostname), "%s", hostname.c_str());
    setup.comm = &comm;
    setup.hostOf = {0};
    setup.machineRanks = 1;
    setup.transportTo = [](int peer) -> transports::Transport* {
      ADD_FAILURE() << "one rank measures no pair, yet asked for a transport to " << peer;
      return nullptr;
    };
  }
};

TEST(CommDiscovery, OneRankDetectsItsHostAndFilesTheProbe) {
  testing::TempDir dir("comm-discovery");
  OneRankComm one;
  DiscoveryOptions options;
  options.measureMode = 0;  // defaults: no measurement
  options.cacheDir = dir.path();
  OneRank ranks;
  Topology first;
  NetworkChoice network;
  ASSERT_TRUE(discoverCommTopology(one.setup, options, ranks, Deadline(5000), &first, &network).isOk());
  EXPECT_EQ(first.ranks.size(), 1u);
  EXPECT_EQ(first.hostCount(), 1);
  EXPECT_TRUE(first.validate().isOk());
  EXPECT_EQ(ranks.allgathers, 1);  // the probe records; nothing measured, nothing exchanged

  // The probe is filed for the host, and the next discovery builds the same model from it.
  HostCache filed;
  const std::string signature =
      hostSignature(one.comm.peers[0].hostname, one.comm.peers[0].hostId);
  ASSERT_TRUE(loadHostCache(dir.path(), signature, &filed).isOk());
  EXPECT_GT(filed.cores, 0);
  Topology second;
  ASSERT_TRUE(discoverCommTopology(one.setup, options, ranks, Deadline(5000), &second, &network).isOk());
  EXPECT_EQ(topologySignature(second), topologySignature(first));
}

TEST(CommDiscovery, BadMeasureSettingFailsBeforeAnyExchange) {
  OneRankComm one;
  DiscoveryOptions options;
  options.measureMode = 3;
  OneRank ranks;
  Topology t;
  NetworkChoice network;
  const Status st = discoverCommTopology(one.setup, options, ranks, Deadline(5000), &t, &network);
  EXPECT_EQ(st.code(), loomInvalidArgument);
  EXPECT_NE(st.message().find("LOOM_TOPO_MEASURE=3"), std::string::npos) << st.message();
  EXPECT_EQ(ranks.allgathers, 0);
}

}  // namespace
}  // namespace loom::topology
