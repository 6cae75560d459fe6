// Groups (loomGroupStart / loomGroupEnd / loomGroupSimulateEnd): calls queued per thread and
// run together at the outermost end. A group's inits run first, one thread each; then each
// communicator's calls, in a thread of their own where the group holds several communicators
// (they may be ranks of one communicator in this process, which must progress together).
#include <algorithm>
#include <thread>

#include "base/log.h"
#include "comm/handle.h"
#include "comm/stream_calls.h"

namespace loom {
namespace {

struct GroupItem {
  enum class Kind : uint8_t { Init, Collective, P2P } kind;
  loomComm* comm;
  P2PCall p2pCall;
  CallDesc coll;
};
thread_local std::vector<GroupItem> tGroup;

// One communicator's part of a group: its sends and receives together as one plan (so any
// order of calls completes), then its collectives in call order.
Status runCommItems(loomComm* c, std::vector<GroupItem>& items) {
  Status st = checkComm(c, "loomGroupEnd");
  if (!st.isOk()) return st;
  LOOM_TRY(awaitOrdered(c));
  CallHold hold(c);
  thread_local std::vector<P2PCall> p2p;
  thread_local std::vector<const CallDesc*> colls;
  p2p.clear();
  colls.clear();
  for (GroupItem& it : items) {
    if (it.comm != c) continue;
    if (it.kind == GroupItem::Kind::P2P) p2p.push_back(it.p2pCall);
    if (it.kind != GroupItem::Kind::Collective) continue;
    c->impl->recordQueued(&it.coll);
    colls.push_back(&it.coll);
  }
  LOOM_TRY(c->impl->agreeOnCall(colls, p2p));
  if (!p2p.empty()) LOOM_TRY(c->impl->runP2P(p2p));
  for (GroupItem& it : items)
    if (it.comm == c && it.kind == GroupItem::Kind::Collective)
      LOOM_TRY(c->impl->runCollective(it.coll));
  c->scaledInputs.clear();
  return Status::ok();
}

// The group's inits, each in a thread of its own; waits for the blocking ones. Returns
// loomInProgress where a non-blocking one may still run.
Status runInits(std::vector<GroupItem>& items) {
  bool inProgress = false;
  for (GroupItem& it : items)
    if (it.kind == GroupItem::Kind::Init) it.comm->pending->start();
  Status first;
  for (GroupItem& it : items) {
    if (it.kind != GroupItem::Kind::Init) continue;
    if (!it.comm->pending->blocking) {
      inProgress = true;
      continue;
    }
    Status st = awaitReady(it.comm, "loomGroupEnd", true);
    if (!st.isOk() && first.isOk()) first = st;
  }
  if (!first.isOk()) return first;
  return inProgress ? Status(loomInProgress, "a communicator is still being initialised")
                    : Status::ok();
}

// The communicators of the group's calls, in order of first appearance.
void groupComms(const std::vector<GroupItem>& items, std::vector<loomComm*>* comms) {
  comms->clear();
  for (const GroupItem& it : items)
    if (it.kind != GroupItem::Kind::Init &&
        std::find(comms->begin(), comms->end(), it.comm) == comms->end())
      comms->push_back(it.comm);
}

// The group's calls, after its inits (whose result, success or loomInProgress, is `inits`).
Status runGroup(std::vector<GroupItem>& items, const Status& inits) {
  // A reference, for the threads: each thread has its own thread_local.
  thread_local std::vector<loomComm*> commsHere;
  std::vector<loomComm*>& comms = commsHere;
  groupComms(items, &comms);
  std::vector<Status> results(comms.size());
  std::vector<std::thread> threads;
  for (size_t i = 1; i < comms.size(); ++i)
    threads.emplace_back([&, i] { results[i] = runCommItems(comms[i], items); });
  if (!comms.empty()) results[0] = runCommItems(comms[0], items);
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < comms.size(); ++i)
    if (!results[i].isOk()) {
      finish(comms[i], results[i]);  // the communicator's own last error
      return results[i];
    }
  return inits;
}

// What the model predicts for the group's calls: per communicator the sum of its calls (they
// run one after another), the group the slowest communicator (they run side by side).
Status predictGroup(std::vector<GroupItem>& items, std::string_view algorithm, double* seconds) {
  *seconds = 0;
  for (const GroupItem& it : items)
    if (it.kind == GroupItem::Kind::Init)
      return errorf(loomInvalidUsage,
                    "loomGroupSimulateEnd: the group creates a communicator; simulate calls "
                    "of communicators that exist");
  std::vector<loomComm*> comms;
  groupComms(items, &comms);
  for (loomComm* c : comms) {
    LOOM_TRY(checkComm(c, "loomGroupSimulateEnd"));
    double total = 0, t = 0;
    std::vector<P2PCall> p2p;
    for (GroupItem& it : items) {
      if (it.comm != c) continue;
      if (it.kind == GroupItem::Kind::P2P) {
        p2p.push_back(it.p2pCall);
        continue;
      }
      LOOM_TRY(c->impl->predict(it.coll, algorithm, &t));
      total += t;
    }
    LOOM_TRY(c->impl->predictP2P(p2p, &t));
    *seconds = std::max(*seconds, total + t);
    c->scaledInputs.clear();
  }
  return Status::ok();
}

// Takes the thread's queue at the outermost end; nullptr inside a nested group.
std::vector<GroupItem>* endGroup(const char* fn, Status* st) {
  if (tGroupDepth == 0) {
    *st = errorf(loomInvalidUsage, "%s without loomGroupStart", fn);
    return nullptr;
  }
  if (--tGroupDepth > 0) return nullptr;
  // Cleared rather than freed (the items go back to tGroup after the run), so that a loop of
  // like groups, a send/receive exchange per step, allocates nothing.
  thread_local std::vector<GroupItem> items;
  items.clear();
  items.swap(tGroup);
  return &items;
}

// Whether the group's host calls include one of comm (for enqueueGroup).
bool hasHostCalls(loomComm* comm, void* items) {
  for (const GroupItem& it : *static_cast<std::vector<GroupItem>*>(items))
    if (it.comm == comm && it.kind != GroupItem::Kind::Init) return true;
  return false;
}

void giveBack(std::vector<GroupItem>* items) {
  items->clear();
  items->swap(tGroup);  // tGroup is empty: it takes the capacity
}

}  // namespace

thread_local int tGroupDepth LOOM_HOT_TLS = 0;

Status queueCollective(loomComm* comm, const CallDesc& call) {
  tGroup.push_back({GroupItem::Kind::Collective, comm, {}, call});
  return Status::ok();
}

Status queueP2P(loomComm* comm, const P2PCall& call) {
  tGroup.push_back({GroupItem::Kind::P2P, comm, call, {}});
  return Status::ok();
}

void queueInit(loomComm* comm) { tGroup.push_back({GroupItem::Kind::Init, comm, {}, {}}); }

}  // namespace loom

using namespace loom;

extern "C" {

loomResult_t loomGroupStart(void) {
  ++tGroupDepth;
  return loomSuccess;
}

loomResult_t loomGroupEnd(void) {
  Status st;
  std::vector<GroupItem>* items = endGroup("loomGroupEnd", &st);
  if (items == nullptr) return finish(nullptr, st);
  // The stream-ordered calls are enqueued after the inits (which they may need) and before the
  // host calls of other communicators, which may be ranks their calls must progress with.
  st = runInits(*items);
  const bool initsRan = st.isOk() || st.code() == loomInProgress;
  Status ordered = initsRan ? enqueueGroup(hasHostCalls, items) : Status::ok();
  if (!initsRan) dropGroup();
  if (initsRan) st = ordered.isOk() ? runGroup(*items, st) : ordered;
  giveBack(items);
  if (st.code() == loomInProgress) return loomInProgress;
  return finish(nullptr, st.isOk() ? st : st.withContext("loomGroupEnd"));
}

loomResult_t loomGroupSimulateEnd(float* estimatedUs) {
  return loomGroupSimulateEndAs(nullptr, estimatedUs);
}

loomResult_t loomGroupSimulateEndAs(const char* algorithm, float* estimatedUs) {
  Status st;
  std::vector<GroupItem>* items = endGroup("loomGroupSimulateEnd", &st);
  if (items == nullptr) {
    if (st.isOk() && tGroupDepth > 0)  // a nested end: the outermost one simulates
      return loomSuccess;
    return finish(nullptr, st);
  }
  double seconds = 0;
  if (estimatedUs == nullptr)
    st = errorf(loomInvalidArgument, "loomGroupSimulateEnd: estimatedUs is NULL");
  else st = predictGroup(*items, algorithm == nullptr ? "" : algorithm, &seconds);
  // The queued inits are dropped with the group; their handles stay unusable until destroyed.
  // Stream-ordered calls are not simulated.
  giveBack(items);
  dropGroup();
  if (st.isOk()) *estimatedUs = float(seconds * 1e6);
  return finish(nullptr, st);
}

}  // extern "C"
