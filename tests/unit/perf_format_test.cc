// The units loom-perf and its peers report in (nccl-tests' conventions, toolkit/units.h), the
// table they print, and the result check.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "perf/check.h"
#include "perf/options.h"
#include "perf/output.h"
#include "perf/sweep.h"

namespace loom::perf {
namespace {

constexpr Collective kAll[] = {Collective::AllReduce,     Collective::AllGather,
                               Collective::ReduceScatter, Collective::AlltoAll,
                               Collective::Broadcast,     Collective::Reduce,
                               Collective::Gather,        Collective::Scatter,
                               Collective::SendRecv};

std::vector<std::string> fields(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string f; in >> f;) out.push_back(f);
  return out;
}

TEST(PerfUnits, BusBwFactorsMatchNcclTests) {
  for (int n = 1; n <= 64; ++n) {
    const double d = n;
    EXPECT_DOUBLE_EQ(busBwFactor(Collective::AllReduce, n), 2 * (d - 1) / d) << n;
    EXPECT_DOUBLE_EQ(busBwFactor(Collective::AllGather, n), (d - 1) / d) << n;
    EXPECT_DOUBLE_EQ(busBwFactor(Collective::ReduceScatter, n), (d - 1) / d) << n;
    EXPECT_DOUBLE_EQ(busBwFactor(Collective::AlltoAll, n), (d - 1) / d) << n;
    EXPECT_DOUBLE_EQ(busBwFactor(Collective::Gather, n), (d - 1) / d) << n;
    EXPECT_DOUBLE_EQ(busBwFactor(Collective::Scatter, n), (d - 1) / d) << n;
    EXPECT_DOUBLE_EQ(busBwFactor(Collective::Broadcast, n), 1.0) << n;
    EXPECT_DOUBLE_EQ(busBwFactor(Collective::Reduce, n), 1.0) << n;
    EXPECT_DOUBLE_EQ(busBwFactor(Collective::SendRecv, n), 1.0) << n;
  }
  EXPECT_DOUBLE_EQ(busBwFactor(Collective::AllReduce, 1), 0.0);
}

TEST(PerfUnits, AlgBwIsSizeOverTime) {
  // 1 GB in 1 s (1e6 us) is 1 GB/s; allreduce on 4 ranks moves 1.5x that on the bus.
  const Measurement m = makeMeasurement(Collective::AllReduce, 1000000000, 4, 1e6, 0);
  EXPECT_DOUBLE_EQ(m.algBw, 1.0);
  EXPECT_DOUBLE_EQ(m.busBw, 1.5);
  const Measurement a = makeMeasurement(Collective::AllGather, 268435456, 8, 1000.0, 0);
  EXPECT_DOUBLE_EQ(a.algBw, 268435456 / 1e9 / 1e-3);
  EXPECT_DOUBLE_EQ(a.busBw, a.algBw * 7 / 8);
  EXPECT_EQ(makeMeasurement(Collective::Reduce, 8, 2, 0.0, 0).algBw, 0.0);
}

TEST(PerfUnits, CountsPerCollectiveFollowNcclTests) {
  // 1 MiB of floats on 4 ranks: 262144 elements.
  const size_t size = 1 << 20, f = 4;
  CollSizes s = collSizes(Collective::AllReduce, size, f, 4);
  EXPECT_EQ(s.sendCount, 262144u);
  EXPECT_EQ(s.recvCount, 262144u);
  EXPECT_EQ(s.paramCount, 262144u);
  EXPECT_EQ(s.bytes(f), size);

  for (Collective c : {Collective::AllGather, Collective::Gather}) {
    s = collSizes(c, size, f, 4);
    EXPECT_EQ(s.sendCount, 65536u) << collectiveName(c);
    EXPECT_EQ(s.recvCount, 262144u) << collectiveName(c);
    EXPECT_EQ(s.paramCount, 65536u) << collectiveName(c);  // the count argument: per rank
    EXPECT_EQ(s.sendInPlaceOffset, 65536u) << collectiveName(c);
    EXPECT_EQ(s.recvInPlaceOffset, 0u) << collectiveName(c);
    EXPECT_EQ(s.bytes(f), size) << collectiveName(c);  // the size column: the gathered buffer
  }

  for (Collective c : {Collective::ReduceScatter, Collective::Scatter}) {
    s = collSizes(c, size, f, 4);
    EXPECT_EQ(s.sendCount, 262144u) << collectiveName(c);
    EXPECT_EQ(s.recvCount, 65536u) << collectiveName(c);
    EXPECT_EQ(s.paramCount, 65536u) << collectiveName(c);
    EXPECT_EQ(s.sendInPlaceOffset, 0u) << collectiveName(c);
    EXPECT_EQ(s.recvInPlaceOffset, 65536u) << collectiveName(c);
    EXPECT_EQ(s.bytes(f), size) << collectiveName(c);
  }

  s = collSizes(Collective::AlltoAll, size, f, 4);
  EXPECT_EQ(s.sendCount, 262144u);
  EXPECT_EQ(s.recvCount, 262144u);
  EXPECT_EQ(s.paramCount, 65536u);
  EXPECT_EQ(s.bytes(f), size);

  for (Collective c : {Collective::Broadcast, Collective::Reduce, Collective::SendRecv}) {
    s = collSizes(c, size, f, 4);
    EXPECT_EQ(s.paramCount, 262144u) << collectiveName(c);
    EXPECT_EQ(s.bytes(f), size) << collectiveName(c);
  }
}

// nccl-tests' gather and scatter: each rank's block rounds down to whole 16 bytes.
TEST(PerfUnits, GatherAndScatterBlocksRoundDownToSixteenBytes) {
  for (Collective c : {Collective::Gather, Collective::Scatter}) {
    // 1000 B on 3 ranks: 333 B each, 320 B in whole 16 bytes: 80 floats, 320 bytes, 40 doubles.
    EXPECT_EQ(collSizes(c, 1000, 4, 3).paramCount, 80u) << collectiveName(c);
    EXPECT_EQ(collSizes(c, 1000, 1, 3).paramCount, 320u) << collectiveName(c);
    EXPECT_EQ(collSizes(c, 1000, 8, 3).paramCount, 40u) << collectiveName(c);
    EXPECT_EQ(collSizes(c, 1000, 4, 3).bytes(4), 960u) << collectiveName(c);
    EXPECT_EQ(collSizes(c, 15, 1, 1).paramCount, 0u) << collectiveName(c);
  }
  EXPECT_EQ(collSizes(Collective::AllGather, 1000, 4, 3).paramCount, 83u);  // not rounded
}

TEST(PerfUnits, CountsRoundDownToWholeElementsPerRank) {
  // 1000 B of floats = 250 elements; on 3 ranks, 83 each (996 B in all).
  CollSizes s = collSizes(Collective::AllGather, 1000, 4, 3);
  EXPECT_EQ(s.paramCount, 83u);
  EXPECT_EQ(s.bytes(4), 996u);
  s = collSizes(Collective::AllReduce, 1001, 4, 3);
  EXPECT_EQ(s.paramCount, 250u);
  EXPECT_EQ(s.bytes(4), 1000u);
  // Fewer elements than ranks: an empty call, as in nccl-tests.
  s = collSizes(Collective::ReduceScatter, 8, 4, 4);
  EXPECT_EQ(s.paramCount, 0u);
  EXPECT_EQ(s.bytes(4), 0u);
}

TEST(PerfUnits, ParsesSizesWithSuffixes) {
  EXPECT_EQ(parseSize("8"), 8u);
  EXPECT_EQ(parseSize("0"), 0u);
  EXPECT_EQ(parseSize("1K"), 1024u);
  EXPECT_EQ(parseSize("64k"), 65536u);
  EXPECT_EQ(parseSize("256M"), 268435456u);
  EXPECT_EQ(parseSize("1G"), 1073741824u);
  EXPECT_EQ(parseSize("2g"), 2147483648u);
  EXPECT_EQ(parseSize("16KB"), 16384u);
  for (const char* bad :
       {"", "K", "1.5M", "12X", "-8", "8 ", "1MM", "99999999999999999999", "99999999999999G"}) {
    EXPECT_FALSE(parseSize(bad).has_value()) << bad;
  }
}

TEST(PerfUnits, SweepsLikeNcclTests) {
  const std::vector<size_t> doubling = sizeSweep(8, 256u << 20, 2, 0);
  ASSERT_EQ(doubling.size(), 26u);
  EXPECT_EQ(doubling.front(), 8u);
  EXPECT_EQ(doubling.back(), 256u << 20);
  EXPECT_EQ(sizeSweep(8, 100, 4, 0), (std::vector<size_t>{8, 32}));
  EXPECT_EQ(sizeSweep(1 << 20, 3 << 20, 1, 1 << 20),
            (std::vector<size_t>{1 << 20, 2 << 20, 3 << 20}));
  EXPECT_EQ(sizeSweep(64, 64, 1, 0), (std::vector<size_t>{64}));
  EXPECT_EQ(sizeSweep(0, 4, 2, 0), (std::vector<size_t>{0, 1, 2, 4}));
}

TEST(PerfUnits, LargeSizesRunFewerIterations) {
  EXPECT_EQ(itersForSize(20, 8, 512u << 20), 20);
  EXPECT_EQ(itersForSize(20, 256u << 20, 512u << 20), 2);
  EXPECT_EQ(itersForSize(20, 1u << 30, 512u << 20), 1);  // never 0
  EXPECT_EQ(itersForSize(20, 1u << 30, 0), 20);          // no cap
  EXPECT_EQ(itersForSize(0, 1u << 30, 512u << 20), 0);   // no warm-up stays none
}

TEST(PerfOptions, ParsesTheIssueCommandLine) {
  const char* argv[] = {"loom-perf", "all_reduce", "-b", "8",  "-e", "256M", "-f",
                        "4",         "-n",         "50", "-w", "10", "-N",   "4"};
  Options o;
  std::string error;
  ASSERT_TRUE(parseOptions(14, const_cast<char**>(argv), &o, &error)) << error;
  EXPECT_EQ(o.collective, Collective::AllReduce);
  EXPECT_EQ(o.minBytes, 8u);
  EXPECT_EQ(o.maxBytes, 256u << 20);
  EXPECT_EQ(o.stepFactor, 4);
  EXPECT_EQ(o.iters, 50);
  EXPECT_EQ(o.warmup, 10);
  EXPECT_EQ(o.nranks, 4);
  EXPECT_TRUE(o.check);
  EXPECT_EQ(o.op, loomSum);
  EXPECT_EQ(o.dtype, loomFloat32);
}

TEST(PerfOptions, ParsesEveryFlagAndLongForms) {
  const char* argv[] = {"x",
                        "broadcast",
                        "--minbytes",
                        "1K",
                        "--maxbytes",
                        "1M",
                        "-i",
                        "4K",
                        "-c",
                        "0",
                        "-o",
                        "max",
                        "-d",
                        "bfloat16",
                        "-r",
                        "3",
                        "-A",
                        "ring",
                        "--bytes_per_size",
                        "0",
                        "--bind",
                        "core"};
  Options o;
  std::string error;
  ASSERT_TRUE(parseOptions(22, const_cast<char**>(argv), &o, &error)) << error;
  EXPECT_EQ(o.collective, Collective::Broadcast);
  EXPECT_EQ(o.minBytes, 1024u);
  EXPECT_EQ(o.maxBytes, 1u << 20);
  EXPECT_EQ(o.stepBytes, 4096u);
  EXPECT_FALSE(o.check);
  EXPECT_EQ(o.op, loomMax);
  EXPECT_EQ(o.dtype, loomBfloat16);
  EXPECT_EQ(o.root, 3);
  EXPECT_EQ(o.algorithm, "ring");
  EXPECT_EQ(o.bytesPerSize, 0u);
  EXPECT_TRUE(o.bindCores);
}

TEST(PerfOptions, RejectsBadCommandLines) {
  const std::vector<std::vector<const char*>> bad = {
      {"x"},
      {"x", "-b", "8"},
      {"x", "allreduce_typo"},
      {"x", "all_reduce", "-b", "8X"},
      {"x", "all_reduce", "-b", "1M", "-e", "1K"},
      {"x", "all_reduce", "-d", "float128"},
      {"x", "all_reduce", "-o", "xor"},
      {"x", "all_reduce", "-n", "0"},
      {"x", "all_reduce", "-c", "2"},
      {"x", "all_reduce", "-q"},
      {"x", "all_reduce", "stray"},
      {"x", "all_reduce", "-b", "1K", "-e", "2K", "-i", "0"},
      {"x", "all_reduce", "--bind", "socket"},
  };
  for (const auto& args : bad) {
    Options o;
    std::string error;
    EXPECT_FALSE(
        parseOptions(static_cast<int>(args.size()), const_cast<char**>(args.data()), &o, &error));
    EXPECT_FALSE(error.empty()) << args.back();
  }
}

TEST(PerfOptions, NamesRoundTrip) {
  for (Collective c : kAll) EXPECT_EQ(parseCollective(collectiveName(c)), c);
  for (int d = 0; d < loomNumTypes; ++d) {
    const auto t = static_cast<loomDataType_t>(d);
    EXPECT_EQ(parseDtype(dtypeName(t)), t) << dtypeName(t);
    EXPECT_GT(dtypeSize(t), 0u);
  }
  for (int op = 0; op < loomNumOps; ++op) {
    const auto o = static_cast<loomRedOp_t>(op);
    EXPECT_EQ(parseOp(opName(o)), o);
  }
}

TEST(PerfTable, RowHasNcclTestsColumns) {
  const CollSizes s = collSizes(Collective::AllReduce, 1 << 20, 4, 4);
  const Measurement oop = makeMeasurement(Collective::AllReduce, s.bytes(4), 4, 123.456, 0);
  const Measurement ip = makeMeasurement(Collective::AllReduce, s.bytes(4), 4, 12345.6, 3);
  const std::string row = formatRow(Collective::AllReduce, s, loomFloat32, loomSum, 0, oop, ip);
  const std::vector<std::string> f = fields(row);
  ASSERT_EQ(f.size(), 13u) << row;
  EXPECT_EQ(f[0], "1048576");  // size (B)
  EXPECT_EQ(f[1], "262144");   // count (elements)
  EXPECT_EQ(f[2], "float");
  EXPECT_EQ(f[3], "sum");
  EXPECT_EQ(f[4], "-1");     // allreduce has no root
  EXPECT_EQ(f[5], "123.5");  // time (us), fewer decimals past 100
  EXPECT_EQ(f[6], "8.49");   // algbw = 1048576 B / 123.456 us
  EXPECT_EQ(f[7], "12.74");  // busbw = algbw * 2 * 3 / 4
  EXPECT_EQ(f[8], "0");
  EXPECT_EQ(f[9], "12346");  // none past 10000
  EXPECT_EQ(f[12], "3");
  EXPECT_EQ(row.back(), '\n');
  // Same widths as nccl-tests, so the columns line up with the header.
  EXPECT_EQ(
      row.size(),
      std::string(12 + 2 + 12 + 2 + 8 + 2 + 6 + 2 + 6 + 2 * (2 + 7 + 2 + 6 + 2 + 6 + 2 + 5), 'x')
              .size() +
          1);
}

TEST(PerfTable, RowForRootedAndUncheckedCollectives) {
  const CollSizes s = collSizes(Collective::Broadcast, 64, 8, 2);
  const Measurement m = makeMeasurement(Collective::Broadcast, 64, 2, 5.0, -1);
  const std::vector<std::string> f =
      fields(formatRow(Collective::Broadcast, s, loomFloat64, loomSum, 1, m, m));
  ASSERT_EQ(f.size(), 13u);
  EXPECT_EQ(f[1], "8");
  EXPECT_EQ(f[2], "double");
  EXPECT_EQ(f[3], "none");  // no reduction
  EXPECT_EQ(f[4], "1");     // the root
  EXPECT_EQ(f[5], "5.00");
  EXPECT_EQ(f[8], "N/A");  // -c 0
}

TEST(PerfTable, SimulatedColumnsFollowTheMeasuredOnes) {
  const CollSizes s = collSizes(Collective::AllReduce, 1 << 20, 4, 4);
  const Measurement m = makeMeasurement(Collective::AllReduce, s.bytes(4), 4, 200.0, 0);
  Prediction p{makeMeasurement(Collective::AllReduce, s.bytes(4), 4, 160.0, -1), "ring"};
  std::vector<std::string> f =
      fields(formatRow(Collective::AllReduce, s, loomFloat32, loomSum, 0, m, m, &p));
  ASSERT_EQ(f.size(), 16u);
  EXPECT_EQ(f[13], "160.0");  // simulated time (us)
  EXPECT_EQ(f[14], "9.83");   // its busbw: 1048576 B / 160 us * 1.5
  EXPECT_EQ(f[15], "ring");   // the algorithm simulated
  const Prediction none{{}, "no prediction: why"};
  f = fields(formatRow(Collective::AllReduce, s, loomFloat32, loomSum, 0, m, m, &none));
  ASSERT_EQ(f.size(), 18u);
  EXPECT_EQ(f[13], "-");
  EXPECT_EQ(f[15], "no");

  Options o;
  o.sim = true;
  const std::string header = formatHeader("loom-perf", o, 4, "Backend: test", {});
  std::string columns;
  std::istringstream lines(header);
  for (std::string line; std::getline(lines, line);)
    if (line.find("redop") != std::string::npos) columns = line;
  const std::vector<std::string> names = fields(columns);
  ASSERT_EQ(names.size(), 17u) << columns;
  EXPECT_EQ(names[14], "time");
  EXPECT_EQ(names[15], "busbw");
  EXPECT_EQ(names[16], "algorithm");
  EXPECT_NE(header.find("simulated"), std::string::npos);
}

TEST(PerfTable, HeaderNamesRanksAndColumnsAndFooterAverages) {
  Options o;
  o.minBytes = 8;
  o.maxBytes = 256u << 20;
  o.stepFactor = 2;
  const std::string header = formatHeader("loom-perf", o, 2, "Backend: test",
                                          {rankLine(0, 100, "hostA"), rankLine(1, 101, "hostB")});
  EXPECT_NE(header.find("loom-perf all_reduce: nranks 2 minBytes 8 maxBytes 268435456 step: "
                        "2(factor)"),
            std::string::npos)
      << header;
  EXPECT_NE(header.find("#  Rank  0 Pid    100 on      hostA\n"), std::string::npos) << header;
  EXPECT_NE(header.find("#  Rank  1 Pid    101 on      hostB\n"), std::string::npos);
  EXPECT_NE(header.find("out-of-place"), std::string::npos);
  EXPECT_NE(header.find("in-place"), std::string::npos);
  // The column line: the same 13 names a row has values for.
  std::string columns;
  std::istringstream lines(header);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("redop") != std::string::npos) columns = line;
  }
  EXPECT_EQ(fields(columns), (std::vector<std::string>{"#", "size", "count", "type", "redop",
                                                       "root", "time", "algbw", "busbw", "#wrong",
                                                       "time", "algbw", "busbw", "#wrong"}));
  EXPECT_EQ(formatFooter(0, 1.5, true),
            "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1.5 \n#\n");
  EXPECT_NE(formatFooter(2, 1.5, true).find("2 FAILED"), std::string::npos);
}

// ---- The check -------------------------------------------------------------------------

// Every collective, dtype, op and several rank counts: the expected output passes, and one
// corrupted element is exactly one #wrong.
TEST(PerfCheck, CatchesACorruptedElement) {
  for (Collective c : kAll) {
    for (int d = 0; d < loomNumTypes; ++d) {
      const auto dtype = static_cast<loomDataType_t>(d);
      for (int op = 0; op < loomNumOps; ++op) {
        if (!collectiveHasOp(c) && op > 0) break;
        const auto redop = static_cast<loomRedOp_t>(op);
        for (int n : {1, 2, 3, 8, 17}) {
          const int root = n - 1;
          const size_t elem = dtypeSize(dtype);
          const CollSizes s = collSizes(c, 997 * elem * static_cast<size_t>(n), elem, n);
          for (int rank : {0, n - 1}) {
            SCOPED_TRACE(std::string(collectiveName(c)) + " " + dtypeName(dtype) + " " +
                         opName(redop) + " n=" + std::to_string(n) +
                         " rank=" + std::to_string(rank));
            std::vector<unsigned char> out(s.recvCount * elem);
            writeExpected(c, dtype, redop, n, rank, root, s, out.data());
            EXPECT_EQ(countWrong(c, dtype, redop, n, rank, root, s, out.data()), 0u);
            const bool hasOutput = rankHasOutput(c, rank, root);
            // 0xff is NaN or a value the inputs never produce.
            const size_t at = s.recvCount / 2 * elem;
            std::memset(&out[at], 0xff, elem);
            EXPECT_EQ(countWrong(c, dtype, redop, n, rank, root, s, out.data()),
                      hasOutput ? 1u : 0u);
            std::memset(out.data(), 0xff, out.size());
            EXPECT_EQ(countWrong(c, dtype, redop, n, rank, root, s, out.data()),
                      hasOutput ? s.recvCount : 0u);
          }
        }
      }
    }
  }
}

// The inputs really produce the expected output: run each collective naively over the
// filled inputs, combining the ranks in both orders.
template <typename T>
void reduceInto(loomRedOp_t op, T& acc, T v) {
  switch (op) {
    case loomSum:
    case loomAvg:
      acc = static_cast<T>(acc + v);
      break;
    case loomProd:
      acc = static_cast<T>(acc * v);
      break;
    case loomMin:
      acc = v < acc ? v : acc;
      break;
    case loomMax:
      acc = v > acc ? v : acc;
      break;
    default:
      break;
  }
}

template <typename T>
void checkAgainstReference(loomDataType_t dtype) {
  for (Collective c : kAll) {
    for (int op = 0; op < loomNumOps; ++op) {
      if (!collectiveHasOp(c) && op > 0) break;
      const auto redop = static_cast<loomRedOp_t>(op);
      for (int n : {1, 2, 3, 4, 7}) {
        for (bool reversed : {false, true}) {
          SCOPED_TRACE(std::string(collectiveName(c)) + " " + dtypeName(dtype) + " " +
                       opName(redop) + " n=" + std::to_string(n));
          const int root = n / 2;
          const CollSizes s = collSizes(c, 1000 * sizeof(T) * static_cast<size_t>(n), sizeof(T), n);
          const size_t cnt = s.paramCount;
          std::vector<std::vector<T>> in(static_cast<size_t>(n), std::vector<T>(s.sendCount));
          for (int r = 0; r < n; ++r) fillInput(c, dtype, redop, n, r, root, s, in[r].data());
          auto reduced = [&](size_t g) {
            T acc = in[reversed ? n - 1 : 0][g];
            for (int k = 1; k < n; ++k) reduceInto(redop, acc, in[reversed ? n - 1 - k : k][g]);
            if (redop == loomAvg) acc = static_cast<T>(acc / n);
            return acc;
          };
          for (int r = 0; r < n; ++r) {
            std::vector<T> out(s.recvCount);
            for (size_t i = 0; i < s.recvCount; ++i) {
              const size_t block = cnt ? i / cnt : 0, off = cnt ? i % cnt : 0;
              switch (c) {
                case Collective::AllReduce:
                case Collective::Reduce:
                  out[i] = reduced(i);
                  break;
                case Collective::ReduceScatter:
                  out[i] = reduced(r * cnt + i);
                  break;
                case Collective::AllGather:
                  out[i] = in[block][off];
                  break;
                case Collective::AlltoAll:
                case Collective::AlltoAllv:  // not in kAll
                  out[i] = in[block][r * cnt + off];
                  break;
                case Collective::Broadcast:
                  out[i] = in[root][i];
                  break;
                case Collective::Gather:  // the root's; the check ignores the others'
                  out[i] = in[block][off];
                  break;
                case Collective::Scatter:
                  out[i] = in[root][r * cnt + i];
                  break;
                case Collective::SendRecv:
                  out[i] = in[(r + n - 1) % n][i];
                  break;
              }
            }
            EXPECT_EQ(countWrong(c, dtype, redop, n, r, root, s, out.data()), 0u) << "rank " << r;
          }
        }
      }
    }
  }
}

TEST(PerfCheck, InputsGiveTheExpectedResultsInAnyOrder) {
  checkAgainstReference<float>(loomFloat32);
  checkAgainstReference<double>(loomFloat64);
  checkAgainstReference<int8_t>(loomInt8);
  checkAgainstReference<uint8_t>(loomUint8);
  checkAgainstReference<int32_t>(loomInt32);
  checkAgainstReference<uint64_t>(loomUint64);
}

TEST(PerfCheck, EncodesSmallFloatsExactly) {
  // The moved pattern on one rank holds 0, 1, 2, 3 at elements 0..3 in every dtype.
  struct Case {
    loomDataType_t dtype;
    std::vector<unsigned> bits;  // 1.0, 2.0, 3.0
  };
  const Case cases[] = {
      {loomFloat16, {0x3C00, 0x4000, 0x4200}},
      {loomBfloat16, {0x3F80, 0x4000, 0x4040}},
      {loomFloat8e4m3, {0x38, 0x40, 0x44}},
      {loomFloat8e5m2, {0x3C, 0x40, 0x42}},
  };
  for (const Case& k : cases) {
    const size_t elem = dtypeSize(k.dtype);
    const CollSizes s = collSizes(Collective::Broadcast, 8 * elem, elem, 1);
    std::vector<unsigned char> buf(s.sendCount * elem);
    fillInput(Collective::Broadcast, k.dtype, loomSum, 1, 0, 0, s, buf.data());
    for (size_t i = 0; i < 3; ++i) {
      unsigned got = 0;
      std::memcpy(&got, &buf[(i + 1) * elem], elem);
      EXPECT_EQ(got, k.bits[i]) << dtypeName(k.dtype) << " value " << i + 1;
    }
  }
}

}  // namespace
}  // namespace loom::perf
