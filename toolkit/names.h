// The names the programs above libloom read and print: collectives as nccl-tests spells them
// ("all_reduce"), data types and ops as the library does (base/dtype.h's dtypeName, opName),
// each also under the aliases a user may type.
#pragma once

#include <optional>
#include <string_view>

#include "base/dtype.h"
#include "collectives/plan.h"

namespace loom::toolkit {

using collectives::Collective;

/** nccl-tests' name of the collective ("all_reduce", "alltoall", "sendrecv", ...). */
const char* ncclTestsName(Collective c);
/** nccl-tests' names, and the API's and the plan IR's spellings ("allreduce", "bcast"). */
std::optional<Collective> parseCollective(std::string_view name);
/** Whether the collective takes a reduction op / a root. */
bool collectiveHasOp(Collective c);
bool collectiveHasRoot(Collective c);
/** Whether the library has plan builders to choose among for it (send/recv has none). */
bool hasPlanBuilders(Collective c);

/** dtypeName's spelling or an alias ("fp32", "bf16", "e4m3"...). */
std::optional<loomDataType_t> parseDtype(std::string_view name);
/** opName's spelling, or "product". */
std::optional<loomRedOp_t> parseOp(std::string_view name);

}  // namespace loom::toolkit
