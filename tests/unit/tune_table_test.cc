// The override grammar (tuner/tune_table.h): good and bad rules, first-match semantics,
// ranges and '*', and the built-in table against the size rule it replaced.
#include "tuner/tune_table.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace loom::tuner {
namespace {

using collectives::CollArgs;
using collectives::Collective;

TuneTable parsed(const std::string& text) {
  TuneTable t;
  Status st = TuneTable::parse(text, "LOOM_TUNE", &t);
  EXPECT_TRUE(st.isOk()) << st.message();
  return t;
}

std::string parseError(const std::string& text) {
  TuneTable t;
  Status st = TuneTable::parse(text, "LOOM_TUNE", &t);
  EXPECT_EQ(st.code(), loomInvalidArgument) << text;
  return st.message();
}

CollArgs call(Collective c, int n, uint64_t count, std::vector<int32_t> hostOf = {}) {
  CollArgs a;
  a.coll = c;
  a.nranks = n;
  a.count = count;
  a.elemSize = 4;
  a.hostOf = std::move(hostOf);
  return a;
}

// The algorithm the table picks for a call, or "" when no rule matches.
std::string pick(const TuneTable& t, const CollArgs& a) {
  const TuneRule* r = t.match(a, callShape(a));
  return r ? r->builder->name : "";
}

TEST(TuneTable, ParsesTheDocumentedForms) {
  TuneTable t = parsed(
      "# comment line\n"
      "allreduce  size=0-16K  ranks=2-*  hosts=1  -> rd   # trailing comment\n"
      "allreduce  size=16K-*  hosts=2-*      -> hierarchical lanes=2\n"
      "alltoall   size=*                     -> incast k=2; "
      "allreduce  size=1M-*   ranks=4        -> torus dims=2x2 slices=8\n"
      "broadcast->tree\n");
  ASSERT_EQ(t.rules().size(), 5u);
  const TuneRule& r0 = t.rules()[0];
  EXPECT_EQ(r0.coll, Collective::AllReduce);
  EXPECT_EQ(r0.minBytes, 0u);
  EXPECT_EQ(r0.maxBytes, 16u << 10);
  EXPECT_EQ(r0.minRanks, 2u);
  EXPECT_EQ(r0.maxRanks, TuneRule::kAny);
  EXPECT_EQ(r0.minHosts, 1u);
  EXPECT_EQ(r0.maxHosts, 1u);
  EXPECT_STREQ(r0.builder->name, "rd");
  EXPECT_EQ(r0.number, 1);
  EXPECT_EQ(r0.text, "allreduce  size=0-16K  ranks=2-*  hosts=1  -> rd");
  EXPECT_EQ(t.rules()[1].params, (AlgoParams{2, 0, 0, 0, 0}));
  EXPECT_EQ(t.rules()[2].params.fanIn, 2);
  EXPECT_EQ(t.rules()[2].maxBytes, TuneRule::kAny);
  EXPECT_EQ(t.rules()[3].params, (AlgoParams{0, 2, 2, 0, 8}));
  EXPECT_EQ(t.rules()[3].minBytes, 1u << 20);
  EXPECT_EQ(t.rules()[3].minRanks, 4u);
  EXPECT_EQ(t.rules()[3].maxRanks, 4u);
  EXPECT_STREQ(t.rules()[4].builder->name, "tree");  // "->" needs no spaces around it
  EXPECT_EQ(formatParams(t.rules()[3].params), "dims=2x2 slices=8");
  EXPECT_TRUE(parsed("  \n# nothing\n;;").empty());
}

TEST(TuneTable, BadRulesSayLineTokenAndWhatWasExpected) {
  struct Case {
    std::string text, message;
  };
  const Case cases[] = {
      {"allreduce -> ring\nallreduce size=16Q -> ring",
       "LOOM_TUNE line 2: \"size=16Q\": unknown unit \"Q\" (use K, M, G)"},
      {"allreduc -> ring",
       "LOOM_TUNE line 1: \"allreduc\": unknown collective (known: allreduce, broadcast, "
       "reduce, allgather, reducescatter, alltoall, alltoallv, gather, scatter)"},
      {"sendrecv -> p2p", "\"sendrecv\": sendrecv has no algorithms to choose from"},
      {"allreduce size=*", "\"size=*\": expected \"-> ALGORITHM\" after the conditions"},
      {"allreduce ->", "\"->\": expected \"-> ALGORITHM\" after the conditions"},
      {"allreduce -> chain", "\"chain\": allreduce has no algorithm \"chain\" (known: ring,"},
      {"allreduce size=1M-16K -> ring", "\"size=1M-16K\": empty range (1M is above 16K)"},
      {"allreduce size=abc -> ring", "\"size=abc\": expected a size in bytes (e.g. 16K, 1M) or *"},
      {"allreduce ranks=4K -> ring", "\"ranks=4K\": expected a whole number or *, not \"4K\""},
      {"allreduce size=99999999999999999999 -> ring", "is too large"},
      {"allreduce size=99999999999G -> ring", "\"99999999999G\" is too large"},
      {"allreduce colour=red -> ring",
       "\"colour=red\": expected a condition (size=, ranks=, hosts=) or \"->\""},
      {"allreduce size=* size=1K -> ring", "\"size=1K\": \"size\" is given twice"},
      {"allreduce -> ring lanes=0", "\"lanes=0\": lanes must be 1 to 64"},
      {"allreduce -> ring lanes=2 lanes=4", "\"lanes=4\": \"lanes\" is given twice"},
      {"allreduce -> ring slices=17", "\"slices=17\": slices must be 1 to 16"},
      {"allreduce -> ring dims=2x2", "\"dims=2x2\": ring has no dims (only torus has)"},
      {"allreduce -> torus dims=2by2",
       "\"dims=2by2\": expected dims=XxY with positive X and Y, e.g. dims=4x2"},
      {"allreduce -> torus dims=0x4", "expected dims=XxY with positive X and Y"},
      {"alltoall -> pairwise k=2", "\"k=2\": pairwise has no k (only incast has)"},
      {"alltoall -> incast k=0", "\"k=0\": k must be at least 1"},
      {"alltoall -> incast fanin=2",
       "\"fanin=2\": expected a parameter: lanes=, slices=, dims= or k="},
      {"alltoallv size=1K-* -> pairwise",
       "alltoallv calls have no size that every rank shares; leave size out"},
      {"allreduce -> ring\n\n\nbroadcast -> ring", "LOOM_TUNE line 4: \"ring\": broadcast has"},
  };
  for (const Case& c : cases) {
    const std::string message = parseError(c.text);
    EXPECT_NE(message.find(c.message), std::string::npos)
        << "rules: " << c.text << "\nmessage: " << message << "\nexpected: " << c.message;
  }
}

TEST(TuneTable, FromSettingReadsInlineRulesOrAFile) {
  TuneTable t;
  ASSERT_TRUE(TuneTable::fromSetting("allreduce -> tree", &t).isOk());
  EXPECT_EQ(t.origin(), "LOOM_TUNE");
  ASSERT_EQ(t.rules().size(), 1u);

  char path[] = "/tmp/loom_tune_test_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = "# rules\nallgather -> bruck\nalltoall size=* -> xor lanes=2\n";
  ASSERT_EQ(write(fd, text.data(), text.size()), ssize_t(text.size()));
  close(fd);
  ASSERT_TRUE(TuneTable::fromSetting(std::string("@") + path, &t).isOk());
  EXPECT_EQ(t.origin(), path);
  ASSERT_EQ(t.rules().size(), 2u);
  EXPECT_STREQ(t.rules()[1].builder->name, "xor");
  // A bad rule in a file names the file and its line.
  const std::string bad = "allgather -> bruck\nallgather -> nope\n";
  FILE* f = fopen(path, "w");
  ASSERT_NE(f, nullptr);
  fputs(bad.c_str(), f);
  fclose(f);
  Status st = TuneTable::fromSetting(std::string("@") + path, &t);
  EXPECT_NE(st.message().find(std::string(path) + " line 2: \"nope\""), std::string::npos)
      << st.message();
  unlink(path);
  st = TuneTable::fromSetting("@/no/such/loom/rules", &t);
  EXPECT_EQ(st.code(), loomInvalidArgument);
  EXPECT_EQ(st.message(), "LOOM_TUNE=@/no/such/loom/rules: cannot read the file");
}

TEST(TuneTable, FirstMatchWinsAndRangesIncludeBothEnds) {
  TuneTable t = parsed(
      "allreduce size=0-16K -> rd\n"
      "allreduce size=16K-1M ranks=4-8 -> tree\n"
      "allreduce size=16K-* hosts=2-* -> rhd\n"
      "allreduce -> ring\n"
      "allgather ranks=3 -> bruck\n");
  EXPECT_EQ(pick(t, call(Collective::AllReduce, 4, 0)), "rd");          // 0 bytes
  EXPECT_EQ(pick(t, call(Collective::AllReduce, 4, 4096)), "rd");       // exactly 16K
  EXPECT_EQ(pick(t, call(Collective::AllReduce, 4, 4097)), "tree");     // just above
  EXPECT_EQ(pick(t, call(Collective::AllReduce, 8, 1 << 18)), "tree");  // exactly 1M
  EXPECT_EQ(pick(t, call(Collective::AllReduce, 9, 1 << 18)), "ring");  // 9 ranks
  EXPECT_EQ(pick(t, call(Collective::AllReduce, 2, 1 << 18, {0, 1})), "rhd");
  EXPECT_EQ(pick(t, call(Collective::AllReduce, 4, (1 << 18) + 1)), "ring");
  // Sizes of allgather count every rank's block, as nccl-tests does.
  EXPECT_EQ(pick(t, call(Collective::AllGather, 3, 1)), "bruck");
  EXPECT_EQ(pick(t, call(Collective::AllGather, 4, 1)), "");  // no rule
  EXPECT_EQ(pick(t, call(Collective::Broadcast, 4, 1)), "");
}

TEST(TuneTable, ARuleWhoseAlgorithmRefusesTheCallIsSkipped) {
  TuneTable t = parsed(
      "allreduce ranks=8 -> torus dims=4x2\n"
      "allreduce ranks=6 -> torus dims=4x2\n"
      "allreduce -> hierarchical\n"
      "allreduce -> ring\n");
  EXPECT_EQ(pick(t, call(Collective::AllReduce, 4, 1024, {0, 0, 1, 1})), "hierarchical");
  EXPECT_EQ(pick(t, call(Collective::AllReduce, 3, 1024, {0, 0, 1})), "ring");  // unequal
  EXPECT_EQ(pick(t, call(Collective::AllReduce, 8, 1024)), "torus");
  // 4x2 does not fit 6 ranks: the torus refuses, the next rule serves.
  EXPECT_EQ(pick(t, call(Collective::AllReduce, 6, 1024, {0, 0, 0, 1, 1, 1})), "hierarchical");
}

TEST(TuneTable, CallBytesCountLikeNcclTests) {
  EXPECT_EQ(callBytes(call(Collective::AllReduce, 8, 100)), 400u);
  EXPECT_EQ(callBytes(call(Collective::Broadcast, 8, 100)), 400u);
  EXPECT_EQ(callBytes(call(Collective::AllGather, 8, 100)), 3200u);
  EXPECT_EQ(callBytes(call(Collective::ReduceScatter, 8, 100)), 3200u);
  EXPECT_EQ(callBytes(call(Collective::AlltoAll, 8, 100)), 3200u);
  EXPECT_EQ(callBytes(call(Collective::Gather, 8, 100)), 3200u);
  EXPECT_EQ(callBytes(call(Collective::Scatter, 8, 100)), 3200u);
  EXPECT_EQ(callBytes(call(Collective::AlltoAllv, 8, 100)), 0u);
  EXPECT_EQ(hostCount(call(Collective::AllReduce, 4, 1)), 1);
  EXPECT_EQ(hostCount(call(Collective::AllReduce, 4, 1, {0, 1, 1, 2})), 3);
  EXPECT_EQ(formatBytes(16384), "16K");
  EXPECT_EQ(formatBytes(1536), "1536");
  EXPECT_EQ(formatBytes(uint64_t(3) << 30), "3G");
}

// The size rule the built-in table replaced (collectives/builders.cc before the tuner),
// restated here as the reference: up to 16 KiB the fewest-rounds algorithms, above it the
// bandwidth-optimal ones, hierarchical allreduce on several equal hosts.
std::string formerSizeRule(const CollArgs& a) {
  constexpr uint64_t kSmallBytes = 16 << 10;
  const uint64_t bytes = a.count * a.elemSize;
  bool severalHosts = false;
  for (int32_t h : a.hostOf) severalHosts = severalHosts || h != 0;
  const uint64_t n = uint64_t(a.nranks);
  switch (a.coll) {
    case Collective::AllReduce:
      if (n >= 2 && bytes <= kSmallBytes) return "rd";
      if (severalHosts && collectives::findBuilder(a.coll, "hierarchical")->refuse(a).empty())
        return "hierarchical";
      return "ring";
    case Collective::AllGather:
      return n > 2 && bytes * n <= kSmallBytes ? "bruck" : "ring";
    case Collective::AlltoAll:
      return n > 2 && bytes * n <= kSmallBytes ? "bruck" : "pairwise";
    case Collective::Broadcast:
      return n > 3 && bytes <= kSmallBytes ? "tree" : "chain";
    case Collective::Reduce:
      return n > 3 && bytes <= kSmallBytes ? "tree" : "chain";
    case Collective::ReduceScatter:
      return "ring";
    case Collective::AlltoAllv:
      return "pairwise";
    case Collective::Gather:
    case Collective::Scatter:
      return n > 3 && bytes * n <= kSmallBytes ? "tree" : "linear";
    case Collective::SendRecv:
      return "p2p";
  }
  return "";
}

TEST(TuneTable, BuiltinTableMakesTheFormerSizeRulesDecisions) {
  const TuneTable& t = builtinTable();
  int checked = 0;
  for (int c = 0; c < int(Collective::SendRecv); ++c) {
    for (int n : {1, 2, 3, 4, 5, 8, 16, 64}) {
      // One host, two or more equal hosts, unequal hosts.
      std::vector<std::vector<int32_t>> layouts = {{}};
      for (int hosts : {2, 3}) {
        if (n % hosts != 0 || n == hosts) continue;
        std::vector<int32_t> equal;
        for (int r = 0; r < n; ++r) equal.push_back(int32_t(r / (n / hosts)));
        layouts.push_back(equal);
      }
      if (n >= 3) {
        std::vector<int32_t> unequal(size_t(n), 0);
        unequal.back() = 1;
        layouts.push_back(unequal);
      }
      for (const auto& hostOf : layouts) {
        for (uint32_t elem : {1u, 4u, 8u}) {
          for (uint64_t count : {0ull, 1ull, 7ull, 255ull, 256ull, 257ull, 512ull, 1024ull, 2048ull,
                                 2049ull, 4096ull, 4097ull, 16384ull, 16385ull, 1ull << 20}) {
            CollArgs a = call(Collective(c), n, count, hostOf);
            a.elemSize = elem;
            const TuneRule* r = t.match(a, callShape(a));
            ASSERT_NE(r, nullptr) << collectiveName(a.coll) << " n=" << n;
            EXPECT_EQ(r->builder->name, formerSizeRule(a))
                << collectiveName(a.coll) << " n=" << n << " count=" << count << " elem=" << elem
                << " hosts=" << hostCount(a) << " rule " << r->number;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 3000);
}

TEST(TuneTable, BuiltinTableEndsWithACatchAllForEveryCollective) {
  for (int c = 0; c < int(Collective::SendRecv); ++c) {
    bool catchAll = false;
    for (const TuneRule& r : builtinTable().rules()) {
      catchAll =
          catchAll || (r.coll == Collective(c) && r.minBytes == 0 && r.maxBytes == TuneRule::kAny &&
                       r.minRanks <= 1 && r.maxRanks == TuneRule::kAny && r.minHosts <= 1 &&
                       r.maxHosts == TuneRule::kAny && r.builder->refuse == nullptr);
    }
    EXPECT_TRUE(catchAll) << collectiveName(Collective(c));
  }
}

}  // namespace
}  // namespace loom::tuner
