#include "base/fork_safe.h"

#include <pthread.h>

#include <vector>

namespace loom {
namespace {

struct Registry {
  std::mutex mutex;  // guards `held`; taken first before a fork, released last after it
  std::vector<std::mutex*> held;
};

Registry& registry() {
  static auto* r = new Registry;  // never destroyed: a fork may run during exit
  return *r;
}

void lockAll() {
  Registry& r = registry();
  r.mutex.lock();
  for (std::mutex* m : r.held) m->lock();
}

void unlockAll() {
  Registry& r = registry();
  for (auto it = r.held.rbegin(); it != r.held.rend(); ++it) (*it)->unlock();
  r.mutex.unlock();
}

}  // namespace

void keepUsableAcrossFork(std::mutex* m) {
  static const int installed = pthread_atfork(lockAll, unlockAll, unlockAll);
  (void)installed;
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mutex);
  r.held.push_back(m);
}

}  // namespace loom
