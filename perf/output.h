// What loom-perf and its peers print and write: nccl-tests' table (header, rows, footer) and the
// machine-readable --json and --csv files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "perf/options.h"

namespace loom::perf {

/** One placement's measurement (time already the max over ranks, wrong the sum). */
struct Measurement {
  double timeUs = 0;
  double algBw = 0;  // GB/s (1e9 bytes)
  double busBw = 0;
  int64_t wrong = -1;  // -1: not checked ("N/A")
};
Measurement makeMeasurement(Collective c, size_t bytes, int nranks, double timeUs, int64_t wrong);

/** "# loom-perf all_reduce: nranks 4 minBytes ..." plus one line per rank and the column
 *  headers; `ranks` lines come from rankLine(). */
std::string formatHeader(const std::string& program, const Options& options, int nranks,
                         const std::string& backend, const std::vector<std::string>& ranks);
std::string rankLine(int rank, int pid, const char* host);
/** --sim: what the backend's model predicts for one call (out of place). */
struct Prediction {
  Measurement time;  // timeUs 0 when there is no prediction
  // The algorithm simulated (the forced one, or the library's choice), or why there is no
  // prediction.
  std::string algorithm;
};

/** The --sim columns come after the measured ones when `simulated` is given. */
std::string formatRow(Collective c, const CollSizes& sizes, loomDataType_t dtype, loomRedOp_t op,
                      int root, const Measurement& outOfPlace, const Measurement& inPlace,
                      const Prediction* simulated = nullptr);
std::string formatFooter(int64_t wrongTotal, double avgBusBw, bool checked);

// ---- Machine-readable results (--json, --csv) -------------------------------------------

/** One line of the table, as --json and --csv record it. */
struct ResultRow {
  size_t bytes = 0;
  size_t count = 0;
  loomDataType_t dtype = loomFloat32;
  loomRedOp_t op = loomSum;
  int root = -1;
  std::string algorithm;  // the forced algorithm, or "auto" when the library picks
  std::string ran;        // what the library says it ran (Backend::lastAlgorithm), or ""
  Measurement outOfPlace, inPlace;
  std::vector<double> roundsUs;         // with --race: the out-of-place time of each round, in the
                                        // order they ran (JSON only; outOfPlace has their median)
  std::optional<Prediction> simulated;  // with --sim (JSON only)
};

/** What a run records besides its rows. */
struct RunMetadata {
  std::string program;  // "loom-perf"
  std::string library;  // "loom", "mpi", "gloo"
  std::string version;
  std::string gitCommit;
  std::string backend;  // Backend::describe()
  Collective collective = Collective::AllReduce;
  int ranks = 0;
  int hosts = 0;
  std::vector<std::pair<std::string, std::string>> env;  // LOOM_* variables that are set
  std::string race;  // --race: the run's name, the same in every entry's file ("" otherwise)
};

/** The LOOM_* variables of this process's environment, sorted by name. */
std::vector<std::pair<std::string, std::string>> loomEnvironment();
std::string formatJson(const RunMetadata& meta, const Options& options,
                       const std::vector<ResultRow>& rows, int64_t wrongTotal, double avgBusBw);
std::string formatCsv(const RunMetadata& meta, const std::vector<ResultRow>& rows);

/** "X.Y.Z" of a version code X*10000 + Y*100 + Z: loom's, and NCCL's from 2.9 on (22809 is
 *  2.28.9). */
std::string versionText(int code);

/** Writes text to path; false, after saying so on stderr as `program`, when it cannot. */
bool writeTextFile(const std::string& path, const std::string& text, const std::string& program);

}  // namespace loom::perf
