#include "base/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <vector>

#include "base/params.h"

namespace loom::net {

int Address::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void Address::setPort(int port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
}

std::string Address::toString() const {
  char host[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, host,
              sizeof(host));
    return strprintf("%s:%d", host, port());
  }
  if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, host,
              sizeof(host));
    return strprintf("[%s]:%d", host, port());
  }
  return "<no address>";
}

Status parseAddress(const std::string& text, Address* out) {
  std::string host = text, port = "0";
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos)
      return errorf(loomInvalidArgument, "address \"%s\": missing ']'", text.c_str());
    host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':')
        return errorf(loomInvalidArgument, "address \"%s\": expected ':' after ']'",
                      text.c_str());
      port = text.substr(close + 2);
    }
  } else if (std::count(text.begin(), text.end(), ':') == 1) {
    size_t colon = text.find(':');
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  addrinfo hints = {};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = AF_UNSPEC;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr)
    return errorf(loomInvalidArgument, "address \"%s\": cannot resolve (%s)", text.c_str(),
                  gai_strerror(rc));
  memcpy(&out->storage, res->ai_addr, res->ai_addrlen);
  out->len = res->ai_addrlen;
  freeaddrinfo(res);
  return Status::ok();
}

namespace {

// LOOM_SOCKET_IFNAME like NCCL_SOCKET_IFNAME: comma list of prefixes; a leading '^' excludes
// them, a leading '=' makes the names exact.
bool interfaceWanted(const std::string& spec, const char* name) {
  if (spec.empty()) return true;
  std::string s = spec;
  bool exclude = false, exact = false;
  if (!s.empty() && s[0] == '^') exclude = true, s = s.substr(1);
  if (!s.empty() && s[0] == '=') exact = true, s = s.substr(1);
  bool match = false;
  size_t start = 0;
  while (start <= s.size()) {
    size_t comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos
                                                                  : comma - start);
    if (!item.empty() &&
        (exact ? item == name : strncmp(name, item.c_str(), item.size()) == 0))
      match = true;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return exclude ? !match : match;
}

}  // namespace

Status listInterfaces(std::vector<Interface>* out) {
  std::string spec = params::getString("LOOM_SOCKET_IFNAME");
  std::string fam = params::getString("LOOM_SOCKET_FAMILY");
  int wantFamily = fam == "AF_INET" ? AF_INET : fam == "AF_INET6" ? AF_INET6 : AF_UNSPEC;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0)
    return errorf(loomSystemError, "getifaddrs: %s", strerror(errno));
  out->clear();
  for (const ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || !(ifa->ifa_flags & IFF_UP)) continue;
    int f = ifa->ifa_addr->sa_family;
    if (f != AF_INET && f != AF_INET6) continue;
    if (wantFamily != AF_UNSPEC && f != wantFamily) continue;
    if (f == AF_INET6) {  // link-local IPv6 needs scope ids everywhere: skip it
      auto* a6 = reinterpret_cast<const sockaddr_in6*>(ifa->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) continue;
    }
    if (!interfaceWanted(spec, ifa->ifa_name)) continue;
    auto same = std::find_if(out->begin(), out->end(),
                             [&](const Interface& i) { return i.name == ifa->ifa_name; });
    // One address per interface, IPv4 where it has one.
    if (same != out->end() && !(same->address.family() == AF_INET6 && f == AF_INET)) continue;
    Interface item;
    item.name = ifa->ifa_name;
    item.loopback = (ifa->ifa_flags & IFF_LOOPBACK) != 0;
    item.address.len = f == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    memcpy(&item.address.storage, ifa->ifa_addr, item.address.len);
    item.address.setPort(0);
    if (same != out->end()) *same = item; else out->push_back(item);
  }
  freeifaddrs(list);
  if (out->empty())
    return errorf(loomSystemError, "no network interface matches LOOM_SOCKET_IFNAME=\"%s\"%s",
                  spec.c_str(), fam.empty() ? "" : (" and LOOM_SOCKET_FAMILY=" + fam).c_str());
  return Status::ok();
}

Status chooseInterfaceAddress(Address* out, std::string* ifname) {
  std::vector<Interface> all;
  LOOM_TRY(listInterfaces(&all));
  // A non-loopback interface wins, IPv4 first; loopback is the last resort.
  auto order = [](const Interface& c) {
    return (c.loopback ? 2 : 0) + (c.address.family() == AF_INET ? 0 : 1);
  };
  const Interface* pick = nullptr;
  for (const Interface& i : all)
    if (pick == nullptr || order(i) < order(*pick)) pick = &i;
  *out = pick->address;
  if (ifname) *ifname = pick->name;
  return Status::ok();
}

Status listenOn(const Address& addr, int* fd, Address* bound, int* failedErrno) {
  int s = socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return errorf(loomSystemError, "socket: %s", strerror(errno));
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(s, reinterpret_cast<const sockaddr*>(&addr.storage), addr.len) != 0) {
    int e = errno;
    close(s);
    if (failedErrno) *failedErrno = e;
    return errorf(loomSystemError, "bind %s: %s", addr.toString().c_str(), strerror(e));
  }
  if (listen(s, 1024) != 0) {
    int e = errno;
    close(s);
    if (failedErrno) *failedErrno = e;
    return errorf(loomSystemError, "listen %s: %s", addr.toString().c_str(), strerror(e));
  }
  bound->len = sizeof(bound->storage);
  getsockname(s, reinterpret_cast<sockaddr*>(&bound->storage), &bound->len);
  *fd = s;
  return Status::ok();
}

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Status setNonBlocking(int fd, bool on) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0) return errorf(loomSystemError, "fcntl: %s", strerror(errno));
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (fcntl(fd, F_SETFL, flags) < 0) return errorf(loomSystemError, "fcntl: %s", strerror(errno));
  return Status::ok();
}

namespace {

// Waits for events on fd until the deadline; loomTimeout when it passes.
Status waitFd(int fd, short events, const Deadline& deadline, const char* what) {
  for (;;) {
    pollfd p = {fd, events, 0};
    int ms = deadline.remainingMs(1000);
    int rc = poll(&p, 1, ms);
    if (rc > 0) return Status::ok();
    if (rc < 0 && errno != EINTR) return errorf(loomSystemError, "poll: %s", strerror(errno));
    if (rc == 0 && deadline.expired())
      return errorf(loomTimeout, "timed out waiting to %s (LOOM_TIMEOUT_MS)", what);
  }
}

}  // namespace

Status connectTo(const Address& addr, const Deadline& deadline, int* fd) {
  int delayMs = 1;
  for (;;) {
    int s = socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0) return errorf(loomSystemError, "socket: %s", strerror(errno));
    int rc = connect(s, reinterpret_cast<const sockaddr*>(&addr.storage), addr.len);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      Status st = waitFd(s, POLLOUT, deadline, ("connect to " + addr.toString()).c_str());
      if (!st.isOk()) {
        close(s);
        return st;
      }
      socklen_t len = sizeof(err);
      getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == 0) {
      setNoDelay(s);
      LOOM_TRY(setNonBlocking(s, false));
      *fd = s;
      return Status::ok();
    }
    close(s);
    // The listener may not exist yet (a peer still starting): retry until the deadline.
    if ((err == ECONNREFUSED || err == ETIMEDOUT || err == ENETUNREACH || err == EAGAIN) &&
        !deadline.expired()) {
      usleep(delayMs * 1000);
      delayMs = std::min(delayMs * 2, 100);
      continue;
    }
    return errorf(err == ECONNREFUSED ? loomRemoteError : loomSystemError, "connect to %s: %s",
                  addr.toString().c_str(), strerror(err));
  }
}

Status connectStart(const Address& addr, int* fd) {
  int s = socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s < 0) return errorf(loomSystemError, "socket: %s", strerror(errno));
  if (connect(s, reinterpret_cast<const sockaddr*>(&addr.storage), addr.len) != 0 &&
      errno != EINPROGRESS) {
    int err = errno;
    close(s);
    return errorf(err == ECONNREFUSED ? loomRemoteError : loomSystemError, "connect to %s: %s",
                  addr.toString().c_str(), strerror(err));
  }
  *fd = s;
  return Status::ok();
}

Status connectDone(int fd, bool* done) {
  pollfd p = {fd, POLLOUT, 0};
  *done = false;
  if (poll(&p, 1, 0) <= 0) return Status::ok();
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0)
    return errorf(err == ECONNREFUSED ? loomRemoteError : loomSystemError, "connect: %s",
                  strerror(err));
  setNoDelay(fd);
  *done = true;
  return Status::ok();
}

Status acceptOne(int listenFd, const Deadline& deadline, int* fd) {
  LOOM_TRY(waitFd(listenFd, POLLIN, deadline, "accept a connection"));
  int s = accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC);
  if (s < 0) return errorf(loomSystemError, "accept: %s", strerror(errno));
  setNoDelay(s);
  *fd = s;
  return Status::ok();
}

Status sendAll(int fd, const void* data, size_t bytes, const Deadline& deadline) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= size_t(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      LOOM_TRY(waitFd(fd, POLLOUT, deadline, "send"));
      continue;
    }
    return errorf(loomRemoteError, "send: connection lost (%s)", strerror(errno));
  }
  return Status::ok();
}

Status recvAll(int fd, void* data, size_t bytes, const Deadline& deadline) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = recv(fd, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= size_t(n);
      continue;
    }
    if (n == 0) return errorf(loomRemoteError, "connection closed by peer");
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      LOOM_TRY(waitFd(fd, POLLIN, deadline, "receive"));
      continue;
    }
    return errorf(loomRemoteError, "recv: connection lost (%s)", strerror(errno));
  }
  return Status::ok();
}

}  // namespace loom::net
