// Stream-ordered calls: a collective or send/receive on device buffers, or given a stream, is
// enqueued on that stream instead of run by the caller (the host call returns at once). The
// stream copies device input into host staging, hands the call to the communicator's progress
// thread (a host function), waits for it (a wait on a flag the thread sets), and copies the
// result back; work enqueued on the stream later sees it. The progress thread runs the call as a
// host call on the staging buffers, so every reduction of device data runs on the host.
#pragma once

#include <atomic>

#include "base/status.h"
#include "comm/call.h"
#include "device/device.h"
#include "loom/loom.h"

namespace loom {

// The device a call goes through, or nullptr where it runs on the host now: the call is
// stream-ordered when a device is in use (LOOM_DEVICE) and a stream is given or a buffer is
// device memory. One load and, with a device, a pointer query or two.
inline device::Device* orderedDevice(void* stream, const void* a, const void* b) {
  device::Device* dev = device::current();
  if (dev == nullptr) [[likely]]
    return nullptr;
  if (stream != nullptr || dev->isDeviceMemory(a) || dev->isDeviceMemory(b)) return dev;
  return nullptr;
}

// Enqueues a described call (the communicator's CallDesc, copied) or a send/receive on stream;
// inside a group, keeps it for the group's end. The call's arguments have been checked.
Status enqueueCollective(loomComm* comm, device::Device* dev, void* stream, const CallDesc& call);
Status enqueueP2P(loomComm* comm, device::Device* dev, void* stream, const P2PCall& call);

// At the outermost loomGroupEnd: enqueues the group's stream-ordered calls, one job per
// communicator (its calls run as one group on its progress thread, once each of its streams has
// reached the job). hostCallsOf says whether the group also holds host calls of a communicator:
// a communicator's calls in one group must all be stream-ordered or all not.
Status enqueueGroup(bool (*hostCallsOf)(loomComm*, void*), void* ctx);
// Drops the thread's queued stream-ordered calls (a simulated group's end).
void dropGroup();

// A host call on a communicator waits here until its earlier stream-ordered calls have run, so
// that every rank runs the communicator's calls in the order they were made. The progress
// thread itself does not wait.
Status awaitOrderedSlow(loomComm* comm);
// The progress thread's end (loomCommDestroy, loomCommAbort): calls it has not started fail.
void stopOrdered(loomComm* comm);

// Run by the progress thread (comm/api.cc): the call as a host call, or queued where the thread
// is in a group.
Status submitCollective(loomComm* comm, CallDesc& call);
// A pre-multiplied sum's scaling of call's input (comm/api.cc), with the op as it was when the
// call was enqueued: the program may destroy or replace the op before the call runs.
struct PreMulSum;
void scaleByPreMulSum(loomComm* comm, CallDesc& call, const PreMulSum& op);
Status submitP2P(loomComm* comm, const P2PCall& call);

}  // namespace loom
