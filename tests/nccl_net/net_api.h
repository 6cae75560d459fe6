// NCCL's net plugin as NCCL's proxy sees it: the library dlopen'ed as NCCL opens it, one
// version's exported struct (ncclNetPlugin_v8 .. _v12) looked up by name, and every call made
// through that struct's own members with that version's types (int sizes for v8, size_t from
// v9, the profiler handles of v10, v11's per-communicator context, v12's properties). The
// tests and the benchmark are written once over this adapter.
#pragma once

#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bindings/nccl-net/net_abi.h"

namespace loom::testing {

class NetApi {
 public:
  // The plugin at `path` through its ncclNetPlugin_v<version>; error() says why not.
  NetApi(const char* path, int version) : version_(version) {
    lib_ = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr) {
      error_ = dlerror();
      return;
    }
    const std::string symbol = "ncclNetPlugin_v" + std::to_string(version);
    table_ = dlsym(lib_, symbol.c_str());
    if (table_ == nullptr) error_ = "no symbol " + symbol;
  }
  ~NetApi() {
    if (lib_ != nullptr) dlclose(lib_);
  }
  NetApi(const NetApi&) = delete;
  NetApi& operator=(const NetApi&) = delete;

  const std::string& error() const { return error_; }
  int version() const { return version_; }
  const ncclNet_v8_t* v8() const { return static_cast<const ncclNet_v8_t*>(table_); }
  const ncclNet_v9_t* v9() const { return static_cast<const ncclNet_v9_t*>(table_); }
  const ncclNet_v10_t* v10() const { return static_cast<const ncclNet_v10_t*>(table_); }
  const ncclNet_v11_t* v11() const { return static_cast<const ncclNet_v11_t*>(table_); }
  const ncclNet_v12_t* v12() const { return static_cast<const ncclNet_v12_t*>(table_); }
  const char* name() const { return v8()->name; }

  // v11: a context per communicator, as NCCL makes one per ncclComm.
  ncclResult_t init(uint64_t commId = 0x1234) {
    switch (version_) {
      case 8: return v8()->init(logger);
      case 9: return v9()->init(logger);
      case 10: return v10()->init(logger, nullptr);
      case 11: {
        ncclNetCommConfig_v11_t config = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
        return v11()->init(&ctx_, commId, &config, logger, nullptr);
      }
      default: {
        ncclNetCommConfig_v12_t config = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
        return v12()->init(&ctx_, commId, &config, logger, nullptr);
      }
    }
  }
  ncclResult_t finalize() {
    return version_ == 11 ? v11()->finalize(ctx_)
           : version_ == 12 ? v12()->finalize(ctx_) : ncclSuccess;
  }
  ncclResult_t devices(int* n) { return v8()->devices(n); }

  // The properties every version has, and the later ones where the version has them.
  struct Props {
    std::string name;
    bool hasPciPath = false;
    int ptrSupport = 0, speed = 0, maxComms = 0, maxRecvs = 0, netDeviceType = -1;
    float latency = -1;
    size_t maxP2pBytes = 0, maxCollBytes = 0;  // v9+
    int vDevs = 0, vDev0 = -1;                 // v9+
    int maxMultiRequestSize = 0;               // v11+
    int railId = 0, planeId = 0;               // v12
  };
  ncclResult_t properties(int dev, Props* out) {
    ncclResult_t rc;
    if (version_ == 8) {
      ncclNetProperties_v8_t p;
      if ((rc = v8()->getProperties(dev, &p)) != ncclSuccess) return rc;
      copyCommon(p, out);
      return rc;
    }
    if (version_ == 12) {
      ncclNetProperties_v12_t p;
      if ((rc = v12()->getProperties(dev, &p)) != ncclSuccess) return rc;
      copyCommon(p, out);
      copySized(p, out);
      out->railId = p.railId;
      out->planeId = p.planeId;
      return rc;
    }
    ncclNetProperties_v11_t p = {};
    if (version_ == 11) {
      rc = v11()->getProperties(dev, &p);
    } else if (version_ == 10) {  // v9 and v10 share the struct, a prefix of v11's
      rc = v10()->getProperties(dev, reinterpret_cast<ncclNetProperties_v10_t*>(&p));
    } else {
      rc = v9()->getProperties(dev, reinterpret_cast<ncclNetProperties_v9_t*>(&p));
    }
    if (rc != ncclSuccess) return rc;
    copyCommon(p, out);
    copySized(p, out);
    return rc;
  }

  ncclResult_t listen(int dev, void* handle, void** comm) {
    switch (version_) {
      case 8: return v8()->listen(dev, handle, comm);
      case 9: return v9()->listen(dev, handle, comm);
      case 10: return v10()->listen(dev, handle, comm);
      case 11: return v11()->listen(ctx_, dev, handle, comm);
      default: return v12()->listen(ctx_, dev, handle, comm);
    }
  }
  ncclResult_t connect(int dev, void* handle, void** comm) {
    switch (version_) {
      case 8: return v8()->connect(dev, handle, comm, &devComm_);
      case 9: return v9()->connect(dev, handle, comm, &devComm_);
      case 10: {
        ncclNetCommConfig_v10_t config = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
        return v10()->connect(dev, &config, handle, comm, &devComm_);
      }
      case 11: return v11()->connect(ctx_, dev, handle, comm, &devComm_);
      default: return v12()->connect(ctx_, dev, handle, comm, &devComm_);
    }
  }
  ncclResult_t accept(void* listenComm, void** comm) {
    switch (version_) {
      case 8: return v8()->accept(listenComm, comm, &devComm_);
      case 9: return v9()->accept(listenComm, comm, &devComm_);
      case 10: return v10()->accept(listenComm, comm, &devComm_);
      case 11: return v11()->accept(listenComm, comm, &devComm_);
      default: return v12()->accept(listenComm, comm, &devComm_);
    }
  }
  // NCCL's loops: connect and accept until the comm is there, within `seconds`; *calls counts
  // the calls that returned none yet.
  ncclResult_t connectLoop(int dev, void* handle, void** comm, int* calls = nullptr,
                           double seconds = 20) {
    return loop([&] { return connect(dev, handle, comm); }, comm, calls, seconds);
  }
  ncclResult_t acceptLoop(void* listenComm, void** comm, int* calls = nullptr,
                          double seconds = 20) {
    return loop([&] { return accept(listenComm, comm); }, comm, calls, seconds);
  }

  ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
    return v8()->regMr(comm, data, size, type, mhandle);
  }
  ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, void** mhandle) {
    return v8()->regMrDmaBuf(comm, data, size, type, 0, -1, mhandle);
  }
  ncclResult_t deregMr(void* comm, void* mhandle) { return v8()->deregMr(comm, mhandle); }

  ncclResult_t isend(void* comm, void* data, size_t size, int tag, void* mhandle, void** req) {
    switch (version_) {
      case 8: return v8()->isend(comm, data, int(size), tag, mhandle, req);
      case 9: return v9()->isend(comm, data, size, tag, mhandle, req);
      case 10: return v10()->isend(comm, data, size, tag, mhandle, nullptr, req);
      case 11: return v11()->isend(comm, data, size, tag, mhandle, nullptr, req);
      default: return v12()->isend(comm, data, size, tag, mhandle, nullptr, req);
    }
  }
  ncclResult_t irecv(void* comm, int n, void** data, const size_t* sizes, int* tags,
                     void** mhandles, void** req) {
    void* phandles[NCCL_NET_MAX_REQUESTS] = {};
    std::vector<size_t> wide(sizes, sizes + n);
    if (version_ == 8) {
      std::vector<int> narrow(sizes, sizes + n);
      return v8()->irecv(comm, n, data, narrow.data(), tags, mhandles, req);
    }
    if (version_ == 9) return v9()->irecv(comm, n, data, wide.data(), tags, mhandles, req);
    if (version_ == 10)
      return v10()->irecv(comm, n, data, wide.data(), tags, mhandles, phandles, req);
    if (version_ == 11)
      return v11()->irecv(comm, n, data, wide.data(), tags, mhandles, phandles, req);
    return v12()->irecv(comm, n, data, wide.data(), tags, mhandles, phandles, req);
  }
  ncclResult_t iflush(void* comm, int n, void** data, int* sizes, void** mhandles, void** req) {
    return v8()->iflush(comm, n, data, sizes, mhandles, req);
  }
  ncclResult_t test(void* req, int* done, int* sizes) { return v8()->test(req, done, sizes); }
  ncclResult_t closeSend(void* comm) { return v8()->closeSend(comm); }
  ncclResult_t closeRecv(void* comm) { return v8()->closeRecv(comm); }
  ncclResult_t closeListen(void* comm) { return v8()->closeListen(comm); }

  // Polls test() until the request is done, an error, or `seconds` pass (ncclInProgress then).
  ncclResult_t wait(void* req, int* sizes, double seconds = 30) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      int done = 0;
      ncclResult_t rc = test(req, &done, sizes);
      if (rc != ncclSuccess || done) return rc;
      if (std::chrono::steady_clock::now() > end) return ncclInProgress;
    }
  }

 private:
  static void logger(ncclDebugLogLevel, unsigned long, const char*, int, const char*, ...) {}

  template <typename P>
  static void copyCommon(const P& p, Props* out) {
    out->name = p.name != nullptr ? p.name : "";
    out->hasPciPath = p.pciPath != nullptr;
    out->ptrSupport = p.ptrSupport;
    out->speed = p.speed;
    out->latency = p.latency;
    out->maxComms = p.maxComms;
    out->maxRecvs = p.maxRecvs;
    out->netDeviceType = p.netDeviceType;
  }

  template <typename P>
  static void copySized(const P& p, Props* out) {
    out->maxP2pBytes = p.maxP2pBytes;
    out->maxCollBytes = p.maxCollBytes;
    out->vDevs = p.vProps.ndevs;
    out->vDev0 = p.vProps.devs[0];
    out->maxMultiRequestSize = p.maxMultiRequestSize;
  }

  template <typename F>
  static ncclResult_t loop(F call, void** comm, int* calls, double seconds) {
    *comm = nullptr;
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (*comm == nullptr) {
      ncclResult_t rc = call();
      if (rc != ncclSuccess) return rc;
      if (*comm != nullptr) break;
      if (calls != nullptr) ++*calls;
      if (std::chrono::steady_clock::now() > end) return ncclInProgress;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return ncclSuccess;
  }

  int version_;
  void* lib_ = nullptr;
  void* table_ = nullptr;
  void* ctx_ = nullptr;
  ncclNetDeviceHandle_v11_t* devComm_ = nullptr;
  std::string error_;
};

}  // namespace loom::testing
