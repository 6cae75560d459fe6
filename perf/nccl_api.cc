#include "perf/nccl_api.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <filesystem>

#include "perf/output.h"

namespace loom::perf::nccl {

std::string libraryToOpen() {
  if (const char* path = std::getenv("LOOM_NCCL_LIBRARY"); path && *path) return path;
#ifdef LOOM_PERF_NCCL_LIBRARY
  std::error_code ignored;
  if (std::filesystem::exists(LOOM_PERF_NCCL_LIBRARY, ignored)) return LOOM_PERF_NCCL_LIBRARY;
#endif
  return "libnccl.so.2";
}

namespace {

// Every function of Api by its NCCL name.
template <typename Fn>
bool resolve(void* handle, const char* name, Fn* slot, std::string* missing) {
  *slot = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*slot == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return *slot != nullptr;
}

std::string resolveAll(void* h, Api* a) {
  std::string missing;
  resolve(h, "ncclGetVersion", &a->getVersion, &missing);
  resolve(h, "ncclGetUniqueId", &a->getUniqueId, &missing);
  resolve(h, "ncclCommInitRank", &a->commInitRank, &missing);
  resolve(h, "ncclCommDestroy", &a->commDestroy, &missing);
  resolve(h, "ncclCommAbort", &a->commAbort, &missing);
  resolve(h, "ncclCommCount", &a->commCount, &missing);
  resolve(h, "ncclCommUserRank", &a->commUserRank, &missing);
  resolve(h, "ncclGetErrorString", &a->getErrorString, &missing);
  resolve(h, "ncclGetLastError", &a->getLastError, &missing);
  resolve(h, "ncclAllReduce", &a->allReduce, &missing);
  resolve(h, "ncclAllGather", &a->allGather, &missing);
  resolve(h, "ncclReduceScatter", &a->reduceScatter, &missing);
  resolve(h, "ncclAlltoAll", &a->alltoAll, &missing);
  resolve(h, "ncclBroadcast", &a->broadcast, &missing);
  resolve(h, "ncclReduce", &a->reduce, &missing);
  resolve(h, "ncclGather", &a->gather, &missing);
  resolve(h, "ncclScatter", &a->scatter, &missing);
  resolve(h, "ncclSend", &a->send, &missing);
  resolve(h, "ncclRecv", &a->recv, &missing);
  resolve(h, "ncclGroupStart", &a->groupStart, &missing);
  resolve(h, "ncclGroupEnd", &a->groupEnd, &missing);
  resolve(h, "ncclMemAlloc", &a->memAlloc, &missing);
  resolve(h, "ncclMemFree", &a->memFree, &missing);
  return missing;
}

// The file the loader opened for the handle (it searched the path for a bare name).
std::string openedPath(void* handle, const std::string& asked) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || !map->l_name[0]) return asked;
  std::error_code ignored;
  const std::filesystem::path canonical = std::filesystem::canonical(map->l_name, ignored);
  return canonical.empty() ? std::string(map->l_name) : canonical.string();
}

}  // namespace

bool openApi(Api* api, std::string* error) {
  const std::string asked = libraryToOpen();
  void* h = dlopen(asked.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = dlerror();
    *error = "--api nccl: cannot open loom's libnccl.so.2 (" + asked +
             "): " + (why ? why : "unknown error") +
             "; build it (bindings/nccl, which needs NCCL's nccl.h) or set LOOM_NCCL_LIBRARY "
             "to its path";
    return false;
  }
  api->path = openedPath(h, asked);
  // A handle's lookups search the library and the libraries it loads: loom's libnccl.so.2
  // loads libloom.so, NVIDIA's does not.
  using LoomVersion = loomResult_t (*)(int*);
  const auto loomVersion = reinterpret_cast<LoomVersion>(dlsym(h, "loomGetVersion"));
  if (loomVersion == nullptr) {
    *error = "--api nccl: " + api->path +
             " is not loom's libnccl.so.2 (it does not load libloom.so); set LOOM_NCCL_LIBRARY "
             "to loom's (build/nccl/libnccl.so.2)";
    dlclose(h);
    return false;
  }
  if (const std::string missing = resolveAll(h, api); !missing.empty()) {
    *error = "--api nccl: " + api->path + " lacks " + missing;
    dlclose(h);
    return false;
  }
  // The library stays open for the life of the process: its functions are called to the end.
  int v = 0;
  loomVersion(&v);
  api->loomVersion = versionText(v);
  api->getVersion(&api->ncclVersion);
  return true;
}

}  // namespace loom::perf::nccl
