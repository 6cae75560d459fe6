// loom-perf --compare mpi,gloo,nccl: the same sweep, on the same number of ranks, run by loom
// and by the peer baselines, merged into one table of bus bandwidth with loom's ratio to each
// peer; nccl is loom again, called through NCCL's API on its libnccl.so.2 (--api nccl), and
// shm, tcp, ucx, ucx-tcp, ucx-sm are loom again over that transport (loomTransportSetting), so
// `LOOM_TRANSPORT=ucx loom-perf ... --compare shm,tcp` sets UCX beside loom's own transports.
//
// Each library runs as its own program (loom-perf -N, mpirun loom-mpi-perf, loom-gloo-perf -N,
// loom-perf -N --api nccl) writing --json to a temporary file; -R K repeats the round K times,
// the libraries taking turns so that a noisy spell of the machine hits them alike, and the
// table shows medians.
// --json FILE gathers every run's document into FILE.
#pragma once

#include <string>
#include <vector>

#include "perf/options.h"
#include "perf/perf_common.h"

namespace loom::perf {

/** One library's runs, as read back from its --json files. */
struct LibraryRuns {
  std::string name;         // "loom", "mpi", "gloo", "nccl", "shm", "tcp", "ucx"...
  std::string unavailable;  // why there are no runs: not built, the collective is missing...
  std::vector<JsonValue> runs;
};

/** Median over runs of each row's out-of-place busbw, keyed and ordered as the first library's
 *  rows ("size type redop"); libraries[0] is loom, the rest are the peers. */
std::string formatComparison(const std::vector<LibraryRuns>& libraries, const Options& options,
                             int nranks);

/** --compare --json FILE's document: {"schema": "loom-perf-set/1", "runs": [...]}, each run
 *  one of the documents (loom-perf/1, as --json writes for a single run) in the given order. */
std::string formatRunSet(const std::vector<std::string>& documents);

/** Runs the comparison: selfPath is this loom-perf binary, next to which the peers live.
 *  With --json FILE, FILE is one document holding every run of every library (formatRunSet). */
int runComparison(const Options& options, const std::string& selfPath);

}  // namespace loom::perf
