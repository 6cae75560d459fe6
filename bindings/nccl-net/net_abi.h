// NCCL's net plugin ABI, versions 8 to 12, declared from its documented layouts
// (docs/NCCL_PLUGINS.md; the facts: NCCL's ext-net headers of 2.28, and of 2.30 for v12). Every
// struct is checked below against the sizes and offsets NCCL compiles on x86-64 and aarch64
// (LP64), so that a member out of place is a compile error rather than a crash inside NCCL.
//
// NCCL looks each version up by name (`ncclNetPlugin_v12` from 2.30, then _v11 .. _v8) as a
// const data object of the type below. Plain C layout: the conformance harness includes this
// header too.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;

#define NCCL_NET_HANDLE_MAXSIZE 128
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4
#define NCCL_NET_MAX_REQUESTS 32
#define NCCL_NET_MAX_DEVS_PER_NIC 4
#define NCCL_NET_OPTIONAL_RECV_COMPLETION 0x1
#define NCCL_MAX_NET_SIZE_BYTES (1024LL * 1024 * 1024 * 1024)
#define NCCL_NET_TRAFFIC_CLASS_UNDEF (-1)

typedef enum {
  NCCL_NET_DEVICE_HOST = 0,
  NCCL_NET_DEVICE_UNPACK = 1,
} ncclNetDeviceType;

typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5,
} ncclDebugLogLevel;
#define NCCL_NET 16
#define NCCL_ALL (~0UL)

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file,
                                  int line, const char* fmt, ...);
typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* pHandle,
                                               int64_t pluginId, void* extData);

// The same 32 bytes in every version 8..11.
typedef struct {
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v11_t;
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_v8_t;
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_v9_t;
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_v10_t;

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC];
} ncclNetVDeviceProps_v9_t;
typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v10_t;
typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v11_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int speed;  // Mbit/s
  int port;
  float latency;  // us
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v8_t;

// v9 and v10: forceFlush after regIsGlobal, the virtual device and the size limits at the end.
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v9_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
} ncclNetProperties_v9_t;
typedef ncclNetProperties_v9_t ncclNetProperties_v10_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v11_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
} ncclNetProperties_v11_t;

// v12 (NCCL 2.30): up to 8 physical devices per virtual one, and the device's rail and plane.
#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8
#define NCCL_NET_ID_UNDEF (-1)
typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V12];
} ncclNetVDeviceProps_v12_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v12_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;  // NCCL_NET_ID_UNDEF: NCCL ignores it
  int16_t planeId;
} ncclNetProperties_v12_t;

typedef struct {
  int trafficClass;
} ncclNetCommConfig_v10_t;
typedef ncclNetCommConfig_v10_t ncclNetCommConfig_v11_t;
typedef ncclNetCommConfig_v10_t ncclNetCommConfig_v12_t;

typedef struct {
  int32_t maxConcurrentPeers, minConcurrentPeers, maxFlowsPerPeer, minFlowsPerPeer;
} ncclNetCommAttr_v11_t;
typedef struct {
  ncclNetCommAttr_v11_t sendCommAttr;
  ncclNetCommAttr_v11_t recvCommAttr;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
} ncclNetAttr_v11_t;
typedef ncclNetAttr_v11_t ncclNetAttr_v12_t;
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_v12_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v8_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
} ncclNet_v8_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v9_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v9_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v9_t* props);
} ncclNet_v9_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v10_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v10_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v10_t* props);
} ncclNet_v10_t;

// v11 and v12 differ only in the property and virtual-device types.
#define LOOM_NCCL_NET_V11_MEMBERS(Props, VProps)                                                   \
  const char* name;                                                                                \
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config,               \
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);        \
  ncclResult_t (*devices)(int* ndev);                                                              \
  ncclResult_t (*getProperties)(int dev, Props* props);                                            \
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);                     \
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm,                       \
                          ncclNetDeviceHandle_v11_t** sendDevComm);                                \
  ncclResult_t (*accept)(void* listenComm, void** recvComm,                                        \
                         ncclNetDeviceHandle_v11_t** recvDevComm);                                 \
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);            \
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,      \
                              int fd, void** mhandle);                                             \
  ncclResult_t (*deregMr)(void* comm, void* mhandle);                                              \
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,           \
                        void* phandle, void** request);                                            \
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,              \
                        void** mhandles, void** phandles, void** request);                         \
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,          \
                         void** request);                                                          \
  ncclResult_t (*test)(void* request, int* done, int* sizes);                                      \
  ncclResult_t (*closeSend)(void* sendComm);                                                       \
  ncclResult_t (*closeRecv)(void* recvComm);                                                       \
  ncclResult_t (*closeListen)(void* listenComm);                                                   \
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);                     \
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);                             \
  ncclResult_t (*makeVDevice)(int* d, VProps* props);                                              \
  ncclResult_t (*finalize)(void* ctx);                                                             \
  ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_v11_t* netAttr);

typedef struct {
  LOOM_NCCL_NET_V11_MEMBERS(ncclNetProperties_v11_t, ncclNetVDeviceProps_v11_t)
} ncclNet_v11_t;

typedef struct {
  LOOM_NCCL_NET_V11_MEMBERS(ncclNetProperties_v12_t, ncclNetVDeviceProps_v12_t)
} ncclNet_v12_t;

#ifdef __cplusplus
}  // extern "C"
#define LOOM_NET_ABI_ASSERT(cond) static_assert(cond, #cond)
#else
#define LOOM_NET_ABI_ASSERT(cond) _Static_assert(cond, #cond)
#endif

#if UINTPTR_MAX == 0xffffffffffffffffu
LOOM_NET_ABI_ASSERT(sizeof(ncclNetDeviceHandle_v11_t) == 32);
LOOM_NET_ABI_ASSERT(sizeof(ncclNetVDeviceProps_v9_t) == 20);
LOOM_NET_ABI_ASSERT(sizeof(ncclNetProperties_v8_t) == 64);
LOOM_NET_ABI_ASSERT(offsetof(ncclNetProperties_v8_t, speed) == 32);
LOOM_NET_ABI_ASSERT(offsetof(ncclNetProperties_v8_t, latency) == 40);
LOOM_NET_ABI_ASSERT(offsetof(ncclNetProperties_v8_t, maxRecvs) == 48);
LOOM_NET_ABI_ASSERT(offsetof(ncclNetProperties_v8_t, netDeviceVersion) == 56);
LOOM_NET_ABI_ASSERT(sizeof(ncclNetProperties_v9_t) == 104);
LOOM_NET_ABI_ASSERT(offsetof(ncclNetProperties_v9_t, forceFlush) == 32);
LOOM_NET_ABI_ASSERT(offsetof(ncclNetProperties_v9_t, speed) == 36);
LOOM_NET_ABI_ASSERT(offsetof(ncclNetProperties_v9_t, vProps) == 64);
LOOM_NET_ABI_ASSERT(offsetof(ncclNetProperties_v9_t, maxP2pBytes) == 88);
LOOM_NET_ABI_ASSERT(offsetof(ncclNetProperties_v9_t, maxCollBytes) == 96);
LOOM_NET_ABI_ASSERT(sizeof(ncclNetProperties_v11_t) == 112);
LOOM_NET_ABI_ASSERT(offsetof(ncclNetProperties_v11_t, maxMultiRequestSize) == 104);
LOOM_NET_ABI_ASSERT(sizeof(ncclNetAttr_v11_t) == 44);
LOOM_NET_ABI_ASSERT(sizeof(ncclNet_v8_t) == 152);
LOOM_NET_ABI_ASSERT(offsetof(ncclNet_v8_t, isend) == 80);
LOOM_NET_ABI_ASSERT(offsetof(ncclNet_v8_t, irecvConsumed) == 144);
LOOM_NET_ABI_ASSERT(sizeof(ncclNet_v9_t) == 160);
LOOM_NET_ABI_ASSERT(offsetof(ncclNet_v9_t, makeVDevice) == 152);
LOOM_NET_ABI_ASSERT(sizeof(ncclNet_v10_t) == 160);
LOOM_NET_ABI_ASSERT(offsetof(ncclNet_v10_t, connect) == 40);
LOOM_NET_ABI_ASSERT(sizeof(ncclNet_v11_t) == 176);
LOOM_NET_ABI_ASSERT(offsetof(ncclNet_v11_t, finalize) == 160);
LOOM_NET_ABI_ASSERT(offsetof(ncclNet_v11_t, setNetAttr) == 168);
LOOM_NET_ABI_ASSERT(sizeof(ncclNetVDeviceProps_v12_t) == 36);
LOOM_NET_ABI_ASSERT(offsetof(ncclNetProperties_v12_t, vProps) == 64);
LOOM_NET_ABI_ASSERT(offsetof(ncclNetProperties_v12_t, maxP2pBytes) == 104);
LOOM_NET_ABI_ASSERT(offsetof(ncclNetProperties_v12_t, maxMultiRequestSize) == 120);
LOOM_NET_ABI_ASSERT(offsetof(ncclNetProperties_v12_t, railId) == 124);
LOOM_NET_ABI_ASSERT(offsetof(ncclNetProperties_v12_t, planeId) == 126);
LOOM_NET_ABI_ASSERT(sizeof(ncclNetProperties_v12_t) == 128);
LOOM_NET_ABI_ASSERT(sizeof(ncclNet_v12_t) == 176);
LOOM_NET_ABI_ASSERT(offsetof(ncclNet_v12_t, setNetAttr) == 168);
#endif
