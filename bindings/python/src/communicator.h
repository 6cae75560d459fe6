// loom.Communicator: a loomComm_t with its rank and size, the options it was made with (which
// its split and shrink children inherit), and the calls on it, each run with the GIL released.
#pragma once

#include <pybind11/pybind11.h>

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

#include "bindings/python/src/buffers.h"
#include "bindings/python/src/errors.h"
#include "loom/loom.h"

namespace loompy {

// loomConfig_t's fields as the Python arguments give them.
struct Options {
  int timeoutMs = -1;  // -1: LOOM_TIMEOUT_MS
  std::optional<std::string> algorithms, transport;
  loomConfig_t config() const;  // points into this
};
// timeout: None, seconds or a datetime.timedelta; algorithms, transport: None or a str.
Options readOptions(pybind11::handle timeout, pybind11::handle algorithms,
                    pybind11::handle transport);

// What a communicator and its premul_sum ops share: the handle is null once it is destroyed or
// aborted. Read and changed with the GIL held.
struct CommState {
  loomComm_t handle = nullptr;
  int rank = 0;
  int size = 0;
  int inFlight = 0;  // calls running with the GIL released
  Options options;
};

// A reduction: one of loom's ops, or an op of Communicator.premul_sum.
struct ReduceOp {
  loomRedOp_t op = loomSum;
  int premulDtype = -1;  // the datatype a premul_sum op was made for; -1: a built-in op
};

// An op of Communicator.premul_sum: valid on its communicator, with its datatype, until
// destroyed (or its communicator is).
struct PreMulSum {
  std::shared_ptr<CommState> comm;
  loomRedOp_t op = loomSum;
  loomDataType_t dtype = loomFloat32;
  bool destroyed = false;
  void destroy();
  ~PreMulSum();
};

class Communicator {
 public:
  // Takes the handle over; it is destroyed with this object unless destroyed or aborted first.
  Communicator(loomComm_t handle, Options options);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const std::shared_ptr<CommState>& state() const { return state_; }
  // The live handle, or loomInvalidUsage naming fn when it was destroyed.
  loomComm_t live(const char* fn) const;
  // op as a ReduceOp of this communicator (a loom.RedOp or one of its premul_sum ops).
  ReduceOp reduceOp(const char* fn, pybind11::handle op) const;
  // Runs call(handle) with the GIL released and raises loom's error if it fails. Inside a
  // group, where loom reads the buffers at the group's end, they stay exported until then.
  template <typename Call>
  void run(const char* fn, std::initializer_list<const Buffer*> buffers, Call&& call);

  void destroy();
  void abort();

 private:
  // Frees the communicator with end (loomCommDestroy or loomCommAbort), once.
  void end(loomResult_t (*end)(loomComm_t));

  std::shared_ptr<CommState> state_;
};

// Groups (loomGroupStart/End) of the calling thread.
void groupStart();
void groupEnd();
bool inGroup();
// Keeps what exports these buffers until the calling thread's group ends.
void holdUntilGroupEnd(std::initializer_list<const Buffer*> buffers);

template <typename Call>
void Communicator::run(const char* fn, std::initializer_list<const Buffer*> buffers,
                       Call&& call) {
  loomComm_t handle = live(fn);
  ++state_->inFlight;
  loomResult_t rc = released([&] { return call(handle); });
  --state_->inFlight;
  check(rc);
  if (inGroup()) holdUntilGroupEnd(buffers);
}

// Registers UniqueId, Communicator (with its collectives: collectives.cc), PreMulSum, group.
void bindCommunicator(pybind11::module_& m);
void bindCollectives(pybind11::class_<Communicator>& cls);

}  // namespace loompy
