// ncclConfig_t read as NCCL reads it, for callers built against any NCCL header version.
//
// Of its fields loom uses `blocking` (loomConfig_t.blocking) and checks the values of the
// others as NCCL does, then ignores them:
//   cgaClusterSize, minCTAs, maxCTAs, nvlsCTAs, CTAPolicy, nChannelsPerNetPeer,
//   nvlinkCentricSched   shape GPU kernels; loom's calls run on the host, with no CTAs;
//   netName              names one of NCCL's transports ("IB", "Socket"); loom picks its own
//                        (LOOM_TRANSPORT);
//   splitShare, shrinkShare  let a child share its parent's GPU resources; loom's have none
//                        to share;
//   trafficClass         an InfiniBand/RoCE service level; loom's TCP sets none;
//   commName             a label in NCCL's logs and profiler; loom's log names ranks;
//   collnetEnable        in-network reduction (SHARP); loom has none.
#include <climits>
#include <cstring>

#include "bindings/nccl/shim.h"

namespace loom::nccl {
namespace {

// The NCCL version that added each field after the first ones (size, magic, version).
struct Added {
  unsigned version;
  size_t offset, bytes;
};
#define LOOM_NCCL_FIELD(major, minor, field) \
  { NCCL_VERSION(major, minor, 0), offsetof(ncclConfig_t, field), sizeof(ncclConfig_t::field) }
constexpr Added kAdded[] = {
    LOOM_NCCL_FIELD(2, 14, blocking),
    LOOM_NCCL_FIELD(2, 17, cgaClusterSize),
    LOOM_NCCL_FIELD(2, 17, minCTAs),
    LOOM_NCCL_FIELD(2, 17, maxCTAs),
    LOOM_NCCL_FIELD(2, 17, netName),
    LOOM_NCCL_FIELD(2, 25, trafficClass),
    LOOM_NCCL_FIELD(2, 27, collnetEnable),
    LOOM_NCCL_FIELD(2, 27, CTAPolicy),
    LOOM_NCCL_FIELD(2, 27, shrinkShare),
    LOOM_NCCL_FIELD(2, 27, nvlsCTAs),
    LOOM_NCCL_FIELD(2, 28, nChannelsPerNetPeer),
    LOOM_NCCL_FIELD(2, 28, nvlinkCentricSched),
};
#undef LOOM_NCCL_FIELD

// Fields added after the caller's header version: the caller did not set them, so they keep
// their defaults whatever its bytes hold.
void resetNewerFields(unsigned version, ncclConfig_t* c) {
  const ncclConfig_t d = NCCL_CONFIG_INITIALIZER;
  for (const Added& a : kAdded)
    if (version < a.version)
      memcpy(reinterpret_cast<char*>(c) + a.offset, reinterpret_cast<const char*>(&d) + a.offset,
             a.bytes);
}

bool isSet(int v) { return v != NCCL_CONFIG_UNDEF_INT; }

// NCCL's own value checks, so a config NCCL refuses is refused here too.
ncclResult_t checkValues(const ncclConfig_t& c, const char* fn) {
  auto flag = [&](int v, const char* name) {
    return !isSet(v) || v == 0 || v == 1
               ? ncclSuccess
               : fail(ncclInvalidArgument, "%s: config.%s is %d; it must be 0 or 1", fn, name, v);
  };
  ncclResult_t r = ncclSuccess;
  if (r == ncclSuccess) r = flag(c.blocking, "blocking");
  if (r == ncclSuccess) r = flag(c.splitShare, "splitShare");
  if (r == ncclSuccess) r = flag(c.collnetEnable, "collnetEnable");
  if (r != ncclSuccess) return r;
  if (isSet(c.cgaClusterSize) && c.cgaClusterSize < 0)
    return fail(ncclInvalidArgument, "%s: config.cgaClusterSize is %d; it must be >= 0", fn,
                c.cgaClusterSize);
  if ((isSet(c.minCTAs) && c.minCTAs <= 0) || (isSet(c.maxCTAs) && c.maxCTAs <= 0) ||
      (isSet(c.minCTAs) && isSet(c.maxCTAs) && c.minCTAs > c.maxCTAs))
    return fail(ncclInvalidArgument,
                "%s: config.minCTAs %d and maxCTAs %d must satisfy 0 < minCTAs <= maxCTAs", fn,
                c.minCTAs, c.maxCTAs);
  if (isSet(c.CTAPolicy) &&
      (c.CTAPolicy < NCCL_CTA_POLICY_DEFAULT || c.CTAPolicy > NCCL_CTA_POLICY_ZERO))
    return fail(ncclInvalidArgument, "%s: config.CTAPolicy is %d; it must be %d..%d", fn,
                c.CTAPolicy, NCCL_CTA_POLICY_DEFAULT, NCCL_CTA_POLICY_ZERO);
  return ncclSuccess;
}

}  // namespace

ncclResult_t readConfig(const ncclConfig_t* in, const char* fn, loomConfig_t* out) {
  *out = LOOM_CONFIG_INITIALIZER;
  if (in == nullptr) return ncclSuccess;
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  const unsigned magic = c.magic;
  // The caller's struct is as large as its header made it: read no more than that, and no
  // field before the ones that say which version it is.
  if (in->size < offsetof(ncclConfig_t, version) + sizeof(c.version))
    return fail(ncclInvalidArgument,
                "%s: config.size is %zu, too small for an ncclConfig_t (initialise it with "
                "NCCL_CONFIG_INITIALIZER)",
                fn, in->size);
  memcpy(&c, in, in->size < sizeof(c) ? in->size : sizeof(c));
  if (c.magic != magic)
    return fail(ncclInvalidArgument,
                "%s: config.magic is 0x%x, not 0x%x: the config was not initialised with "
                "NCCL_CONFIG_INITIALIZER",
                fn, c.magic, magic);
  resetNewerFields(c.version, &c);
  if (ncclResult_t r = checkValues(c, fn); r != ncclSuccess) return r;
  if (isSet(c.blocking)) out->blocking = c.blocking;
  return ncclSuccess;
}

}  // namespace loom::nccl
