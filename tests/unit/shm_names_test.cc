// The names loom gives its files in /dev/shm carry their owners, and only names of that shape
// are taken for loom's (transports/shm/shm_transport.h, shmNameOwners).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "transports/shm/shm_transport.h"
#include "transports/shm/shm_util.h"

namespace loom::transports {
namespace {

const ProcessId kA{4242, 987654321, 4026531836ull}, kB{7, 0, 4026531836ull};

TEST(ShmNames, OwnersAreReadBackFromEveryKindOfName) {
  const std::string comm = shmNamePrefix(0x0123456789abcdefull);
  EXPECT_EQ(comm, "loom-0123456789abcdef-");
  EXPECT_EQ(ownerTag(kA), "4026531836.4242.987654321");
  std::vector<ProcessId> owners;
  ASSERT_TRUE(shmNameOwners(comm + "db3-" + ownerTag(kA), &owners));
  EXPECT_EQ(owners, std::vector<ProcessId>({kA}));
  ASSERT_TRUE(shmNameOwners(comm + "c1-12-0-" + ownerTag(kB) + "-" + ownerTag(kA), &owners));
  EXPECT_EQ(owners, std::vector<ProcessId>({kB, kA}));
  ASSERT_TRUE(shmNameOwners(comm + "arena-00000000deadbeef-" + ownerTag(kB), &owners));
  EXPECT_EQ(owners, std::vector<ProcessId>({kB}));
}

TEST(ShmNames, OtherNamesAreNotLooms) {
  const std::string comm = shmNamePrefix(0x0123456789abcdefull);
  const std::string tag = ownerTag(kA);
  std::vector<ProcessId> owners;
  for (const std::string& name : std::vector<std::string>{
           comm + "db3",                              // no owner
           comm + "db3-" + tag + "-" + tag,           // one owner too many
           comm + "dbx-" + tag,                       // not a rank
           comm + "c1-2-" + tag + "-" + tag,          // no lane
           comm + "c1-2-0-" + tag,                    // one owner missing
           comm + "arena-beef-" + tag,                // short host
           comm + "db3-4026531836.4242",              // an owner without a start
           comm + "db3-4026531836.4242.98x",          // not a number
           comm + "db3-4026531836.99999999999.1",     // no pid
           "loom-0123456789abcdeg-db3-" + tag,        // not a communicator
           "loom-0123-db3-" + tag,
           "other-0123456789abcdef-db3-" + tag,
           "loom-mem",
       })
    EXPECT_FALSE(shmNameOwners(name, &owners)) << name;
}

}  // namespace
}  // namespace loom::transports
