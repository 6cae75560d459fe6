// The UCX transport's entry points in a build without UCX (CMake found no `pkg-config ucx`):
// they say so, and LOOM_TRANSPORT=ucx fails at communicator creation with that message.
#include "transports/ucx/ucx_transport.h"

namespace loom::transports::ucx {

namespace {
constexpr const char* kAbsent =
    "this loom was built without UCX (install libucx-dev and build again)";
}

bool ucxBuilt() { return false; }

UcxDescription describeUcx() {
  UcxDescription d;
  d.error = kAbsent;
  return d;
}

Status createUcxTransport(const CommContext*, const UcxOptions&, std::unique_ptr<Transport>*) {
  return errorf(loomInvalidUsage, "LOOM_TRANSPORT=ucx: %s", kAbsent);
}

std::string ucxAddress(const Transport&) { return std::string(); }

}  // namespace loom::transports::ucx
