// ncclCommRegister and ncclCommWindowRegister over host memory. Loom moves any host memory as
// it is, so a registration is bookkeeping: a handle that records the range, checked when it
// is given back so that a wrong or repeated deregistration is an error as in NCCL.
#include <mutex>
#include <set>

#include "bindings/nccl/shim.h"

// The handle behind both a registration (void*) and a window (ncclWindow_t).
struct ncclWindow_vidmem {
  ncclComm_t comm;
  void* buff;
  size_t size;
  int winFlags;
  bool window;  // from ncclCommWindowRegister
};

namespace loom::nccl {
namespace {

std::mutex gMutex;
std::set<ncclWindow_vidmem*> gLive;

ncclResult_t add(const char* fn, ncclComm_t comm, void* buff, size_t size, int winFlags,
                 bool window, ncclWindow_vidmem** out) {
  int count = 0;
  if (loomResult_t r = loomCommCount(toLoom(comm), &count); r != loomSuccess) return fromLoom(r);
  if (out == nullptr)
    return fail(ncclInvalidArgument, "%s: %s is NULL", fn, window ? "win" : "handle");
  if (buff == nullptr && size > 0)
    return fail(ncclInvalidArgument, "%s: buff is NULL but size is %zu", fn, size);
  static std::once_flag once;
  std::call_once(once, [] {
    loomLogInfo("REG",
                "ncclCommRegister/ncclCommWindowRegister: loom keeps host registrations "
                "only as bookkeeping; it moves unregistered host memory the same way");
  });
  auto* h = new ncclWindow_vidmem{comm, buff, size, winFlags, window};
  std::lock_guard<std::mutex> g(gMutex);
  gLive.insert(h);
  *out = h;
  return ncclSuccess;
}

ncclResult_t remove(const char* fn, ncclComm_t comm, ncclWindow_vidmem* h, bool window) {
  std::lock_guard<std::mutex> g(gMutex);
  auto it = gLive.find(h);
  if (it == gLive.end() || h->window != window || h->comm != comm)
    return fail(ncclInvalidArgument,
                "%s: %p is not a %s of this communicator (never made, made on another "
                "communicator, or already given back)",
                fn, static_cast<void*>(h), window ? "window" : "registration");
  gLive.erase(it);
  delete h;
  return ncclSuccess;
}

}  // namespace

void dropRegistrations(ncclComm_t comm) {
  std::lock_guard<std::mutex> g(gMutex);
  for (auto it = gLive.begin(); it != gLive.end();) {
    if ((*it)->comm == comm) {
      delete *it;
      it = gLive.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace loom::nccl

using namespace loom::nccl;

LOOM_NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size,
              void** handle) {
  ncclWindow_vidmem* h = nullptr;
  ncclResult_t r = add("ncclCommRegister", comm, buff, size, NCCL_WIN_DEFAULT, false,
                       handle == nullptr ? nullptr : &h);
  if (r == ncclSuccess) *handle = h;
  return r;
}

LOOM_NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  return remove("ncclCommDeregister", comm, static_cast<ncclWindow_vidmem*>(handle), false);
}

LOOM_NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size,
              ncclWindow_t* win, int winFlags) {
  if ((winFlags & ~NCCL_WIN_COLL_SYMMETRIC) != 0)
    return fail(ncclInvalidArgument,
                "ncclCommWindowRegister: winFlags 0x%x has bits other "
                "than NCCL_WIN_COLL_SYMMETRIC",
                unsigned(winFlags));
  return add("ncclCommWindowRegister", comm, buff, size, winFlags, true, win);
}

LOOM_NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  return remove("ncclCommWindowDeregister", comm, win, true);
}
