// The translation layer of loom's NCCL, one rank in one process, through NCCL's own headers:
// version, error text, ncclConfig_t parsing (magic, size, the fields of older versions, value
// checks), datatypes by element size, the binding's own errors against loom's in
// ncclGetLastError, registrations, and the functions loom's host communicators cannot honour.
//
// Run with LOOM_DEBUG=INFO and LOOM_DEBUG_FILE=<path with %p>: the first communicator's init
// must log loom's version line there.
#include <nccl.h>
#include <nccl_device/core.h>
#include <nccl_device/ll_a2a.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "check.h"

namespace {

bool lastErrorHas(ncclComm_t comm, const char* text) {
  const char* message = ncclGetLastError(comm);
  if (strstr(message, text) != nullptr) return true;
  fprintf(stderr, "last error '%s' does not contain '%s'\n", message, text);
  return false;
}

void versionAndErrorText() {
  int version = 0;
  CHECK(ncclGetVersion(&version) == ncclSuccess && version == NCCL_VERSION_CODE);
  CHECK(version == 22809);
  CHECK(ncclGetVersion(nullptr) == ncclInvalidArgument && lastErrorHas(nullptr, "version"));
  std::set<std::string> texts;
  for (int r = ncclSuccess; r < ncclNumResults; ++r) {
    const char* text = ncclGetErrorString(ncclResult_t(r));
    CHECK(text != nullptr && *text != '\0');
    if (text != nullptr) texts.insert(text);
  }
  CHECK(texts.size() == ncclNumResults);  // one text per code
  CHECK(strcmp(ncclGetErrorString(ncclResult_t(99)), "unknown result code") == 0);
}

// Each config is refused before any communication: the id is never used.
ncclResult_t initWith(ncclConfig_t* config) {
  ncclUniqueId id = {};
  ncclComm_t comm = nullptr;
  return ncclCommInitRankConfig(&comm, 1, id, 0, config);
}

// Configs NCCL refuses, each with what the message must say.
void configChecks() {
  struct Case {
    void (*spoil)(ncclConfig_t*);
    const char* message;
  };
  const Case cases[] = {
      {[](ncclConfig_t* c) { c->magic = 0x12345678; }, "config.magic is 0x12345678"},
      {[](ncclConfig_t* c) { c->size = 8; }, "config.size is 8"},
      {[](ncclConfig_t* c) { c->blocking = 2; }, "config.blocking is 2"},
      {[](ncclConfig_t* c) { c->CTAPolicy = 3; }, "config.CTAPolicy is 3"},
      {[](ncclConfig_t* c) { c->minCTAs = 8, c->maxCTAs = 4; }, "minCTAs 8 and maxCTAs 4"},
      {[](ncclConfig_t* c) { c->cgaClusterSize = -1; }, "cgaClusterSize is -1"},
      {[](ncclConfig_t* c) { c->splitShare = 7; }, "splitShare is 7"},
      {[](ncclConfig_t* c) { c->collnetEnable = -3; }, "collnetEnable is -3"},
  };
  for (const Case& k : cases) {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    k.spoil(&c);
    CHECK(initWith(&c) == ncclInvalidArgument && lastErrorHas(nullptr, k.message));
  }
}

// A caller built against an older header: fields its version lacks are not read (their bytes
// may hold anything), and bytes past its size are not read at all.
bool initOneRank(ncclConfig_t* config, ncclComm_t* comm) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return false;
  return ncclCommInitRankConfig(comm, 1, id, 0, config) == ncclSuccess;
}

void olderConfigs() {
  ncclComm_t comm = nullptr;
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.version = NCCL_VERSION(2, 13, 0);  // before `blocking`
  c.blocking = 5;
  c.CTAPolicy = 9;
  c.minCTAs = -4;
  CHECK(initOneRank(&c, &comm));
  CHECK(comm != nullptr && ncclCommDestroy(comm) == ncclSuccess);

  c = NCCL_CONFIG_INITIALIZER;
  c.version = NCCL_VERSION(2, 26, 0);  // before collnetEnable .. nvlsCTAs
  c.collnetEnable = 4;
  c.CTAPolicy = 9;
  CHECK(initOneRank(&c, &comm));
  CHECK(comm != nullptr && ncclCommDestroy(comm) == ncclSuccess);
  c.blocking = 3;  // 2.26 has blocking: still checked
  CHECK(initWith(&c) == ncclInvalidArgument && lastErrorHas(nullptr, "config.blocking is 3"));

  // A 2.16-sized struct (up to `blocking`) followed by bytes that are not the caller's.
  unsigned char raw[sizeof(ncclConfig_t)];
  memset(raw, 0x7f, sizeof(raw));
  ncclConfig_t small = NCCL_CONFIG_INITIALIZER;
  small.size = offsetof(ncclConfig_t, cgaClusterSize);
  small.version = NCCL_VERSION(2, 16, 0);
  small.blocking = 1;
  memcpy(raw, &small, small.size);
  CHECK(initOneRank(reinterpret_cast<ncclConfig_t*>(raw), &comm));
  CHECK(comm != nullptr && ncclCommDestroy(comm) == ncclSuccess);
}

// Every datatype moves its own element size: a table that confused two of NCCL's and loom's
// values (they differ from ncclFloat32 on) would move another number of bytes.
void datatypes(ncclComm_t comm) {
  const size_t sizes[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  const size_t count = 3;
  for (int t = 0; t < ncclNumTypes; ++t) {
    unsigned char in[64], out[64];
    for (size_t i = 0; i < sizeof(in); ++i) in[i] = (unsigned char)((i * 13 + 1) & 0x3f);
    memset(out, 0xee, sizeof(out));
    CHECK(ncclAllReduce(in, out, count, ncclDataType_t(t), ncclSum, comm, nullptr) == ncclSuccess);
    const size_t bytes = count * sizes[t];
    bool moved = memcmp(in, out, bytes) == 0;
    for (size_t i = bytes; i < sizeof(out); ++i) moved = moved && out[i] == 0xee;
    if (!moved) fprintf(stderr, "datatype %d did not move exactly %zu bytes\n", t, bytes);
    CHECK(moved);
  }
  float x = 1;
  CHECK(ncclAllReduce(&x, &x, 1, ncclNumTypes, ncclSum, comm, nullptr) == ncclInvalidArgument &&
        lastErrorHas(comm, "ncclAllReduce: unknown datatype 12"));
  CHECK(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclRedOp_t(-1), comm, nullptr) ==
            ncclInvalidArgument &&
        lastErrorHas(comm, "ncclAllReduce: unknown reduction op -1"));
}

// The binding's own errors and loom's share ncclGetLastError: the latest failure wins.
void lastErrors(ncclComm_t comm) {
  float x = 1;
  CHECK(ncclCommRevoke(comm, 1) == ncclInvalidArgument && lastErrorHas(comm, "revokeFlags is 1"));
  CHECK(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, nullptr, nullptr) == ncclInvalidArgument);
  CHECK(lastErrorHas(nullptr, "comm is NULL"));  // loom's message
  CHECK(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(lastErrorHas(nullptr, "comm is NULL"));  // a success leaves the last error
  ncclComm_t child = nullptr;
  CHECK(ncclCommSplit(comm, -2, 0, &child, nullptr) == ncclInvalidArgument &&
        lastErrorHas(comm, "color is -2"));
  CHECK(ncclCommShrink(comm, nullptr, 0, &child, nullptr, 5) == ncclInvalidArgument &&
        lastErrorHas(comm, "shrinkFlags is 5"));
  ncclResult_t async = ncclInternalError;
  CHECK(ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess);
  CHECK(ncclCommGetAsyncError(comm, nullptr) == ncclInvalidArgument);
  int n = 0, rank = -1, device = 0;
  CHECK(ncclCommCount(comm, &n) == ncclSuccess && n == 1);
  CHECK(ncclCommUserRank(comm, &rank) == ncclSuccess && rank == 0);
  CHECK(ncclCommCuDevice(comm, &device) == ncclInvalidUsage &&
        lastErrorHas(comm, "no CUDA device"));
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  sim.magic = 0;
  CHECK(ncclGroupSimulateEnd(&sim) == ncclInvalidArgument &&
        lastErrorHas(nullptr, "simInfo->magic is 0x0"));
  ncclRedOp_t op;
  float scalar = 2;
  CHECK(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarDevice, comm) ==
            ncclInvalidUsage &&
        lastErrorHas(comm, "ncclScalarHostImmediate"));
}

void registrations(ncclComm_t comm) {
  char buffer[256];
  void* handle = nullptr;
  CHECK(ncclCommRegister(comm, buffer, sizeof(buffer), &handle) == ncclSuccess && handle);
  CHECK(ncclCommDeregister(comm, handle) == ncclSuccess);
  CHECK(ncclCommDeregister(comm, handle) == ncclInvalidArgument &&
        lastErrorHas(comm, "not a registration of this communicator"));
  CHECK(ncclCommDeregister(comm, buffer) == ncclInvalidArgument);
  CHECK(ncclCommRegister(comm, buffer, sizeof(buffer), nullptr) == ncclInvalidArgument);
  ncclWindow_t win = nullptr;
  CHECK(ncclCommWindowRegister(comm, buffer, sizeof(buffer), &win, 2) == ncclInvalidArgument);
  CHECK(ncclCommWindowRegister(comm, buffer, sizeof(buffer), &win, NCCL_WIN_COLL_SYMMETRIC) ==
            ncclSuccess &&
        win != nullptr);
  CHECK(ncclCommDeregister(comm, win) == ncclInvalidArgument);  // a window is no registration
  CHECK(ncclCommWindowDeregister(comm, win) == ncclSuccess);
  CHECK(ncclCommWindowDeregister(comm, win) == ncclInvalidArgument);
  CHECK(ncclCommRegister(comm, buffer, sizeof(buffer), &handle) ==
        ncclSuccess);  // freed at destroy
  void* mem = nullptr;
  CHECK(ncclMemAlloc(&mem, 4096) == ncclSuccess && mem != nullptr);
  if (mem != nullptr) memset(mem, 1, 4096);  // host memory
  CHECK(ncclMemFree(mem) == ncclSuccess);
}

void deviceApi(ncclComm_t comm) {
  ncclDevComm_t* devComm = nullptr;
  CHECK(ncclDevCommCreate(comm, nullptr, devComm) == ncclInvalidUsage &&
        lastErrorHas(comm, "ncclDevCommCreate: loom's NCCL has no device API"));
  CHECK(ncclDevCommDestroy(comm, nullptr) == ncclInvalidUsage);
  const ncclTeam_t team = ncclTeamWorld(comm);
  CHECK(team.nRanks == 0 && team.rank == -1 && lastErrorHas(comm, "ncclTeamWorld"));
  CHECK(ncclTeamLsa(comm).nRanks == 0 && ncclTeamRail(comm).nRanks == 0);
  CHECK(ncclTeamRankToWorld(comm, team, 0) == -1 && ncclTeamRankToLsa(comm, team, 0) == -1);
  CHECK(ncclLLA2ACalcSlots(16, 8) == -1 && lastErrorHas(nullptr, "ncclLLA2ACalcSlots"));
  CHECK(ncclLLA2ACreateRequirement(1, 1, nullptr, nullptr) == ncclInvalidUsage);
}

void versionLogged() {
  const char* file = getenv("LOOM_DEBUG_FILE");
  if (file == nullptr) {
    fprintf(stderr, "LOOM_DEBUG_FILE is not set: the version line is not checked\n");
    ++failures;
    return;
  }
  std::string path = file;
  if (size_t at = path.find("%p"); at != std::string::npos)
    path.replace(at, 2, std::to_string(getpid()));
  std::ifstream in(path);
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(log.find("standing in for NCCL 2.28.9") != std::string::npos);
  unlink(path.c_str());
}

}  // namespace

int main() {
  versionAndErrorText();
  configChecks();
  olderConfigs();
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  if (!initOneRank(&config, &comm)) {
    fprintf(stderr, "init: %s\n", ncclGetLastError(nullptr));
    return 1;
  }
  datatypes(comm);
  lastErrors(comm);
  registrations(comm);
  deviceApi(comm);
  CHECK(ncclCommFinalize(comm) == ncclSuccess);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  CHECK(ncclCommFinalize(comm) == ncclInvalidUsage);  // loom's check of a live handle
  versionLogged();
  if (failures == 0) printf("all checks passed\n");
  return failures == 0 ? 0 : 1;
}
