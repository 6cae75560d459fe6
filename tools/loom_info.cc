// loom-info: the version, what was built in, every parameter with its value, default, where
// the value came from and its description, and how NCCL's environment variables map onto them.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/nccl_env.h"
#include "base/params.h"
#include "base/reduce_kernels.h"
#include "collectives/builders.h"
#include "comm/connections.h"
#include "loom/loom.h"
#include "transports/ucx/ucx_transport.h"

#ifndef LOOM_GIT_COMMIT
#define LOOM_GIT_COMMIT "unknown"
#endif

namespace {

// What UCX offers here: its transports (UCX_TLS narrows what a communicator uses) and the
// memory types it can move.
void printUcx() {
  const loom::transports::ucx::UcxDescription d = loom::transports::ucx::describeUcx();
  if (!d.error.empty()) {
    printf("ucx: unavailable: %s\n", d.error.c_str());
    return;
  }
  printf("ucx: UCX %s; RDMA transports: %s; CUDA memory: %s\n", d.version.c_str(),
         d.rdma ? "yes" : "none", d.cudaMemory ? "yes" : "no");
  printf("  ucx transports:");
  for (const auto& t : d.transports) printf(" %s", t.c_str());
  printf("\n  ucx memory types:");
  for (const auto& t : d.memoryTypes) printf(" %s", t.c_str());
  printf("\n");
}

void printBuild() {
  int version = 0;
  loomGetVersion(&version);
  printf("loom %d.%d.%d (version code %d)\n", version / 10000, version / 100 % 100,
         version % 100, version);
  printf("transports: shm (POSIX shared memory + process_vm_readv), tcp%s\n",
         loom::transports::ucx::ucxBuilt() ? ", ucx" : "");
  printf("links between hosts under LOOM_TRANSPORT=auto: %s\n", loom::autoNetworkRule().c_str());
  printUcx();
  printf("reduction kernels: %s\n", loom::reduceIsa());
  printf("algorithms:\n");
  for (int c = 0; c <= int(loom::collectives::Collective::SendRecv); ++c) {
    auto coll = loom::collectives::Collective(c);
    printf("  %-14s", loom::collectives::collectiveName(coll));
    for (auto name : loom::collectives::builderNames(coll))
      printf(" %.*s", int(name.size()), name.data());
    printf("\n");
  }
}

void printParams() {
  for (const auto& v : loom::params::all()) {
    printf("  %-24s = %-10s (default %s; from %s)\n", v.entry->name, v.text.c_str(),
           v.entry->defaultValue, v.source);
    printf("      %s\n", v.entry->description);
  }
}

// Each NCCL variable loom reads, the parameter it sets and the value in force with its source;
// then the NCCL variables loom ignores, and those of them set here.
void printNccl() {
  printf("NCCL variables loom reads (the LOOM_* one wins where both are set; docs/NCCL_ENV.md):\n");
  for (const auto& v : loom::params::all()) {
    const char* nccl = v.entry->ncclName;
    if (nccl == nullptr) continue;
    printf("  %-20s -> %-20s = \"%s\" (from %s", nccl, v.entry->name, v.text.c_str(), v.source);
    if (strcmp(v.source, nccl) == 0) printf("=\"%s\"", v.ncclText.c_str());
    const char* set = getenv(nccl);
    if (strcmp(v.source, v.entry->name) == 0 && set != nullptr && *set != '\0')
      printf("; %s=\"%s\" overridden", nccl, set);
    printf(")\n");
    if (!v.warning.empty()) printf("      warning: %s\n", v.warning.c_str());
    if (!v.error.empty())
      printf("      invalid: %s=\"%s\": %s (a communicator fails to initialise)\n", nccl,
             v.ncclText.c_str(), v.error.c_str());
  }
  printf("NCCL variables loom ignores:\n");
  for (const auto& i : loom::ncclenv::ignoredVariables())
    printf("  %-22s %s\n", i.pattern, i.reason);
  printf("  %-22s %s\n", "any other NCCL_*", "no loom meaning");
  const auto set = loom::ncclenv::ignoredSettings();
  if (!set.empty()) printf("ignored NCCL variables set here:\n");
  for (const auto& s : set)
    printf("  %s=\"%s\": %s\n", s.name.c_str(), s.value.c_str(), s.reason);
}

}  // namespace

int main(int argc, char** argv) {
  const char* only = argc > 1 ? argv[1] : "";
  const bool paramsOnly = strcmp(only, "--params") == 0;
  const bool ncclOnly = strcmp(only, "--nccl") == 0;
  if (strcmp(only, "--json") == 0 && argc == 2) {  // the same facts as data (loomGetInfo)
    const char* json = nullptr;
    if (loomGetInfo(&json) != loomSuccess) return 1;
    printf("%s\n", json);
    return 0;
  }
  if (argc > 2 || (argc > 1 && !paramsOnly && !ncclOnly)) {
    printf("usage: loom-info [--params | --nccl | --json]\n");
    return strcmp(only, "--help") == 0 || strcmp(only, "-h") == 0 ? 0 : 2;
  }
  if (ncclOnly) {
    printNccl();
    return 0;
  }
  if (!paramsOnly) {
    printBuild();
    printf("\nparameters (environment variables):\n");
  }
  printParams();
  if (!paramsOnly) {
    printf("\n");
    printNccl();
  }
  return 0;
}
