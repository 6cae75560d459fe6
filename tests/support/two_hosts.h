// Two "hosts" for multi-process tests: network namespaces joined by a veth pair. Ranks moved
// into one namespace talk over shared memory, across namespaces over TCP. Needs root and
// iproute2; the fixture skips (and says why) otherwise. Nothing leaves the machine.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "core/params.h"

namespace loom::testing {

class TwoHostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces";
    if (system("ip -V > /dev/null 2>&1") != 0) GTEST_SKIP() << "needs iproute2 (ip)";
    const std::string id = std::to_string(getpid() % 100000);
    hostA_ = "lmA" + id, hostB_ = "lmB" + id;
    const std::string subnet = "10.214." + std::to_string(getpid() % 250) + ".";
    const std::string va = "va" + id, vb = "vb" + id;
    const std::string script =
        "set -e; ip netns add " + hostA_ + "; ip netns add " + hostB_ + "; ip link add " + va +
        " type veth peer name " + vb + "; ip link set " + va + " netns " + hostA_ +
        "; ip link set " + vb + " netns " + hostB_ + "; ip -n " + hostA_ + " addr add " +
        subnet + "1/24 dev " + va + "; ip -n " + hostB_ + " addr add " + subnet + "2/24 dev " +
        vb + "; ip -n " + hostA_ + " link set " + va + " up; ip -n " + hostB_ + " link set " +
        vb + " up; ip -n " + hostA_ + " link set lo up; ip -n " + hostB_ + " link set lo up";
    if (system(("(" + script + ") > /tmp/loom-netns-" + id + ".log 2>&1").c_str()) != 0) {
      TearDown();
      GTEST_SKIP() << "could not create network namespaces (see /tmp/loom-netns-" << id
                   << ".log); a container without CAP_NET_ADMIN?";
    }
  }
  void TearDown() override {
    if (hostA_.empty()) return;
    // Deleting a namespace removes its end of the veth pair, and with it the other end.
    const std::string cmd =
        "ip netns del " + hostA_ + " 2>/dev/null; ip netns del " + hostB_ + " 2>/dev/null";
    if (system(cmd.c_str()) != 0) {
      // Nothing to do: a namespace that is already gone is what we wanted.
    }
    hostA_.clear();
  }

  // Moves the calling (forked) rank into namespace ns and points loom at its veth.
  static int enter(const std::string& ns) {
    const int fd = open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    const int rc = setns(fd, CLONE_NEWNET);
    close(fd);
    if (rc != 0) return -1;
    setenv("LOOM_SOCKET_IFNAME", "v", 1);  // the veth ("va…"/"vb…"), not loopback
    params::reloadFromEnvironment();       // the parent may have read parameters already
    return 0;
  }

  std::string hostA_, hostB_;
};

}  // namespace loom::testing
