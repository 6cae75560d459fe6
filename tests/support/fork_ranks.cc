#include "tests/support/fork_ranks.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace loom::testing {
namespace {

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

}  // namespace

std::vector<std::string> RankContext::allgather(const std::string& mine) {
  std::vector<std::string> all(nranks_);
  if (!writeString(toParent_, mine)) _exit(101);
  for (auto& s : all)
    if (!readString(fromParent_, &s)) _exit(102);
  return all;
}

struct ForkRunner {
  static std::vector<RankResult> run(int n, const std::function<int(RankContext&)>& fn,
                                     const ForkOptions& options) {
    std::vector<RankResult> results(n);
    std::vector<pid_t> pids(n);
    std::vector<int> up(n), down(n), err(n);
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < n; ++r) {
      int u[2], d[2], e[2];
      if (pipe(u) || pipe(d) || pipe(e)) abort();
      pid_t pid = fork();
      if (pid == 0) {
        // The child: only its own pipe ends stay open.
        for (int q = 0; q < r; ++q) close(up[q]), close(down[q]), close(err[q]);
        close(u[0]);
        close(d[1]);
        close(e[0]);
        dup2(e[1], 2);
        close(e[1]);
        RankContext ctx;
        ctx.rank_ = r;
        ctx.nranks_ = n;
        ctx.toParent_ = u[1];
        ctx.fromParent_ = d[0];
        int rc = fn(ctx);
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
      }
      close(u[1]);
      close(d[0]);
      close(e[1]);
      pids[r] = pid, up[r] = u[0], down[r] = d[1], err[r] = e[0];
      fcntl(err[r], F_SETFL, O_NONBLOCK);
    }
    signal(SIGPIPE, SIG_IGN);
    // The parent relays allgathers, drains stderr, and reaps, until all exit or time runs out.
    auto start = std::chrono::steady_clock::now();
    std::vector<std::string> pending(n);
    std::vector<bool> has(n, false), alive(n, true);
    int living = n;
    while (living > 0) {
      std::vector<pollfd> fds;
      for (int r = 0; r < n; ++r) {
        fds.push_back({up[r], POLLIN, 0});
        fds.push_back({err[r], POLLIN, 0});
      }
      poll(fds.data(), fds.size(), 50);
      for (int r = 0; r < n; ++r) {
        char buf[4096];
        ssize_t k;
        while ((k = read(err[r], buf, sizeof(buf))) > 0) results[r].output.append(buf, k);
        if ((fds[2 * r].revents & POLLIN) && !has[r]) {
          if (readString(up[r], &pending[r])) has[r] = true;
        }
      }
      bool allHave = true;
      for (int r = 0; r < n; ++r) allHave = allHave && has[r];
      if (allHave) {
        for (int r = 0; r < n; ++r)
          for (int q = 0; q < n; ++q) writeString(down[r], pending[q]);
        for (int r = 0; r < n; ++r) has[r] = false;
      }
      for (int r = 0; r < n; ++r) {
        if (!alive[r]) continue;
        int status = 0;
        if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
          alive[r] = false;
          --living;
          if (WIFEXITED(status)) results[r].exitCode = WEXITSTATUS(status);
          if (WIFSIGNALED(status)) results[r].signal = WTERMSIG(status);
          // A dead rank can never join an allgather: unblock the others by closing.
          close(down[r]);
          down[r] = -1;
        }
      }
      double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                           .count();
      if (elapsed > options.timeoutSec) {
        for (int r = 0; r < n; ++r)
          if (alive[r]) {
            kill(pids[r], SIGKILL);
            results[r].output += "\n[harness] rank killed: the run passed its time limit\n";
          }
        for (int r = 0; r < n; ++r)
          if (alive[r]) waitpid(pids[r], nullptr, 0), alive[r] = false, results[r].exitCode = -1;
        living = 0;
      }
    }
    for (int r = 0; r < n; ++r) {
      char buf[4096];
      ssize_t k;
      while ((k = read(err[r], buf, sizeof(buf))) > 0) results[r].output.append(buf, k);
      close(up[r]);
      close(err[r]);
      if (down[r] >= 0) close(down[r]);
    }
    return results;
  }
};

std::vector<RankResult> runRanks(int n, const std::function<int(RankContext&)>& fn,
                                 const ForkOptions& options) {
  return ForkRunner::run(n, fn, options);
}

std::string describeFailures(const std::vector<RankResult>& results,
                             const ForkOptions& options) {
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

}  // namespace loom::testing
