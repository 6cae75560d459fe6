// Nothing left in /dev/shm: the ranks that outlive a killed one remove its files, the next init
// on the host removes what processes that ended left there (and nothing of a live one), and a
// communicator over tcp alone has no shared memory at all.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"
#include "tests/support/shm_files.h"
#include "transports/shm/shm_transport.h"
#include "transports/shm/shm_util.h"

namespace loom::testing {
namespace {

using transports::kShmNamePrefix;
using transports::ownerTag;
using transports::ProcessId;
using transports::thisProcess;

// loom's files in /dev/shm that name an owner whose ownerTag is one of `tags`.
std::vector<std::string> filesOf(const std::vector<std::string>& tags) {
  std::vector<std::string> out;
  std::vector<ProcessId> owners;
  for (const std::string& name : shmFiles(kShmNamePrefix))
    if (transports::shmNameOwners(name, &owners) &&
        std::any_of(owners.begin(), owners.end(), [&](const ProcessId& p) {
          return std::find(tags.begin(), tags.end(), ownerTag(p)) != tags.end();
        }))
      out.push_back(name);
  return out;
}

// A rank killed mid-allreduce leaves its doorbell behind, and its process stays a zombie until
// the launcher reaps it: the ranks that abort and destroy the communicator remove it anyway.
// Each rank writes its ownerTag to its output, for the launcher to look for afterwards.
TEST(ShmCleanup, TheRanksLeftRemoveTheFilesOfAKilledRank) {
  const int n = 4, victim = 2;
  ForkOptions options = ForkOptions::timeout(60);
  options.expectedToDie = {victim};
  auto results = runRanks(n, [&](RankContext& ctx) {
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.transport = "shm";
    config.timeoutMs = 20000;
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm, &config));
    const std::string me = ownerTag(thisProcess());
    fprintf(stderr, "owner %s\n", me.c_str());
    std::vector<float> a(1 << 16, 1.0f), b(a.size());
    RANK_LOOM(loomAllReduce(a.data(), b.data(), a.size(), loomFloat32, loomSum, comm, nullptr));
    RANK_CHECK(!filesOf({me}).empty(), "rank %d has no file in /dev/shm", ctx.rank());
    if (ctx.rank() == victim) {
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        raise(SIGKILL);
      }).detach();
    }
    loomResult_t rc = loomSuccess;
    for (int i = 0; i < 1000000 && rc == loomSuccess; ++i)
      rc = loomAllReduce(a.data(), b.data(), a.size(), loomFloat32, loomSum, comm, nullptr);
    RANK_CHECK(rc != loomSuccess, "the allreduces went on without rank %d", victim);
    RANK_LOOM(loomCommAbort(comm));
    return 0;
  }, options);
  EXPECT_EQ(describeFailures(results, options), "");
  EXPECT_EQ(results[victim].signal, SIGKILL);
  std::vector<std::string> tags;
  for (const RankResult& r : results) {
    const std::vector<std::string> lines = linesWith(r.output, "owner ");
    ASSERT_EQ(lines.size(), 1u) << r.output;
    tags.push_back(lines[0].substr(lines[0].find("owner ") + 6));
  }
  const std::vector<std::string> left = filesOf(tags);
  EXPECT_TRUE(left.empty()) << left.size() << " file(s) of the communicator's ranks left, as /dev/shm/"
                            << left[0];
  for (const std::string& name : left) shm_unlink(("/" + name).c_str());
}

// A process that ended (its pid and start time, in a child that has exited).
ProcessId endedProcess() {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t child = fork();
  if (child == 0) {
    const ProcessId me = thisProcess();
    _exit(write(fds[1], &me, sizeof(me)) == sizeof(me) ? 0 : 1);
  }
  ProcessId p;
  if (read(fds[0], &p, sizeof(p)) != sizeof(p)) p = {};
  close(fds[0]);
  close(fds[1]);
  waitpid(child, nullptr, 0);
  return p;
}

bool createShm(const std::string& name) {
  const int fd = shm_open(("/" + name).c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) return false;
  close(fd);
  return true;
}

bool exists(const std::string& name) {
  const std::vector<std::string> names = shmFiles(name);
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Files that loom's names say belong to ended processes go at the next init on the host; those
// of a live process (this test's), of another pid namespace, or not named as loom names its
// own, stay.
TEST(ShmCleanup, TheNextInitRemovesFilesOfEndedProcessesOnly) {
  const ProcessId ended = endedProcess(), live = thisProcess();
  ASSERT_NE(ended.pid, 0);
  ASSERT_NE(live.pidNamespace, 0u) << "no /proc/self/ns/pid: owners cannot be told apart";
  ProcessId reused = live;  // this pid, but a process that started at another time
  reused.start += 1;
  ProcessId elsewhere = ended;  // a pid of another pid namespace means nothing here
  elsewhere.pidNamespace += 1;
  const std::string comm = transports::shmNamePrefix(0xfeed000000000000ull | uint64_t(getpid()));
  const std::vector<std::string> stale = {
      comm + "db1-" + ownerTag(ended),
      comm + "db2-" + ownerTag(reused),
      comm + "c0-1-0-" + ownerTag(live) + "-" + ownerTag(ended),
      comm + "arena-00000000000000aa-" + ownerTag(ended),
  };
  const std::vector<std::string> kept = {
      comm + "db0-" + ownerTag(live),
      comm + "db3-" + ownerTag(elsewhere),
      comm + "db4",  // not a name loom makes: its owner is unknown
  };
  for (const auto* names : {&stale, &kept})
    for (const std::string& name : *names) ASSERT_TRUE(createShm(name)) << name;
  auto results = runRanks(2, [](RankContext& ctx) {
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm));
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
  for (const std::string& name : stale) EXPECT_FALSE(exists(name)) << name << " is still there";
  for (const std::string& name : kept) {
    EXPECT_TRUE(exists(name)) << name << " was removed";
    shm_unlink(("/" + name).c_str());
  }
}

// Over tcp alone a communicator maps no shared memory and makes no file in /dev/shm, whatever
// its calls and buffers (loomMemAlloc's memory is the caller's, in a memfd, not /dev/shm).
TEST(ShmCleanup, ACommunicatorOverTcpHasNoSharedMemory) {
  auto results = runRanks(3, [](RankContext& ctx) {
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.transport = "tcp";
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm, &config));
    const size_t count = 1 << 15;
    float* in = nullptr;
    float* out = nullptr;
    RANK_LOOM(loomMemAlloc(reinterpret_cast<void**>(&in), count * sizeof(float)));
    RANK_LOOM(loomMemAlloc(reinterpret_cast<void**>(&out), 3 * count * sizeof(float)));
    for (size_t i = 0; i < count; ++i) in[i] = float(ctx.rank() + 1);
    for (size_t bytes : {size_t(8), count * sizeof(float)}) {
      const size_t c = bytes / sizeof(float);
      RANK_LOOM(loomAllReduce(in, out, c, loomFloat32, loomSum, comm, nullptr));
      RANK_CHECK(out[0] == 6 && out[c - 1] == 6, "allreduce gave %g", double(out[0]));
      RANK_LOOM(loomAllGather(in, out, c, loomFloat32, comm, nullptr));
      RANK_CHECK(out[2 * c] == 3, "allgather gave %g", double(out[2 * c]));
      RANK_LOOM(loomBroadcast(in, out, c, loomFloat32, 1, comm, nullptr));
      RANK_CHECK(out[c - 1] == 2, "broadcast gave %g", double(out[c - 1]));
    }
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line))
      RANK_CHECK(line.find("/dev/shm") == std::string::npos, "mapped: %s", line.c_str());
    const std::vector<std::string> files = filesOf({ownerTag(thisProcess())});
    RANK_CHECK(files.empty(), "made /dev/shm/%s", files.empty() ? "" : files[0].c_str());
    RANK_LOOM(loomMemFree(in));
    RANK_LOOM(loomMemFree(out));
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

}  // namespace
}  // namespace loom::testing
