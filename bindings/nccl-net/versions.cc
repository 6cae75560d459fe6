// The versioned entry points NCCL looks up (ncclNetPlugin_v8 .. _v12): each version's
// signatures and property struct over the one implementation (net_plugin.h).
#include <limits.h>

#include "bindings/nccl-net/net_plugin.h"

namespace loom::ncclnet {
namespace {

constexpr const char* kName = "loom";

// The fields every version from 8 shares.
template <typename Props>
ncclResult_t fillCommon(int dev, Props* props) {
  if (props == nullptr) return ncclInternalError;
  DeviceProps d;
  ncclResult_t rc = properties(dev, &d);
  if (rc != ncclSuccess) return rc;
  *props = Props();
  props->name = d.name;
  props->pciPath = d.pciPath;
  props->guid = d.guid;
  props->ptrSupport = NCCL_PTR_HOST;
  props->regIsGlobal = 0;
  props->speed = d.speedMbps;
  props->port = 0;
  props->latency = d.latencyUs;
  props->maxComms = kMaxComms;
  props->maxRecvs = kMaxRecvs;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = 0;
  return ncclSuccess;
}

// v9 on: one physical device per virtual one, and the largest message test() can report.
template <typename Props>
ncclResult_t fillSized(int dev, Props* props) {
  ncclResult_t rc = fillCommon(dev, props);
  if (rc != ncclSuccess) return rc;
  props->forceFlush = 0;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = kMaxMessageBytes;
  props->maxCollBytes = kMaxMessageBytes;
  return ncclSuccess;
}

ncclResult_t propsV8(int dev, ncclNetProperties_v8_t* p) { return fillCommon(dev, p); }
ncclResult_t propsV9(int dev, ncclNetProperties_v9_t* p) { return fillSized(dev, p); }
ncclResult_t propsV11(int dev, ncclNetProperties_v11_t* p) {
  ncclResult_t rc = fillSized(dev, p);
  if (rc == ncclSuccess) p->maxMultiRequestSize = 1;
  return rc;
}

ncclResult_t propsV12(int dev, ncclNetProperties_v12_t* p) {
  ncclResult_t rc = fillSized(dev, p);
  if (rc != ncclSuccess) return rc;
  p->maxMultiRequestSize = 1;
  p->railId = NCCL_NET_ID_UNDEF;  // no rails known: NCCL pairs devices by its own topology
  p->planeId = NCCL_NET_ID_UNDEF;
  return rc;
}

ncclResult_t initOld(ncclDebugLogger_t logger) { return init(logger); }
ncclResult_t initV10(ncclDebugLogger_t logger, ncclProfilerCallback_t) { return init(logger); }
ncclResult_t initV11(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config,
                     ncclDebugLogger_t logger, ncclProfilerCallback_t) {
  if (ctx == nullptr) return ncclInternalError;
  ncclResult_t rc = init(logger);
  if (rc != ncclSuccess) return rc;
  auto* c = new Context;
  c->commId = commId;
  if (config != nullptr) c->trafficClass = config->trafficClass;
  *ctx = c;
  return ncclSuccess;
}
ncclResult_t finalizeV11(void* ctx) {
  delete static_cast<Context*>(ctx);
  return ncclSuccess;
}

ncclResult_t listenOld(int dev, void* handle, void** listenComm) {
  return listen(defaultContext(), dev, handle, listenComm);
}
ncclResult_t listenV11(void* ctx, int dev, void* handle, void** listenComm) {
  return listen(static_cast<Context*>(ctx), dev, handle, listenComm);
}
ncclResult_t connectOld(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v8_t**) {
  return connect(defaultContext(), dev, handle, sendComm);
}
ncclResult_t connectV10(int dev, ncclNetCommConfig_v10_t*, void* handle, void** sendComm,
                        ncclNetDeviceHandle_v10_t**) {
  return connect(defaultContext(), dev, handle, sendComm);
}
ncclResult_t connectV11(void* ctx, int dev, void* handle, void** sendComm,
                        ncclNetDeviceHandle_v11_t**) {
  return connect(static_cast<Context*>(ctx), dev, handle, sendComm);
}
ncclResult_t acceptAny(void* listenComm, void** recvComm, ncclNetDeviceHandle_v11_t**) {
  return accept(listenComm, recvComm);
}

// v8's sizes are int.
ncclResult_t isendV8(void* comm, void* data, int size, int tag, void* mhandle, void** request) {
  if (size < 0) return ncclInvalidArgument;
  return isend(comm, data, size_t(size), tag, mhandle, request);
}
ncclResult_t irecvV8(void* comm, int n, void** data, int* sizes, int* tags, void** mhandles,
                     void** request) {
  if (n < 1 || n > kMaxRecvs || sizes == nullptr) return irecv(comm, n, data, nullptr, tags,
                                                               mhandles, request);
  size_t wide[kMaxRecvs];
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0) return ncclInvalidArgument;
    wide[i] = size_t(sizes[i]);
  }
  return irecv(comm, n, data, wide, tags, mhandles, request);
}
ncclResult_t isendV9(void* comm, void* data, size_t size, int tag, void* mhandle,
                     void** request) {
  return isend(comm, data, size, tag, mhandle, request);
}
ncclResult_t irecvV9(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                     void** request) {
  return irecv(comm, n, data, sizes, tags, mhandles, request);
}
ncclResult_t isendV10(void* comm, void* data, size_t size, int tag, void* mhandle, void*,
                      void** request) {
  return isend(comm, data, size, tag, mhandle, request);
}
ncclResult_t irecvV10(void* comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                      void**, void** request) {
  return irecv(comm, n, data, sizes, tags, mhandles, request);
}

}  // namespace
}  // namespace loom::ncclnet

using namespace loom::ncclnet;

#define LOOM_NET_EXPORT extern "C" __attribute__((visibility("default")))

// getDeviceMr and irecvConsumed serve device offload, makeVDevice NIC fusion, setNetAttr
// hints: NCCL checks each for NULL and does without.
LOOM_NET_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    kName,    initOld,  devices,  propsV8,    listenOld,  connectOld, acceptAny,
    regMr,    regMrDmaBuf, deregMr, isendV8, irecvV8,    iflush,     test,
    closeSend, closeRecv, closeListen, nullptr, nullptr};

LOOM_NET_EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {
    kName,    initOld,  devices,  propsV9,    listenOld,  connectOld, acceptAny,
    regMr,    regMrDmaBuf, deregMr, isendV9, irecvV9,    iflush,     test,
    closeSend, closeRecv, closeListen, nullptr, nullptr, nullptr};

LOOM_NET_EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {
    kName,    initV10,  devices,  propsV9,    listenOld,  connectV10, acceptAny,
    regMr,    regMrDmaBuf, deregMr, isendV10, irecvV10,  iflush,     test,
    closeSend, closeRecv, closeListen, nullptr, nullptr, nullptr};

LOOM_NET_EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {
    kName,    initV11,  devices,  propsV11,   listenV11,  connectV11, acceptAny,
    regMr,    regMrDmaBuf, deregMr, isendV10, irecvV10,  iflush,     test,
    closeSend, closeRecv, closeListen, nullptr, nullptr, nullptr, finalizeV11, nullptr};

LOOM_NET_EXPORT const ncclNet_v12_t ncclNetPlugin_v12 = {
    kName,    initV11,  devices,  propsV12,   listenV11,  connectV11, acceptAny,
    regMr,    regMrDmaBuf, deregMr, isendV10, irecvV10,  iflush,     test,
    closeSend, closeRecv, closeListen, nullptr, nullptr, nullptr, finalizeV11, nullptr};
