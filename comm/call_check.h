// LOOM_CHECK: before a call runs, its ranks exchange what each of them calls and compare
// (Comm::agreeOnCall). This file holds what is exchanged, a rank's descriptor of its call, and
// the comparison; the exchange is the communicator's.
//
// A descriptor is an array of fixed-size records: one per collective (collective, count, type,
// op where it reduces, root where it has one), then, for an alltoallv, one per block it sends
// and receives; or, for sends and receives, one per operation. In-place-ness is not in it: the
// API defines in place by where the buffers lie on each rank, and a call means the same whether
// or not a rank's buffers coincide, so ranks may differ in it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/call.h"

namespace loom {

struct CheckRecord {
  enum Kind : uint8_t { kCollective = 0, kSend = 1, kRecv = 2 };
  uint8_t kind = kCollective;
  uint8_t coll = 0;   // collectives::Collective
  uint8_t dtype = 0;  // loomDataType_t
  uint8_t op = 0;     // loomRedOp_t of a reducing collective, else kNoOp
  int32_t rank = 0;   // a collective's root (0 where it has none); an operation's peer
  uint64_t count = 0;  // a collective's elements; a send's or receive's bytes; a block's elements
  static constexpr uint8_t kNoOp = 0xff;
};
static_assert(sizeof(CheckRecord) == 16);

// Appends the records of one collective, or of one peer's share of sends and receives, to a
// descriptor.
void describeCollective(const CallDesc& call, std::string* out);
void describeOpsWith(int peer, std::span<const P2PCall> ops, std::string* out);

// What differs between the ranks' descriptors of their collectives (all[r]: rank r's), ""
// where they agree: the ranks grouped by what they called, then the alltoallv blocks whose
// sizes the receiver does not expect.
std::string collectivesDiffer(const std::vector<std::string>& all);
// What does not pair between rank a's operations with rank b and b's with a (each
// describeOpsWith's), "" where every send meets a receive of as many bytes, in order.
std::string opsUnpaired(int a, const std::string& aWithB, int b, const std::string& bWithA);

// The name a call is reported by: its first collective's, or that of its sends and receives.
const char* checkedCallName(std::span<const CallDesc* const> colls, std::span<const P2PCall> p2p);

}  // namespace loom
