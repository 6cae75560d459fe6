// NCCL's environment variables: each translation onto loom's parameters (tables of inputs and
// the text, warnings and errors they give), the precedence of LOOM_* over NCCL_* over the
// default, the log's subsystem filter under NCCL_DEBUG_SUBSYS, the interface choice under
// NCCL_SOCKET_IFNAME, the ignored variables, and the report at communicator creation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/nccl_env.h"
#include "base/params.h"
#include "base/socket.h"
#include "collectives/builders.h"

namespace loom {
namespace {

// Sets (or with nullptr unsets) environment variables for one test, and restores them after;
// the parameters and the logger read the environment again both times.
class Environment {
 public:
  explicit Environment(std::map<std::string, const char*> vars) {
    for (const auto& [name, value] : vars) {
      const char* old = getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      if (value) setenv(name.c_str(), value, 1);
      else unsetenv(name.c_str());
    }
    reload();
  }
  ~Environment() {
    for (const auto& [name, value] : saved_) {
      if (value) setenv(name.c_str(), value->c_str(), 1);
      else unsetenv(name.c_str());
    }
    reload();
  }

 private:
  static void reload() {
    params::reloadFromEnvironment();
    log::reload();
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST(NcclDebug, LevelsMapOntoLoomsFour) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"NONE", "NONE"}, {"VERSION", "WARN"}, {"WARN", "WARN"},   {"INFO", "INFO"},
      {"ABORT", "INFO"}, {"TRACE", "TRACE"}, {"info", "INFO"},   {" trace ", "TRACE"}};
  for (const auto& [nccl, loom] : cases) {
    const params::Translation t = ncclenv::debugLevel(nccl);
    EXPECT_EQ(t.text, loom) << nccl;
    EXPECT_EQ(t.warning, "") << nccl;
    EXPECT_EQ(t.error, "") << nccl;
  }
  const params::Translation bad = ncclenv::debugLevel("LOUD");
  EXPECT_EQ(bad.text, "WARN");
  EXPECT_NE(bad.warning.find("unknown level"), std::string::npos) << bad.warning;
}

TEST(NcclDebug, SubsystemsMapOntoLooms) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"INIT", "INIT"},
      {"INIT,NET", "INIT,TCP"},
      {"^COLL,P2P", "^COLL,SHM"},
      {"init,bootstrap,tuning,call,alloc,reg,env,coll,shm", "INIT,BOOT,TUNE,API,SHM,ENV,COLL"},
      {"GRAPH,INIT", "INIT"},
      {"ALL", "ALL"},
      {"^ALL", "^ALL"},
      {"NVLS,PROXY", "^ALL"},  // only subsystems loom lacks: nothing to log
      {"^PROXY", "ALL"},       // all but one loom lacks: everything
      {"", "^ALL"},
  };
  for (const auto& [nccl, loom] : cases) {
    const params::Translation t = ncclenv::debugSubsystems(nccl);
    EXPECT_EQ(t.text, loom) << nccl;
    EXPECT_EQ(t.warning, "") << nccl;
  }
  const params::Translation t = ncclenv::debugSubsystems("INIT,FOO");
  EXPECT_EQ(t.text, "INIT");
  EXPECT_EQ(t.warning, "unknown subsystem(s) FOO left out");
}

TEST(NcclDebug, LoomsSubsystemFilterTakesNcclsList) {
  {
    Environment env({{"LOOM_DEBUG", nullptr},
                     {"LOOM_DEBUG_SUBSYS", nullptr},
                     {"NCCL_DEBUG", "INFO"},
                     {"NCCL_DEBUG_SUBSYS", "^NET,BOOTSTRAP"}});
    EXPECT_FALSE(log::enabled(log::Level::Info, "TCP"));
    EXPECT_FALSE(log::enabled(log::Level::Info, "BOOT"));
    EXPECT_TRUE(log::enabled(log::Level::Info, "INIT"));
    EXPECT_TRUE(log::enabled(log::Level::Warn, "TCP"));  // warnings always show
    EXPECT_FALSE(log::enabled(log::Level::Trace, "INIT"));
  }
  {
    Environment env({{"LOOM_DEBUG", "TRACE"},
                     {"LOOM_DEBUG_SUBSYS", "TCP,ENV"},
                     {"NCCL_DEBUG", "INFO"},
                     {"NCCL_DEBUG_SUBSYS", "^NET"}});
    EXPECT_TRUE(log::enabled(log::Level::Trace, "TCP"));
    EXPECT_TRUE(log::enabled(log::Level::Info, "ENV"));
    EXPECT_FALSE(log::enabled(log::Level::Info, "INIT"));
  }
}

TEST(NcclAlgo, TranslatesToLoomAlgo) {
  const std::string ringAll = "allreduce=ring,broadcast=chain,reduce=chain,allgather=ring,"
                              "reducescatter=ring";
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"Ring", ringAll},
      {"ring", ringAll},
      {"Tree", "allreduce=tree,broadcast=tree,reduce=tree"},
      {"PAT", "allgather=bruck,reducescatter=rh"},
      // Several algorithms: the first loom has, per collective.
      {"Tree,Ring", "allreduce=tree,broadcast=tree,reduce=tree,allgather=ring,reducescatter=ring"},
      {"Ring,Tree", ringAll},
      {"allreduce:tree,ring;allgather:ring", "allreduce=tree,allgather=ring"},
      {"AllGather:PAT,Ring", "allgather=bruck"},
      {" allreduce : tree ", "allreduce=tree"},
      // A later function's list replaces the first list's for it.
      {"ring;allreduce:tree",
       "allreduce=tree,broadcast=chain,reduce=chain,allgather=ring,reducescatter=ring"},
      // ^: all but those, in NCCL's order (Tree, Ring, CollNetDirect, ..., PAT).
      {"^tree", ringAll},
      {"allreduce:^ring", "allreduce=tree"},
      {"^Tree,Ring", "allgather=bruck,reducescatter=rh"},
      {"^nvls", "allreduce=tree,broadcast=tree,reduce=tree,allgather=ring,reducescatter=ring"},
      {"", ""},
  };
  for (const auto& [nccl, loom] : cases) {
    const params::Translation t = ncclenv::algorithms(nccl);
    EXPECT_EQ(t.text, loom) << nccl;
    EXPECT_EQ(t.warning, "") << nccl;
    EXPECT_EQ(t.error, "") << nccl;
  }
}

TEST(NcclAlgo, AlgorithmsLoomLacksAreAWarning) {
  params::Translation t = ncclenv::algorithms("NVLS,Ring");
  EXPECT_EQ(t.text, "allreduce=ring,broadcast=chain,reduce=chain,allgather=ring,"
                    "reducescatter=ring");
  EXPECT_EQ(t.warning, "loom has no counterpart for NVLS; left out");
  t = ncclenv::algorithms("allreduce:nvlstree,collnetdirect,collnetchain;allgather:nvls");
  EXPECT_EQ(t.text, "");  // the tuner chooses
  EXPECT_EQ(t.warning,
            "loom has no counterpart for NVLSTree, CollNetDirect, CollNetChain, NVLS; left out");
  EXPECT_EQ(t.error, "");
}

TEST(NcclAlgo, NamesNcclDoesNotKnowAreAnError) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"allreduce:bogus", "unknown algorithm \"bogus\" (NCCL's: Tree, Ring, CollNetDirect"},
      {"sendrecv:ring", "unknown function \"sendrecv\" (NCCL's: AllReduce, Broadcast"},
      {"ring;tree", "\"tree\": every list but the first needs a function"},
      {"Ring,Rings", "unknown algorithm \"Rings\""},
  };
  for (const auto& [nccl, error] : cases) {
    const params::Translation t = ncclenv::algorithms(nccl);
    EXPECT_EQ(t.error.rfind(error, 0), 0u) << nccl << ": " << t.error;
  }
}

// Every builder the table names is one of that collective's in loom's registry.
TEST(NcclAlgo, CounterpartsAreLoomBuilders) {
  int builders = 0;
  for (const ncclenv::Counterpart& c : ncclenv::algorithmCounterparts()) {
    int coll = 0;
    while (coll <= int(collectives::Collective::SendRecv) &&
           c.collective != std::string(collectives::collectiveName(collectives::Collective(coll))))
      ++coll;
    ASSERT_LE(coll, int(collectives::Collective::SendRecv)) << c.collective;
    if (c.builder == nullptr) continue;
    ++builders;
    EXPECT_NE(collectives::findBuilder(collectives::Collective(coll), c.builder), nullptr)
        << c.ncclAlgorithm << " " << c.collective << " -> " << c.builder;
  }
  EXPECT_EQ(builders, 3 + 5 + 2);  // Tree, Ring, PAT
}

TEST(NcclShm, DisableMeansTcp) {
  EXPECT_EQ(ncclenv::shmDisable("1").text, "tcp");
  EXPECT_EQ(ncclenv::shmDisable("0").text, "auto");
  EXPECT_NE(ncclenv::shmDisable("yes").error, "");
}

TEST(NcclParams, LoomWinsThenNcclThenTheDefault) {
  {
    Environment env({{"LOOM_DEBUG", nullptr}, {"NCCL_DEBUG", nullptr}});
    const params::Value v = params::get("LOOM_DEBUG");
    EXPECT_EQ(v.text, "WARN");
    EXPECT_STREQ(v.source, "default");
  }
  {
    Environment env({{"LOOM_DEBUG", nullptr}, {"NCCL_DEBUG", "VERSION"}});
    const params::Value v = params::get("LOOM_DEBUG");
    EXPECT_EQ(v.text, "WARN");
    EXPECT_STREQ(v.source, "NCCL_DEBUG");
    EXPECT_EQ(v.ncclText, "VERSION");
  }
  {
    Environment env({{"LOOM_DEBUG", "TRACE"}, {"NCCL_DEBUG", "INFO"}});
    EXPECT_EQ(params::getString("LOOM_DEBUG"), "TRACE");
    EXPECT_STREQ(params::get("LOOM_DEBUG").source, "LOOM_DEBUG");
  }
  {
    // Without a translation the text is taken as it is; an empty NCCL value is unset.
    Environment env({{"LOOM_ROOT", nullptr},
                     {"NCCL_COMM_ID", "10.0.0.1:5000"},
                     {"LOOM_SOCKET_IFNAME", nullptr},
                     {"NCCL_SOCKET_IFNAME", ""}});
    EXPECT_EQ(params::getString("LOOM_ROOT"), "10.0.0.1:5000");
    EXPECT_STREQ(params::get("LOOM_SOCKET_IFNAME").source, "default");
  }
  {
    Environment env({{"LOOM_TRANSPORT", nullptr}, {"NCCL_SHM_DISABLE", "1"}});
    EXPECT_EQ(params::getString("LOOM_TRANSPORT"), "tcp");
  }
}

TEST(NcclParams, AnInvalidNcclValueFailsCheckNccl) {
  {
    Environment env({{"LOOM_ALGO", nullptr}, {"NCCL_ALGO", "allreduce:fastest"}});
    EXPECT_EQ(params::getString("LOOM_ALGO"), "");  // the default stands meanwhile
    const Status st = params::checkNccl();
    EXPECT_EQ(st.code(), loomInvalidArgument);
    EXPECT_EQ(st.message().rfind("NCCL_ALGO=\"allreduce:fastest\": unknown algorithm \"fastest\"", 0),
              0u)
        << st.message();
  }
  {
    // LOOM_ALGO set: NCCL_ALGO is not read at all.
    Environment env({{"LOOM_ALGO", "allreduce=rd"}, {"NCCL_ALGO", "allreduce:fastest"}});
    EXPECT_TRUE(params::checkNccl().isOk());
    EXPECT_EQ(params::getString("LOOM_ALGO"), "allreduce=rd");
  }
  {
    Environment env({{"LOOM_ALGO", nullptr}, {"NCCL_ALGO", "nvls,tree"}});
    EXPECT_TRUE(params::checkNccl().isOk());
    EXPECT_EQ(params::get("LOOM_ALGO").warning, "loom has no counterpart for NVLS; left out");
  }
}

TEST(NcclSocket, IfnameChoosesTheInterface) {
  Environment env({{"LOOM_SOCKET_IFNAME", nullptr},
                   {"LOOM_SOCKET_FAMILY", nullptr},
                   {"NCCL_SOCKET_IFNAME", "=lo"},
                   {"NCCL_SOCKET_FAMILY", "AF_INET"}});
  net::Address addr;
  std::string ifname;
  ASSERT_TRUE(net::chooseInterfaceAddress(&addr, &ifname).isOk());
  EXPECT_EQ(ifname, "lo");
  EXPECT_EQ(addr.family(), AF_INET);
}

TEST(NcclIgnored, SetVariablesWithoutMeaningAreListedWithWhy) {
  Environment env({{"NCCL_PROTO", "LL128"},
                   {"NCCL_TOPO_FILE", "/etc/nccl-topo.xml"},
                   {"NCCL_IB_HCA", "mlx5_0"},
                   {"NCCL_TUNER_PLUGIN", "libfoo.so"},
                   {"NCCL_BUFFSIZE", "4194304"},
                   {"NCCL_SHM_DISABLE", "0"},
                   {"NCCL_DEBUG", "WARN"}});
  std::map<std::string, ncclenv::IgnoredSetting> got;
  for (const auto& s : ncclenv::ignoredSettings()) got[s.name] = s;
  ASSERT_EQ(got.count("NCCL_PROTO"), 1u);
  EXPECT_EQ(got["NCCL_PROTO"].value, "LL128");
  EXPECT_FALSE(got["NCCL_PROTO"].warn);
  EXPECT_TRUE(got["NCCL_TOPO_FILE"].warn);
  EXPECT_STREQ(got["NCCL_IB_HCA"].reason, "loom has no InfiniBand or RoCE transport");
  EXPECT_STREQ(got["NCCL_TUNER_PLUGIN"].reason, "loom loads no NCCL plugins");
  EXPECT_STREQ(got["NCCL_BUFFSIZE"].reason, "no loom meaning");
  EXPECT_EQ(got.count("NCCL_SHM_DISABLE"), 0u);  // read: LOOM_TRANSPORT
  EXPECT_EQ(got.count("NCCL_DEBUG"), 0u);
}

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The report at communicator creation: what was read, what is left out, what is ignored; once
// per reading of the environment.
TEST(NcclReport, SaysOnceWhatWasTakenAndWhatNot) {
  const std::string file = "/tmp/loom-nccl-report." + std::to_string(getpid()) + ".log";
  unlink(file.c_str());
  {
    Environment env({{"LOOM_DEBUG", nullptr},
                     {"LOOM_DEBUG_SUBSYS", nullptr},
                     {"LOOM_DEBUG_FILE", nullptr},
                     {"LOOM_ALGO", nullptr},
                     {"LOOM_TRANSPORT", "auto"},
                     {"NCCL_DEBUG", "INFO"},
                     {"NCCL_DEBUG_SUBSYS", "ENV"},
                     {"NCCL_DEBUG_FILE", (file).c_str()},
                     {"NCCL_ALGO", "NVLS,Tree"},
                     {"NCCL_SHM_DISABLE", "1"},
                     {"NCCL_PROTO", "LL"},
                     {"NCCL_TOPO_FILE", "/x.xml"}});
    ncclenv::reportOnce();
    ncclenv::reportOnce();
  }
  const std::string text = readAll(file);
  unlink(file.c_str());
  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("INFO ENV NCCL_ALGO=\"NVLS,Tree\" read as LOOM_ALGO=\"allreduce=tree,"
                  "broadcast=tree,reduce=tree\"\n"),
            1u)
      << text;
  EXPECT_EQ(count("WARN ENV NCCL_ALGO=\"NVLS,Tree\": loom has no counterpart for NVLS; left out\n"),
            1u)
      << text;
  EXPECT_EQ(count("INFO ENV NCCL_SHM_DISABLE=\"1\" ignored: LOOM_TRANSPORT is set\n"), 1u) << text;
  EXPECT_EQ(count("INFO ENV NCCL_PROTO=\"LL\" ignored: loom has no protocols"), 1u) << text;
  EXPECT_EQ(count("WARN ENV NCCL_TOPO_FILE=\"/x.xml\" ignored: NCCL's XML"), 1u) << text;
}

}  // namespace
}  // namespace loom
