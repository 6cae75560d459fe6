// The flight recorder (LOOM_FLIGHT_RECORDER): a communicator's last calls, kept in a ring of
// fixed entries, and written as JSON when a call fails, when the application aborts, when the
// process dies of a fatal signal, on SIGUSR1 where asked, or on demand (loomCommDumpTrace).
// tools/loom-trace merges the dumps of all ranks (docs/RELIABILITY.md, "The flight recorder").
//
// Recording costs a call two clock reads and a few stores: no allocation, no lock. Entries
// are written by the thread running the call and read by a dump from any thread or a signal
// handler, so their fields are relaxed atomics (plain moves on x86): a dump taken while a call
// runs may show that call's entry half updated, never a torn word. Writing a dump is
// async-signal-safe (no allocation, no lock, only open/write/close).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "loom/loom.h"

namespace loom {

// When a communicator writes its dump by itself (LOOM_FLIGHT_RECORDER_DUMP).
enum DumpWhen : unsigned {
  kDumpOnError = 1,   // a call fails: timeout, dead peer, mismatch (the first failure)
  kDumpOnAbort = 2,   // loomCommAbort
  kDumpOnFatal = 4,   // SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT
  kDumpOnUsr1 = 8,    // SIGUSR1: every live communicator of the process
};

struct FlightRecorderOptions {
  uint32_t capacity = 0;  // LOOM_FLIGHT_RECORDER: entries kept; 0 records nothing
  unsigned dumpWhen = 0;  // DumpWhen bits
  std::string dir;        // LOOM_FLIGHT_RECORDER_DIR
};

class FlightRecorder {
 public:
  enum class State : uint8_t { Queued, Running, Done, Failed };

  FlightRecorder();
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Sets the recorder up for this rank of the communicator commHash (its dump's file name:
  // loom-trace-<commHash>-rank<rank>.json in options.dir), and installs the signal handlers
  // options.dumpWhen asks for (once per process).
  void configure(const FlightRecorderOptions& options, uint64_t commHash, int rank, int nranks);
  bool enabled() const { return capacity_ != 0; }

  // Opens an entry for a call and returns its number (0 when disabled). A collective takes the
  // next collective number, which every rank of the communicator gives the same call; a group
  // of sends and receives (collective "sendrecv": count its operations, bytes their sum) does
  // not. `collective` must be a string with static storage.
  uint64_t open(const char* collective, bool isCollective, uint64_t count, uint64_t bytes,
                loomDataType_t dtype, loomRedOp_t op, int root, State state);
  // The call's algorithm (a static name) and lanes, once chosen.
  void setAlgorithm(uint64_t call, const char* algorithm, int lanes);
  void setState(uint64_t call, State state);
  // Closes the call's entry: done or failed.
  void close(uint64_t call, bool ok);
  // The communicator's first failure, kept for the dump (truncated).
  void noteFailure(const std::string& message);

  // Writes the dump: to path, or where null or empty to the default file. reason says why
  // ("error", "abort", "request", "signal 11"...). *written: the file, where not null.
  // Async-signal-safe when path is null and written is null.
  loomResult_t dump(const char* reason, const char* path, std::string* written) const;
  bool dumpsOn(DumpWhen when) const { return (dumpWhen_ & when) != 0; }
  const char* defaultPath() const { return path_; }

 private:
  struct Entry;
  Entry* entryOf(uint64_t call) const;

  uint32_t capacity_ = 0;
  unsigned dumpWhen_ = 0;
  int rank_ = 0, nranks_ = 0;
  uint64_t commHash_ = 0;
  std::unique_ptr<Entry[]> entries_;
  std::atomic<uint64_t> calls_{0};  // entries opened so far
  uint64_t collectives_ = 0;        // collective numbers given so far
  // The steady clock's and the real clock's readings at configure, to date the entries.
  uint64_t steadyAtStartNs_ = 0, realAtStartNs_ = 0;
  char path_[512] = {};
  char failure_[512] = {};
  std::atomic<uint64_t> failedCall_{0};
};

// Parses LOOM_FLIGHT_RECORDER_DUMP ("error,abort,fatal", "usr1", "none"...) into DumpWhen
// bits; a word it does not know is an error that names it.
loomResult_t parseDumpWhen(const std::string& text, unsigned* out, std::string* error);

}  // namespace loom
