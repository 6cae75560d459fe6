/* loom's device: what a program needs to hand loom device buffers and streams without a GPU
 * runtime of its own, over the device LOOM_DEVICE selects (docs/DEVICE.md): CUDA (these calls
 * are cudaMalloc, cudaStreamCreate ... through the runtime loom loads), or the emulated device,
 * a CPU stand-in whose memory host code cannot read (a load faults) and whose streams are
 * worker threads. loom's tests use it so that they run on either. A program with CUDA of its own
 * does not need it: loom's calls take cudaMalloc'ed buffers and cudaStream_t streams as they are.
 *
 * A collective given device buffers, or a stream while a device is in use, is stream-ordered:
 * it is enqueued on the stream (NULL: the default stream) and the call returns at once; work
 * enqueued on the stream later sees its result. Its failure is reported by
 * loomCommGetAsyncError and loomGetLastError(comm) (and, on the emulated device, by
 * loomStreamSynchronize). */
#ifndef LOOM_LOOM_DEVICE_H_
#define LOOM_LOOM_DEVICE_H_

#include <stddef.h>

#include "loom/loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The device in use: "cuda", "emulated", or "none" (host memory only; see loomGetLastError). */
const char* loomDeviceName(void);
/** Device memory (not readable by host code). loomInvalidUsage where no device is in use. */
loomResult_t loomDeviceMalloc(void** ptr, size_t size);
loomResult_t loomDeviceFree(void* ptr);
/** A synchronous copy between any two of host and device memory. */
loomResult_t loomDeviceMemcpy(void* dst, const void* src, size_t size);
loomResult_t loomStreamCreate(void** stream);
loomResult_t loomStreamDestroy(void* stream);
/** Waits (at most timeoutMs; < 0: LOOM_TIMEOUT_MS) until the stream's work has completed, and
 *  returns its error: on the emulated device a failed stream-ordered call fails its stream. */
loomResult_t loomStreamSynchronize(void* stream, int timeoutMs);
/** An asynchronous copy on stream (cudaMemcpyAsync): later work on the stream sees it. */
loomResult_t loomDeviceMemcpyAsync(void* dst, const void* src, size_t size, void* stream);
/** Events (cudaEvent_t): loomStreamWaitEvent makes later work on stream wait for the work
 *  before the event's last loomEventRecord. */
loomResult_t loomEventCreate(void** event);
loomResult_t loomEventDestroy(void* event);
loomResult_t loomEventRecord(void* event, void* stream);
loomResult_t loomStreamWaitEvent(void* stream, void* event);
/** Graph capture (cudaStreamBeginCapture / cudaStreamEndCapture, the graph discarded): a
 *  stream-ordered call on a capturing stream is refused with loomInvalidUsage. */
loomResult_t loomStreamBeginCapture(void* stream);
loomResult_t loomStreamEndCapture(void* stream);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_LOOM_DEVICE_H_ */
