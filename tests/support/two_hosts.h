// "Hosts" for multi-process tests: network namespaces, each joined by a veth pair to a bridge
// that lives in a namespace of its own (a switch), so nothing is added to the machine's own
// namespace. Ranks moved into one namespace talk over shared memory, across namespaces over
// TCP. Needs root and iproute2; the fixture skips (and says why) otherwise. Nothing leaves the
// machine.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "base/params.h"

namespace loom::testing {

// `hosts_` namespaces (hostCount(): 2 unless a test's fixture says otherwise), hostA_ and
// hostB_ the first two.
class TwoHostsTest : public ::testing::Test {
 protected:
  virtual int hostCount() const { return 2; }

  void SetUp() override {
    // ctest labels these tests netns by their suites' names (tests/CMakeLists.txt).
    const std::string suite =
        ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name();
    if (!suite.ends_with("TwoHosts") && !suite.ends_with("FourHosts"))
      FAIL() << "suite " << suite << " runs on network namespaces: its name must end in "
             << "TwoHosts or FourHosts, so that ctest labels it netns";
    if (geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces";
    if (system("ip -V > /dev/null 2>&1") != 0) GTEST_SKIP() << "needs iproute2 (ip)";
    const std::string id = std::to_string(getpid() % 100000);
    const std::string subnet = "10.214." + std::to_string(getpid() % 250) + ".";
    switch_ = "lmS" + id;
    std::string script = "set -e; ip netns add " + switch_ + "; ip -n " + switch_ +
                         " link add name bridge type bridge; ip -n " + switch_ + " link set bridge up";
    for (int i = 0; i < hostCount(); ++i) {
      const std::string ns = "lm" + std::string(1, char('A' + i)) + id;
      const std::string inner = "v" + std::to_string(i) + "x" + id;  // LOOM_SOCKET_IFNAME "v"
      const std::string outer = "s" + std::to_string(i) + "x" + id;
      hosts_.push_back(ns);
      veths_.push_back(inner);
      script += "; ip netns add " + ns + "; ip link add " + inner + " type veth peer name " +
                outer + "; ip link set " + inner + " netns " + ns + "; ip link set " + outer +
                " netns " + switch_ + "; ip -n " + switch_ + " link set " + outer +
                " master bridge up; ip -n " + ns + " addr add " + subnet + std::to_string(i + 1) +
                "/24 dev " + inner + "; ip -n " + ns + " link set " + inner + " up; ip -n " + ns +
                " link set lo up";
    }
    hostA_ = hosts_[0], hostB_ = hosts_[1];
    if (system(("(" + script + ") > /tmp/loom-netns-" + id + ".log 2>&1").c_str()) != 0) {
      TearDown();
      GTEST_SKIP() << "could not create network namespaces (see /tmp/loom-netns-" << id
                   << ".log); a container without CAP_NET_ADMIN?";
    }
  }
  void TearDown() override {
    if (switch_.empty()) return;
    // Deleting a namespace removes its ends of the veth pairs, and with them the other ends.
    std::string cmd = "ip netns del " + switch_ + " 2>/dev/null";
    for (const std::string& ns : hosts_) cmd += "; ip netns del " + ns + " 2>/dev/null";
    if (system(cmd.c_str()) != 0) {
      // Nothing to do: a namespace that is already gone is what we wanted.
    }
    switch_.clear();
    hosts_.clear();
    veths_.clear();
  }

  // Shapes every host's link to the switch (its egress) with tc htb at `rate` (tc units), its
  // token bucket `burstBytes` deep, as perf/netns-cluster.sh does; false if tc refused.
  bool shapeLinks(const std::string& rate, int burstBytes) {
    std::string script = "set -e";
    for (size_t i = 0; i < hosts_.size(); ++i) {
      const std::string tc = "; ip netns exec " + hosts_[i] + " tc ";
      script += tc + "qdisc add dev " + veths_[i] + " root handle 1: htb default 10" + tc +
                "class add dev " + veths_[i] + " parent 1: classid 1:10 htb rate " + rate +
                " ceil " + rate + " burst " + std::to_string(burstBytes) + " cburst " +
                std::to_string(burstBytes);
    }
    return system(("(" + script + ") > /dev/null 2>&1").c_str()) == 0;
  }

  // Moves the calling (forked) rank into namespace ns and points loom at its veth.
 public:
  static int enter(const std::string& ns) {
    const int fd = open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    const int rc = setns(fd, CLONE_NEWNET);
    close(fd);
    if (rc != 0) return -1;
    // /sys/class/net still lists the old namespace's interfaces until sysfs is mounted again
    // from this one (as `ip netns exec` does, in a mount namespace of the rank's own); UCX
    // finds its TCP devices there.
    if (unshare(CLONE_NEWNS) == 0 && mount("", "/", nullptr, MS_SLAVE | MS_REC, nullptr) == 0 &&
        umount2("/sys", MNT_DETACH) == 0)
      mount(ns.c_str(), "/sys", "sysfs", 0, nullptr);
    setenv("LOOM_SOCKET_IFNAME", "v", 1);  // the veth ("v0x…", "v1x…"), not loopback
    params::reloadFromEnvironment();       // the parent may have read parameters already
    return 0;
  }

 protected:
  std::string switch_;
  std::vector<std::string> hosts_;
  std::vector<std::string> veths_;  // each host's end of its link, as named inside it
  std::string hostA_, hostB_;
};

}  // namespace loom::testing
