#include "toolkit/names.h"

namespace loom::toolkit {

namespace {

struct CollectiveNames {
  Collective collective;
  const char* ncclTests;
  const char* aliases[2];
};
constexpr CollectiveNames kCollectives[] = {
    {Collective::AllReduce, "all_reduce", {"allreduce", nullptr}},
    {Collective::AllGather, "all_gather", {"allgather", nullptr}},
    {Collective::ReduceScatter, "reduce_scatter", {"reducescatter", nullptr}},
    {Collective::AlltoAll, "alltoall", {"all_to_all", nullptr}},
    {Collective::Broadcast, "broadcast", {"bcast", nullptr}},
    {Collective::Reduce, "reduce", {nullptr, nullptr}},
    {Collective::Gather, "gather", {nullptr, nullptr}},
    {Collective::Scatter, "scatter", {nullptr, nullptr}},
    {Collective::SendRecv, "sendrecv", {"send_recv", nullptr}},
};

struct DtypeAliases {
  loomDataType_t type;
  const char* aliases[2];
};
constexpr DtypeAliases kDtypeAliases[] = {
    {loomInt8, {"char", "i8"}},
    {loomUint8, {"u8", nullptr}},
    {loomInt32, {"int", "i32"}},
    {loomUint32, {"u32", nullptr}},
    {loomInt64, {"i64", nullptr}},
    {loomUint64, {"u64", nullptr}},
    {loomFloat16, {"float16", "fp16"}},
    {loomBfloat16, {"bf16", nullptr}},
    {loomFloat32, {"float32", "fp32"}},
    {loomFloat64, {"float64", "fp64"}},
    {loomFloat8e4m3, {"fp8e4m3", "e4m3"}},
    {loomFloat8e5m2, {"fp8e5m2", "e5m2"}},
};

bool isAlias(std::string_view name, const char* const (&aliases)[2]) {
  for (const char* alias : aliases)
    if (alias && name == alias) return true;
  return false;
}

}  // namespace

const char* ncclTestsName(Collective c) {
  for (const CollectiveNames& names : kCollectives)
    if (names.collective == c) return names.ncclTests;
  return collectives::collectiveName(c);  // alltoallv: nccl-tests has none
}

std::optional<Collective> parseCollective(std::string_view name) {
  for (const CollectiveNames& names : kCollectives)
    if (name == names.ncclTests || isAlias(name, names.aliases)) return names.collective;
  return std::nullopt;
}

bool collectiveHasOp(Collective c) {
  return c == Collective::AllReduce || c == Collective::ReduceScatter || c == Collective::Reduce;
}

bool collectiveHasRoot(Collective c) { return collectives::hasRoot(c); }

bool hasPlanBuilders(Collective c) { return c != Collective::SendRecv; }

std::optional<loomDataType_t> parseDtype(std::string_view name) {
  for (const DtypeAliases& d : kDtypeAliases)
    if (name == dtypeName(d.type) || isAlias(name, d.aliases)) return d.type;
  return std::nullopt;
}

std::optional<loomRedOp_t> parseOp(std::string_view name) {
  for (int i = 0; i < loomNumOps; ++i) {
    const auto op = static_cast<loomRedOp_t>(i);
    if (name == opName(op)) return op;
  }
  if (name == "product") return loomProd;
  return std::nullopt;
}

}  // namespace loom::toolkit
