// Mutexes that a forked child can still lock. fork() copies only the calling thread: a mutex
// another thread (a bootstrap root) held at that instant stays locked forever in the child,
// and the child's first use of it hangs. A mutex registered here is taken before every fork
// and released on both sides after it, so the child always gets it unlocked.
#pragma once

#include <mutex>

namespace loom {

// Registers `m` (which must live until the process exits). Code must never hold two registered
// mutexes at once: the fork takes them in the order they were registered.
void keepUsableAcrossFork(std::mutex* m);

}  // namespace loom
