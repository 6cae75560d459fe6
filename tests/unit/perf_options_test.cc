// loom-perf's pieces in process: the JSON writer and reader, the options (-a's aggregation,
// the sweep's arguments, --race's entries, --api and -A), NCCL's numbers for --api nccl and
// --compare's merged table.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "perf/compare.h"
#include "perf/nccl_api.h"
#include "perf/options.h"
#include "perf/output.h"
#include "perf/sweep.h"
#include "toolkit/json.h"
#include "toolkit/units.h"

namespace loom::perf {
namespace {

// parseOptions on "x COLLECTIVE args...".
bool parseCommand(const char* collective, std::vector<const char*> args, Options* o,
                  std::string* error) {
  args.insert(args.begin(), {"x", collective});
  return parseOptions(int(args.size()), const_cast<char**>(args.data()), o, error);
}

TEST(PerfJson, WritesWhatItsReaderParses) {
  RunMetadata meta{"loom-perf", "loom", "0.1.0", "abc123", "Backend: \"q\"\n",
                   Collective::ReduceScatter, 4, 2, {{"LOOM_ALGO", "a=b,c"}}, ""};
  Options o;
  o.check = false;
  ResultRow row;
  row.bytes = 4096;
  row.count = 256;
  row.algorithm = "ring";
  row.outOfPlace = makeMeasurement(Collective::ReduceScatter, 4096, 4, 10.0, -1);
  row.inPlace = makeMeasurement(Collective::ReduceScatter, 4096, 4, 20.0, -1);
  std::string error;
  const std::optional<JsonValue> j = parseJson(formatJson(meta, o, {row, row}, 0, 1.5), &error);
  ASSERT_TRUE(j) << error;
  EXPECT_EQ(j->find("backend")->text, "Backend: \"q\"\n");
  EXPECT_EQ(j->find("env")->find("LOOM_ALGO")->text, "a=b,c");
  EXPECT_EQ(j->find("wrong_total")->kind, JsonValue::Kind::kNull);
  const JsonValue& r0 = j->find("rows")->items.at(1);
  EXPECT_EQ(r0.find("size")->number, 4096);
  // busbw = size / time * (n-1)/n, kept at full precision.
  EXPECT_DOUBLE_EQ(r0.find("out_of_place")->find("busbw_gbs")->number, 4096 / 10e3 * 0.75);
  EXPECT_EQ(r0.find("in_place")->find("wrong")->kind, JsonValue::Kind::kNull);
  // CSV: a header and one line per row, the same number of fields in each (quoted env).
  const std::string csv = formatCsv(meta, {row});
  EXPECT_EQ(csv.substr(0, 8), "library,");
  EXPECT_NE(csv.find(",\"LOOM_ALGO=a=b,c\"\n"), std::string::npos) << csv;
  EXPECT_FALSE(parseJson("{\"a\": [1, 2,]}", &error));
  EXPECT_FALSE(parseJson("{} x", &error));
}

TEST(PerfOptions, AggregatesRankTimesAsNcclTestsA) {
  const std::vector<double> t = {4, 1, 7};
  EXPECT_EQ(aggregateTimes(Aggregate::kRank0, t), 4);
  EXPECT_EQ(aggregateTimes(Aggregate::kAvg, t), 4);
  EXPECT_EQ(aggregateTimes(Aggregate::kMin, t), 1);
  EXPECT_EQ(aggregateTimes(Aggregate::kMax, t), 7);
  Options o;
  EXPECT_EQ(o.average, Aggregate::kAvg);  // nccl-tests' default
}

// Round by round: the median of the per-round ratios, which a slow spell that slows every entry
// of its round alike does not move, where the ratio of the medians does.
TEST(PerfOptions, PairedRatioIsTheMedianOfTheRoundsRatios) {
  const std::vector<double> a = {10, 22, 11, 24, 12};  // rounds 2 and 4 in a slow spell
  const std::vector<double> b = {10, 20, 10, 20, 10};
  EXPECT_DOUBLE_EQ(pairedRatio(a, b), 1.1);                 // 1, 1.1, 1.1, 1.2, 1.2
  EXPECT_DOUBLE_EQ(medianOf(a) / medianOf(b), 1.2);         // 12 against 10
  EXPECT_DOUBLE_EQ(pairedRatio({3, 8}, {2, 4}), 1.75);      // even: the mean of 1.5 and 2
  EXPECT_EQ(pairedRatio({1, 2}, {1}), -1);                  // not the same rounds
  EXPECT_EQ(pairedRatio({}, {}), -1);
}

TEST(PerfOptions, SweepArgsRoundTrip) {
  const char* argv[] = {"x", "broadcast", "-b", "1K", "-e", "1M", "-f", "2", "-r", "1", "-a",
                        "3", "-z", "1", "-d", "all", "-c", "0", "--compare", "mpi,gloo", "-R",
                        "5", "--sim"};
  Options o;
  std::string error;
  ASSERT_TRUE(parseOptions(23, const_cast<char**>(argv), &o, &error)) << error;
  EXPECT_EQ(o.compare, (std::vector<std::string>{"mpi", "gloo"}));
  EXPECT_EQ(o.repeats, 5);
  EXPECT_TRUE(o.sim && o.allDtypes && !o.check);
  std::vector<std::string> args = sweepArgs(o);
  args.insert(args.begin(), "x");
  std::vector<char*> ptrs;
  for (std::string& a : args) ptrs.push_back(a.data());
  Options back;
  ASSERT_TRUE(parseOptions(int(ptrs.size()), ptrs.data(), &back, &error)) << error;
  EXPECT_EQ(back.collective, Collective::Broadcast);
  EXPECT_EQ(back.minBytes, 1024u);
  EXPECT_EQ(back.stepFactor, 2);
  EXPECT_EQ(back.root, 1);
  EXPECT_EQ(back.average, Aggregate::kMax);
  EXPECT_EQ(back.blocking, 1);
  EXPECT_TRUE(back.allDtypes);
  EXPECT_TRUE(back.compare.empty());
  const char* bad[] = {"x", "all_reduce", "--compare", "rccl"};
  EXPECT_FALSE(parseOptions(4, const_cast<char**>(bad), &o, &error));
}

// --compare's transport entries: loom again, over the transport its name selects.
TEST(PerfOptions, CompareTakesLoomsTransports) {
  const char* argv[] = {"x", "all_reduce", "--compare", "shm,tcp,ucx,ucx-tcp,ucx-sm"};
  Options o;
  std::string error;
  ASSERT_TRUE(parseOptions(4, const_cast<char**>(argv), &o, &error)) << error;
  EXPECT_EQ(o.compare.size(), 5u);
  EXPECT_EQ(loomTransportSetting("tcp"), (std::vector<std::string>{"LOOM_TRANSPORT=tcp"}));
  EXPECT_EQ(loomTransportSetting("ucx-sm"),
            (std::vector<std::string>{"LOOM_TRANSPORT=ucx", "UCX_TLS=sm"}));
  EXPECT_TRUE(loomTransportSetting("ucx-ib").empty());
  const char* bad[] = {"x", "all_reduce", "--compare", "ucx-ib"};
  EXPECT_FALSE(parseOptions(4, const_cast<char**>(bad), &o, &error));
}

// --api: loom's own C API by default, or NCCL's through libnccl.so.2 on forked ranks; what
// only loom's API has (--race, --sim), a rendezvous without -N, and --compare (whose nccl entry
// is the way to put both APIs side by side) are refused with it.
TEST(PerfOptions, ApiChoosesLoomOrNcclAndRefusesWhatNcclCannotRun) {
  const auto parse = [](std::vector<const char*> args, Options* o, std::string* error) {
    return parseCommand("all_reduce", std::move(args), o, error);
  };
  Options o;
  std::string error;
  ASSERT_TRUE(parse({"-N", "2"}, &o, &error)) << error;
  EXPECT_EQ(o.api, Api::kLoom);
  ASSERT_TRUE(parse({"--api", "nccl", "-N", "2", "-A", "ring"}, &o, &error)) << error;
  EXPECT_EQ(o.api, Api::kNccl);
  ASSERT_TRUE(parse({"--api", "loom", "--sim"}, &o, &error)) << error;
  EXPECT_EQ(o.api, Api::kLoom);
  EXPECT_FALSE(parse({"--api", "NCCL", "-N", "2"}, &o, &error));
  EXPECT_EQ(error, "bad value 'NCCL' for --api");
  EXPECT_FALSE(parse({"--api", "nccl"}, &o, &error));
  EXPECT_EQ(error.substr(0, 26), "--api nccl needs -N RANKS:");
  EXPECT_FALSE(parse({"--api", "nccl", "-N", "2", "--race", "ring,auto"}, &o, &error));
  EXPECT_EQ(error, "--race splits loom communicators: not with --api nccl");
  EXPECT_FALSE(parse({"--api", "nccl", "-N", "2", "--sim"}, &o, &error));
  EXPECT_EQ(error, "--sim predicts loom's own calls: not with --api nccl");
  EXPECT_FALSE(parse({"--api", "nccl", "-N", "2", "--compare", "mpi"}, &o, &error));
  EXPECT_EQ(error, "--compare runs loom's own API first: add nccl to its list instead of --api nccl");
  ASSERT_TRUE(parse({"-N", "2", "--compare", "nccl,mpi"}, &o, &error)) << error;
  EXPECT_EQ(o.compare, (std::vector<std::string>{"nccl", "mpi"}));
  // The peers do not take --api: the sweep's arguments leave it out.
  o.api = Api::kNccl;
  const std::vector<std::string> args = sweepArgs(o);
  EXPECT_EQ(std::find(args.begin(), args.end(), "--api"), args.end());
}

// --api nccl passes NCCL's numbers, which are not loom's (perf/nccl_header_check.cc compares
// them with nccl.h where loom's library is built).
TEST(PerfOptions, NcclNumbersOfLoomsDatatypesAndOps) {
  EXPECT_EQ(nccl::toNccl(loomFloat32), 7);
  EXPECT_EQ(nccl::toNccl(loomBfloat16), 9);
  EXPECT_EQ(nccl::toNccl(loomFloat64), 8);
  EXPECT_EQ(nccl::toNccl(loomFloat8e5m2), 11);
  EXPECT_EQ(nccl::toNccl(loomMin), 3);
  EXPECT_EQ(nccl::toNccl(loomMax), 2);
  EXPECT_EQ(nccl::toNccl(loomAvg), 4);
  EXPECT_EQ(nccl::toNccl(loomNumTypes), -1);
  EXPECT_EQ(nccl::toNccl(loomRedOp_t(loomNumOps)), -1);
  // Every datatype and op has a number of its own.
  for (int a = 0; a < loomNumTypes; ++a) {
    for (int b = a + 1; b < loomNumTypes; ++b)
      EXPECT_NE(nccl::kDataTypeOf[a], nccl::kDataTypeOf[b]) << a << " " << b;
  }
  for (int a = 0; a < loomNumOps; ++a) {
    for (int b = a + 1; b < loomNumOps; ++b)
      EXPECT_NE(nccl::kRedOpOf[a], nccl::kRedOpOf[b]) << a << " " << b;
  }
}

// -A NAME forces NAME for the sweep's collective; a setting with '=' is LOOM_ALGO's grammar,
// read back per collective for --json's "algorithm".
TEST(PerfOptions, AlgorithmSettingAndWhatItForces) {
  Options o;
  o.collective = Collective::AllGather;
  EXPECT_EQ(algorithmSetting(o), "");
  o.algorithm = "ring";
  EXPECT_EQ(algorithmSetting(o), "allgather=ring");
  o.algorithm = "allreduce=rhd,allgather=rd";
  EXPECT_EQ(algorithmSetting(o), "allreduce=rhd,allgather=rd");
  EXPECT_EQ(forcedAlgorithm(algorithmSetting(o), Collective::AllGather), "rd");
  EXPECT_EQ(forcedAlgorithm(algorithmSetting(o), Collective::AllReduce), "rhd");
  EXPECT_EQ(forcedAlgorithm(algorithmSetting(o), Collective::Broadcast), "auto");
  EXPECT_EQ(forcedAlgorithm("auto", Collective::AllReduce), "auto");
}

TEST(PerfOptions, RaceTakesTwoOrMoreDistinctEntries) {
  const auto parse = [](std::vector<const char*> args, Options* o, std::string* error) {
    return parseCommand("alltoall", std::move(args), o, error);
  };
  Options o;
  std::string error;
  ASSERT_TRUE(parse({"--race", "pairwise:2,xor,auto", "-R", "3"}, &o, &error)) << error;
  EXPECT_EQ(o.race, (std::vector<std::string>{"pairwise:2", "xor", "auto"}));
  EXPECT_EQ(o.repeats, 3);
  for (const char* list : {"ring", "ring,ring", "ring,,auto", ""}) {
    EXPECT_FALSE(parse({"--race", list}, &o, &error)) << list;
    EXPECT_EQ(error, std::string("bad value '") + list + "' for --race");
  }
  EXPECT_FALSE(parse({"--race", "ring,auto", "-A", "ring"}, &o, &error));
  EXPECT_EQ(error, "--race names the algorithms itself: not with -A or --compare");
  EXPECT_FALSE(parse({"--race", "ring,auto", "--compare", "mpi"}, &o, &error));
}

// One run's --json as --compare reads it: a row of `size` float bytes at busBw.
JsonValue comparedRun(int size, double busBw) {
  std::string error;
  return *parseJson("{\"rows\": [{\"size\": " + std::to_string(size) +
                        ", \"type\": \"float\", \"redop\": \"sum\", \"out_of_place\": "
                        "{\"busbw_gbs\": " + std::to_string(busBw) + "}}]}",
                    &error);
}

TEST(PerfCompare, TableShowsMediansRatiosAndMissingPeers) {
  const auto run = [](double busBw) { return comparedRun(1024, busBw); };
  std::vector<LibraryRuns> libs(3);
  libs[0] = {"loom", "", {run(4), run(100), run(6)}};  // median 6, whatever the outlier
  libs[1] = {"mpi", "", {run(3), run(3), run(2)}};
  libs[2] = {"gloo", "gloo: reduce_scatter: not in Gloo's collective API", {}};
  Options o;
  o.repeats = 3;
  const std::string t = formatComparison(libs, o, 4);
  EXPECT_NE(t.find("median of 3 runs"), std::string::npos) << t;
  EXPECT_NE(t.find("# gloo: gloo: reduce_scatter: not in Gloo's collective API"),
            std::string::npos) << t;
  std::string row;
  std::istringstream lines(t);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("1024") != std::string::npos) row = line;
  }
  std::istringstream f(row);
  std::vector<std::string> cells;
  for (std::string c; f >> c;) cells.push_back(c);
  EXPECT_EQ(cells, (std::vector<std::string>{"1024", "float", "sum", "6", "3", "2.00", "n/a",
                                             "n/a"}));
}

// --compare nccl: loom through its libnccl.so.2 is a column of its own, which the table says is
// loom's, not NVIDIA's.
TEST(PerfCompare, NcclColumnIsLoomThroughItsLibrary) {
  const auto run = [](double busBw) { return comparedRun(8, busBw); };
  std::vector<LibraryRuns> libs = {{"loom", "", {run(2)}}, {"nccl", "", {run(2.5)}}};
  Options o;
  std::string t = formatComparison(libs, o, 2);
  EXPECT_NE(t.find("# nccl: loom through NCCL's API, its libnccl.so.2 (loom-perf --api nccl)\n"),
            std::string::npos) << t;
  EXPECT_NE(t.find("loom/nccl"), std::string::npos) << t;
  EXPECT_NE(t.find("         2.5        0.80\n"), std::string::npos) << t;
  libs[1] = {"nccl", "loom-perf: --api nccl: cannot open loom's libnccl.so.2", {}};
  t = formatComparison(libs, o, 2);
  EXPECT_NE(t.find("# nccl: loom-perf: --api nccl: cannot open"), std::string::npos) << t;
  EXPECT_EQ(t.find("through NCCL's API"), std::string::npos) << t;
}

}  // namespace
}  // namespace loom::perf
