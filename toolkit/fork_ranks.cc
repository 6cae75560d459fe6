#include "toolkit/fork_ranks.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// AddressSanitizer builds (LOOM_SANITIZE): LeakSanitizer checks each rank as it ends.
#if defined(__SANITIZE_ADDRESS__)
#define LOOM_LEAK_CHECK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOOM_LEAK_CHECK 1
#endif
#endif
#ifdef LOOM_LEAK_CHECK
#include <dirent.h>
#include <sanitizer/lsan_interface.h>
#endif

namespace loom::toolkit {
namespace {

#ifdef LOOM_LEAK_CHECK
// Whether this process runs one thread. A rank forked from a process that runs others (a test
// whose parent serves the bootstrap root) inherits their stacks but not the threads, which
// LeakSanitizer then cannot scan: what only they point to would be reported as leaked.
bool singleThreaded() {
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return false;
  int n = 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n == 1;
}
#endif

bool writeAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= size_t(w);
  }
  return true;
}

bool readAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= size_t(r);
  }
  return true;
}

bool writeString(int fd, const std::string& s) {
  uint64_t len = s.size();
  return writeAll(fd, &len, sizeof(len)) && writeAll(fd, s.data(), s.size());
}

bool readString(int fd, std::string* s) {
  uint64_t len = 0;
  if (!readAll(fd, &len, sizeof(len))) return false;
  s->resize(len);
  return readAll(fd, s->data(), len);
}

// Pins the calling process to the (index mod count)-th CPU of the set it may run on.
void bindToCpu(int index) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  const int count = CPU_COUNT(&allowed);
  if (count == 0) return;
  int wanted = index % count;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed) || wanted-- > 0) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    sched_setaffinity(0, sizeof(one), &one);
    return;
  }
}

bool failed(const RankResult& r, int aboveExit) { return r.signal != 0 || r.exitCode > aboveExit; }

}  // namespace

std::vector<std::string> RankContext::allgather(const std::string& mine) {
  std::vector<std::string> all(nranks_);
  if (!writeString(toParent_, mine)) _exit(101);
  for (auto& s : all)
    if (!readString(fromParent_, &s)) _exit(102);
  return all;
}

// The launcher's side of one run: forks the ranks, then relays their allgathers, drains their
// stderr and reaps them until all have exited (or the deadline or a failure stops them).
struct ForkRunner {
  ForkRunner(int n, const ForkOptions& options)
      : options_(options),
        results_(n),
        pids_(n, -1),
        up_(n, -1),
        down_(n, -1),
        err_(n, -1),
        pending_(n),
        has_(n, false),
        alive_(n, false) {}

  std::vector<RankResult> run(const std::function<int(RankContext&)>& fn) {
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < nranks(); ++r) forkRank(r, fn);
    signal(SIGPIPE, SIG_IGN);
    const auto start = std::chrono::steady_clock::now();
    while (living_ > 0) {
      waitForActivity();
      relayAllgathers();
      reapExited();
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (options_.timeoutSec > 0 && elapsed > options_.timeoutSec) killPastDeadline();
    }
    for (int r = 0; r < nranks(); ++r) {
      drainOutput(r);
      close(up_[r]);
      if (err_[r] >= 0) close(err_[r]);
      if (down_[r] >= 0) close(down_[r]);
    }
    return std::move(results_);
  }

 private:
  int nranks() const { return int(results_.size()); }

  void forkRank(int r, const std::function<int(RankContext&)>& fn) {
    int u[2], d[2], e[2] = {-1, -1};
    if (pipe(u) || pipe(d) || (options_.captureOutput && pipe(e))) abort();
#ifdef LOOM_LEAK_CHECK
    const bool checkLeaks = singleThreaded();
#endif
    const pid_t pid = fork();
    if (pid < 0) abort();
    if (pid == 0) {
      // A rank must not outlive the launcher (Ctrl-C, a killed test or sweep script).
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (options_.bindCores) bindToCpu(r);
      // The child: only its own pipe ends stay open.
      for (int q = 0; q < r; ++q) {
        close(up_[q]), close(down_[q]);
        if (err_[q] >= 0) close(err_[q]);
      }
      close(u[0]);
      close(d[1]);
      if (e[0] >= 0) {
        close(e[0]);
        dup2(e[1], 2);
        close(e[1]);
      }
      RankContext ctx;
      ctx.rank_ = r;
      ctx.nranks_ = nranks();
      ctx.toParent_ = u[1];
      ctx.fromParent_ = d[0];
      const int rc = fn(ctx);
      fflush(stdout);
      fflush(stderr);
#ifdef LOOM_LEAK_CHECK
      // _exit skips the check LeakSanitizer makes at exit; a leak is reported (the sanitizer
      // run fails on any report) without changing what the rank returns.
      if (checkLeaks) __lsan_do_recoverable_leak_check();
#endif
      _exit(rc);
    }
    close(u[1]);
    close(d[0]);
    if (e[1] >= 0) close(e[1]);
    pids_[r] = pid, up_[r] = u[0], down_[r] = d[1], err_[r] = e[0];
    if (err_[r] >= 0) fcntl(err_[r], F_SETFL, O_NONBLOCK);
    alive_[r] = true;
    ++living_;
  }

  // Until a rank writes, exits (its pipes hang up) or the deadline's next check is due.
  void waitForActivity() {
    std::vector<pollfd> fds;
    for (int r = 0; r < nranks(); ++r) {
      fds.push_back({alive_[r] ? up_[r] : -1, POLLIN, 0});
      fds.push_back({alive_[r] ? err_[r] : -1, POLLIN, 0});
    }
    poll(fds.data(), fds.size(), options_.timeoutSec > 0 ? 50 : 1000);
    for (int r = 0; r < nranks(); ++r) {
      drainOutput(r);
      if ((fds[2 * r].revents & POLLIN) && !has_[r] && readString(up_[r], &pending_[r]))
        has_[r] = true;
    }
  }

  void drainOutput(int r) {
    if (err_[r] < 0) return;
    char buf[4096];
    ssize_t k;
    while ((k = read(err_[r], buf, sizeof(buf))) > 0) results_[r].output.append(buf, k);
  }

  // Once every rank has contributed, every rank gets all contributions.
  void relayAllgathers() {
    for (int r = 0; r < nranks(); ++r)
      if (!has_[r]) return;
    for (int r = 0; r < nranks(); ++r)
      for (int q = 0; q < nranks(); ++q) writeString(down_[r], pending_[q]);
    for (int r = 0; r < nranks(); ++r) has_[r] = false;
  }

  void reapExited() {
    for (int r = 0; r < nranks(); ++r) {
      if (!alive_[r]) continue;
      int status = 0;
      if (waitpid(pids_[r], &status, WNOHANG) != pids_[r]) continue;
      alive_[r] = false;
      --living_;
      if (WIFEXITED(status)) results_[r].exitCode = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) results_[r].signal = WTERMSIG(status);
      // A dead rank can never join an allgather: unblock the others by closing.
      close(down_[r]);
      down_[r] = -1;
      if (options_.stopOthersAboveExit >= 0 && !results_[r].stopped &&
          failed(results_[r], options_.stopOthersAboveExit)) {
        stopOthers();
      }
    }
  }

  void stopOthers() {
    for (int r = 0; r < nranks(); ++r) {
      if (!alive_[r] || results_[r].stopped) continue;
      kill(pids_[r], SIGTERM);
      results_[r].stopped = true;
    }
  }

  void killPastDeadline() {
    for (int r = 0; r < nranks(); ++r) {
      if (!alive_[r]) continue;
      kill(pids_[r], SIGKILL);
      results_[r].output += "\n[harness] rank killed: the run passed its time limit\n";
      results_[r].stopped = true;
    }
    for (int r = 0; r < nranks(); ++r) {
      if (!alive_[r]) continue;
      waitpid(pids_[r], nullptr, 0);
      alive_[r] = false;
      results_[r].exitCode = -1;
    }
    living_ = 0;
  }

  const ForkOptions& options_;
  std::vector<RankResult> results_;
  std::vector<pid_t> pids_;
  std::vector<int> up_, down_, err_;  // the launcher's ends of each rank's pipes
  std::vector<std::string> pending_;  // the allgather contributions received so far
  std::vector<bool> has_, alive_;
  int living_ = 0;
};

std::vector<RankResult> runRanks(int n, const std::function<int(RankContext&)>& fn,
                                 const ForkOptions& options) {
  return ForkRunner(n, options).run(fn);
}

std::string describeFailures(const std::vector<RankResult>& results, const ForkOptions& options) {
  std::string out;
  for (size_t r = 0; r < results.size(); ++r) {
    bool expected = false;
    for (int e : options.expectedToDie) expected = expected || e == int(r);
    if (expected) continue;
    const RankResult& res = results[r];
    if (res.exitCode == 0 && res.signal == 0) continue;
    char head[128];
    snprintf(head, sizeof(head), "rank %zu: exit %d signal %d\n", r, res.exitCode, res.signal);
    out += head + res.output;
  }
  return out;
}

}  // namespace loom::toolkit
