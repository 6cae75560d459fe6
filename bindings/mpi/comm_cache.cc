// One loom communicator per MPI communicator: made on the first call that runs on loom,
// kept in an attribute of the MPI communicator, destroyed by the attribute's delete callback
// when the MPI communicator is freed (MPI_Comm_free, or MPI_Finalize for the predefined ones).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <list>
#include <mutex>

#include "bindings/mpi/interpose.h"
#include "loom/loom_mpi.h"

namespace loom::mpi {
namespace {

// The attribute: the loom communicator, or NULL with why there is none, so that a
// communicator loom cannot serve is asked once.
struct Entry {
  loomComm_t comm;
  Route route;
  bool threads;  // every rank runs MPI_THREAD_MULTIPLE (see create)
};

int gKeyval = MPI_KEYVAL_INVALID;
std::once_flag gKeyvalOnce;
std::atomic<int> gLive{0};

// Destructions still running in the background: see deleteEntry. Never destroyed: a
// process that exits without MPI_Finalize must not wait in a future's destructor.
std::mutex gPendingMutex;
std::list<std::future<void>>& gPending = *new std::list<std::future<void>>;

void destroy(loomComm_t comm) {
  endQueue(comm);  // its non-blocking calls first: they belong to the communicator
  forgetDecisions(comm);
  loomCommDestroy(comm);
  gLive.fetch_sub(1, std::memory_order_relaxed);
}

// Every rank frees the MPI communicator, so every rank destroys its part of the loom one. But
// MPI_Comm_free does not wait for the other ranks, and loomCommDestroy does on the rank that
// serves the rendezvous (rank 0): a program whose ranks free a communicator at different
// points (one before a collective on another communicator, one after it) would deadlock
// there. So rank 0 destroys in the background, and MPI_Finalize waits for it.
int deleteEntry(MPI_Comm, int, void* value, void*) {
  auto* entry = static_cast<Entry*>(value);
  int rank = 0;
  if (entry->comm != nullptr) loomCommUserRank(entry->comm, &rank);
  if (entry->comm != nullptr && rank != 0) destroy(entry->comm);
  if (entry->comm != nullptr && rank == 0) {
    std::lock_guard<std::mutex> lock(gPendingMutex);
    gPending.remove_if([](std::future<void>& f) {
      return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    });
    gPending.push_back(std::async(std::launch::async, destroy, entry->comm));
  }
  delete entry;
  return MPI_SUCCESS;
}

int keyval() {
  // Duplicates get a loom communicator of their own (MPI_COMM_NULL_COPY_FN copies nothing).
  std::call_once(gKeyvalOnce, [] {
    PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, deleteEntry, &gKeyval, nullptr);
  });
  return gKeyval;
}

// Collective over comm: every rank learns whether all of them made their part, so that they
// all run on loom or all fall through. A rank that made its part while another failed aborts
// it (the others never join it). The same exchange tells whether every rank runs
// MPI_THREAD_MULTIPLE, which the non-blocking calls need on all of them or none.
Entry* create(MPI_Comm comm) {
  int inter = 0;
  PMPI_Comm_test_inter(comm, &inter);
  if (inter) return new Entry{nullptr, Route::BadComm, false};
  loomComm_t made = nullptr;
  int provided = MPI_THREAD_SINGLE;
  PMPI_Query_thread(&provided);
  const int mine[2] = {loomCommInitFromMpi(&made, comm, nullptr) == loomSuccess,
                       provided == MPI_THREAD_MULTIPLE};
  int all[2] = {0, 0};
  PMPI_Allreduce(mine, all, 2, MPI_INT, MPI_MIN, comm);
  const int allOk = all[0];
  if (!allOk) {
    if (made != nullptr) loomCommAbort(made);
    static std::once_flag said;
    std::call_once(said, [] {
      std::fprintf(stderr, "loom-mpi: no loom communicator could be made for an MPI "
                           "communicator, whose calls run on MPI (LOOM_DEBUG=INFO says why)\n");
    });
    return new Entry{nullptr, Route::NoLoom, false};
  }
  gLive.fetch_add(1, std::memory_order_relaxed);
  return new Entry{made, Route::Loom, all[1] != 0};
}

void release(MPI_Comm comm) {
  void* value = nullptr;
  int found = 0;
  PMPI_Comm_get_attr(comm, gKeyval, &value, &found);
  if (found) PMPI_Comm_delete_attr(comm, gKeyval);
}

}  // namespace

loomComm_t loomCommOf(MPI_Comm comm, Route* route) {
  if (comm == MPI_COMM_NULL) {
    *route = Route::BadComm;
    return nullptr;
  }
  const int key = keyval();
  void* value = nullptr;
  int found = 0;
  PMPI_Comm_get_attr(comm, key, &value, &found);
  auto* entry = static_cast<Entry*>(value);
  if (!found) {
    entry = create(comm);
    PMPI_Comm_set_attr(comm, key, entry);
  }
  *route = entry->route;
  return entry->comm;
}

loomComm_t madeLoomCommOf(MPI_Comm comm, Route* route) {
  void* value = nullptr;
  int found = 0;
  if (comm != MPI_COMM_NULL) PMPI_Comm_get_attr(comm, keyval(), &value, &found);
  auto* entry = static_cast<Entry*>(value);
  if (!found || entry->comm == nullptr) {
    *route = found ? entry->route : Route::NotMade;
    return nullptr;
  }
  *route = entry->threads ? Route::Loom : Route::Threads;
  return entry->threads ? entry->comm : nullptr;
}

void releaseAtFinalize() {
  if (gKeyval == MPI_KEYVAL_INVALID) return;
  // MPI_COMM_SELF first, as MPI_Finalize itself would; then the world, whose destruction on
  // its rank 0 waits for the other ranks (all in MPI_Finalize too).
  release(MPI_COMM_SELF);
  release(MPI_COMM_WORLD);
  PMPI_Comm_free_keyval(&gKeyval);
  // Every rank is in MPI_Finalize now, so every destruction in the background can finish.
  std::lock_guard<std::mutex> lock(gPendingMutex);
  for (std::future<void>& f : gPending) f.wait();
  gPending.clear();
}

int liveComms() { return gLive.load(std::memory_order_relaxed); }

}  // namespace loom::mpi
