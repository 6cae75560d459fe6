/* The sub-tests of the NCCL API test (main.c's table names each with its ranks), and what
 * several of them share. */
#ifndef LOOM_TESTS_NCCL_SUBTESTS_H_
#define LOOM_TESTS_NCCL_SUBTESTS_H_

#include "check.h"
#include "harness.h"

/* reductions.c */
int testAllReduce(Rank* ctx);
int testReduce(Rank* ctx);
int testReduceScatter(Rank* ctx);
int testPreMulSum(Rank* ctx);
/* movements.c */
int testBroadcast(Rank* ctx);
int testAllGather(Rank* ctx);
int testAlltoAll(Rank* ctx);
int testGather(Rank* ctx);
int testScatter(Rank* ctx);
int testSendRecv(Rank* ctx);
int testSendRecvAllPairs(Rank* ctx);
/* Posts (without a group of its own) all-pairs sends and receives of case c, and checks what
 * arrived once the caller's group has ended. */
int postAllPairs(const Rank* ctx, ncclComm_t comm, Buffers* b, const Case* c);
int checkAllPairs(const Rank* ctx, Buffers* b, const Case* c);
/* api.c */
int testVersion(Rank* ctx);
int testCommInfo(Rank* ctx);
int testConfig(Rank* ctx);
int testScalableInit(Rank* ctx);
int testMemAlloc(Rank* ctx);
int testRegister(Rank* ctx);
int testWindow(Rank* ctx);
int testFinalize(Rank* ctx);
int testSimulate(Rank* ctx);
/* groups.c */
int testGroupNested(Rank* ctx);
int testGroupComms(Rank* ctx);
int testGroupInit(Rank* ctx);
int testInitAll(Rank* ctx);
int testNonBlocking(Rank* ctx);
/* lifecycle.c */
int testSplit(Rank* ctx);
int testShrink(Rank* ctx);
int testShrinkAbort(Rank* ctx);
int testRevoke(Rank* ctx);
int testAbort(Rank* ctx);
/* errors.c */
int testBadComm(Rank* ctx);
int testBadArgs(Rank* ctx);
int testConfigMagic(Rank* ctx);
int testCountMismatch(Rank* ctx);
int testKilledRank(Rank* ctx);

#endif /* LOOM_TESTS_NCCL_SUBTESTS_H_ */
