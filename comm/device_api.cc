// include/loom/loom_device.h over the device in use (device/device.h).
#include "base/params.h"
#include "comm/handle.h"
#include "device/device.h"
#include "loom/loom_device.h"

namespace loom {
namespace {

// The device, or a clear error naming why there is none.
Status need(device::Device** dev) {
  *dev = device::current();
  if (*dev != nullptr) return Status::ok();
  return errorf(loomInvalidUsage, "no device is in use (%s); LOOM_DEVICE=emulated or cuda",
                device::whyNone());
}

template <typename F>
loomResult_t onDevice(const char* fn, F&& f) {
  device::Device* dev = nullptr;
  Status st = need(&dev);
  if (st.isOk()) st = f(dev);
  return finish(nullptr, st.isOk() ? st : st.withContext(fn));
}

}  // namespace
}  // namespace loom

using namespace loom;

extern "C" {

const char* loomDeviceName(void) {
  device::Device* dev = device::current();
  return dev ? dev->name() : "none";
}

loomResult_t loomDeviceMalloc(void** ptr, size_t size) {
  return onDevice("loomDeviceMalloc", [&](device::Device* d) {
    if (ptr == nullptr) return errorf(loomInvalidArgument, "ptr is NULL");
    *ptr = nullptr;
    return d->malloc(ptr, size);
  });
}

loomResult_t loomDeviceFree(void* ptr) {
  return onDevice("loomDeviceFree", [&](device::Device* d) { return d->free(ptr); });
}

loomResult_t loomDeviceMemcpy(void* dst, const void* src, size_t size) {
  return onDevice("loomDeviceMemcpy", [&](device::Device* d) {
    if (size > 0 && (dst == nullptr || src == nullptr))
      return errorf(loomInvalidArgument, "%s is NULL", dst == nullptr ? "dst" : "src");
    return d->copy(dst, src, size);
  });
}

loomResult_t loomDeviceMemcpyAsync(void* dst, const void* src, size_t size, void* stream) {
  return onDevice("loomDeviceMemcpyAsync", [&](device::Device* d) {
    if (size > 0 && (dst == nullptr || src == nullptr))
      return errorf(loomInvalidArgument, "%s is NULL", dst == nullptr ? "dst" : "src");
    return d->copyAsync(dst, src, size, stream);
  });
}

loomResult_t loomEventCreate(void** event) {
  return onDevice("loomEventCreate", [&](device::Device* d) {
    if (event == nullptr) return errorf(loomInvalidArgument, "event is NULL");
    return d->eventCreate(event);
  });
}

loomResult_t loomEventDestroy(void* event) {
  return onDevice("loomEventDestroy", [&](device::Device* d) { return d->eventDestroy(event); });
}

loomResult_t loomEventRecord(void* event, void* stream) {
  return onDevice("loomEventRecord", [&](device::Device* d) {
    if (event == nullptr) return errorf(loomInvalidArgument, "event is NULL");
    return d->eventRecord(event, stream);
  });
}

loomResult_t loomStreamWaitEvent(void* stream, void* event) {
  return onDevice("loomStreamWaitEvent", [&](device::Device* d) {
    if (event == nullptr) return errorf(loomInvalidArgument, "event is NULL");
    return d->streamWaitEvent(stream, event);
  });
}

loomResult_t loomStreamCreate(void** stream) {
  return onDevice("loomStreamCreate", [&](device::Device* d) {
    if (stream == nullptr) return errorf(loomInvalidArgument, "stream is NULL");
    return d->streamCreate(stream);
  });
}

loomResult_t loomStreamDestroy(void* stream) {
  return onDevice("loomStreamDestroy", [&](device::Device* d) { return d->streamDestroy(stream); });
}

loomResult_t loomStreamSynchronize(void* stream, int timeoutMs) {
  return onDevice("loomStreamSynchronize", [&](device::Device* d) {
    return d->streamSynchronize(stream,
                                timeoutMs < 0 ? params::getInt("LOOM_TIMEOUT_MS") : timeoutMs);
  });
}

loomResult_t loomStreamBeginCapture(void* stream) {
  return onDevice("loomStreamBeginCapture", [&](device::Device* d) { return d->beginCapture(stream); });
}

loomResult_t loomStreamEndCapture(void* stream) {
  return onDevice("loomStreamEndCapture", [&](device::Device* d) { return d->endCapture(stream); });
}

}  // extern "C"
