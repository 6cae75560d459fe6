// loom-info: the version, what was built in, and every parameter with its value, default,
// where the value came from, and its description.
#include <cstdio>
#include <cstring>

#include "collectives/builders.h"
#include "base/reduce_kernels.h"
#include "base/params.h"
#include "loom/loom.h"

#ifndef LOOM_GIT_COMMIT
#define LOOM_GIT_COMMIT "unknown"
#endif

int main(int argc, char** argv) {
  bool paramsOnly = argc > 1 && strcmp(argv[1], "--params") == 0;
  if (argc > 1 && strcmp(argv[1], "--json") == 0) {  // the same facts as data (loomGetInfo)
    const char* json = nullptr;
    if (loomGetInfo(&json) != loomSuccess) return 1;
    printf("%s\n", json);
    return 0;
  }
  if (argc > 1 && !paramsOnly) {
    printf("usage: loom-info [--params | --json]\n");
    return strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ? 0 : 2;
  }
  int version = 0;
  loomGetVersion(&version);
  if (!paramsOnly) {
    printf("loom %d.%d.%d (version code %d)\n", version / 10000, version / 100 % 100,
           version % 100, version);
    printf("transports: shm (POSIX shared memory + process_vm_readv), tcp\n");
    printf("reduction kernels: %s\n", loom::reduceIsa());
    printf("algorithms:\n");
    for (int c = 0; c <= int(loom::collectives::Collective::SendRecv); ++c) {
      auto coll = loom::collectives::Collective(c);
      printf("  %-14s", loom::collectives::collectiveName(coll));
      for (auto name : loom::collectives::builderNames(coll))
        printf(" %.*s", int(name.size()), name.data());
      printf("\n");
    }
    printf("\nparameters (environment variables):\n");
  }
  for (const auto& v : loom::params::all()) {
    printf("  %-24s = %-10s (default %s; from %s)\n", v.entry->name, v.text.c_str(),
           v.entry->defaultValue, v.source);
    printf("      %s\n", v.entry->description);
  }
  return 0;
}
