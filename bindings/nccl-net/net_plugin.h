// The NCCL net plugin's one implementation, which every version's entry points (versions.cc)
// call: devices are this host's network interfaces, a connection is a connection of loom's TCP
// transport (transports/tcp: several sockets, chunks striped over them, pacing), and NCCL's
// messages travel on it as a header (size, tag, and the payload itself when small) followed
// by the payload.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "bindings/nccl-net/net_abi.h"

namespace loom::ncclnet {

inline constexpr int kMaxRecvs = 8;  // buffers of one grouped receive (maxRecvs)
inline constexpr int kMaxComms = 65536;
// What one message may carry: test() reports sizes as int.
inline constexpr size_t kMaxMessageBytes = size_t(1) << 30;

// A communicator's context (v11's init; one shared default for older versions).
struct Context {
  uint64_t commId = 0;
  int trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF;
};
Context* defaultContext();

// A device's properties, in the fields every version shares.
struct DeviceProps {
  char* name;
  char* pciPath;  // the PCI device under /sys, NULL for a virtual interface
  uint64_t guid;
  int speedMbps;
  float latencyUs;
};

ncclResult_t init(ncclDebugLogger_t logger);
ncclResult_t devices(int* ndev);
ncclResult_t properties(int dev, DeviceProps* out);

ncclResult_t listen(Context* ctx, int dev, void* handle, void** listenComm);
// `handle` is NCCL's copy of listen()'s, which keeps the comm under way between NCCL's calls.
ncclResult_t connect(Context* ctx, int dev, void* handle, void** sendComm);
ncclResult_t accept(void* listenComm, void** recvComm);
ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle);
ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                         void** mhandle);
ncclResult_t deregMr(void* comm, void* mhandle);
ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                   void** request);
ncclResult_t irecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags,
                   void** mhandles, void** request);
ncclResult_t iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                    void** request);
ncclResult_t test(void* request, int* done, int* sizes);
ncclResult_t closeSend(void* sendComm);
ncclResult_t closeRecv(void* recvComm);
ncclResult_t closeListen(void* listenComm);

}  // namespace loom::ncclnet
