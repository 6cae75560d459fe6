// Socket helpers shared by the bootstrap and the TCP transport: addresses (IPv4 and IPv6),
// interface choice (LOOM_SOCKET_IFNAME), and transfers bounded by a deadline.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>
#include <vector>

#include "base/clock.h"
#include "base/status.h"

namespace loom::net {

struct Address {
  sockaddr_storage storage = {};
  socklen_t len = 0;
  int family() const { return storage.ss_family; }
  int port() const;
  void setPort(int port);
  std::string toString() const;  // "1.2.3.4:5" or "[::1]:5"
};

// Parses "host:port", "[v6addr]:port" or a bare host (port 0). Hosts resolve by getaddrinfo.
Status parseAddress(const std::string& text, Address* out);
struct Interface {
  std::string name;  // "eth0", "lo"
  Address address;   // port 0
  bool loopback = false;
};
// The interfaces that are up and that LOOM_SOCKET_IFNAME / LOOM_SOCKET_FAMILY allow, in the
// system's order, one address each (IPv4 where there is one); an error if none.
Status listInterfaces(std::vector<Interface>* out);
// The address to listen on, per LOOM_SOCKET_IFNAME / LOOM_SOCKET_FAMILY; port 0.
Status chooseInterfaceAddress(Address* out, std::string* ifname);

// A socket listening on addr (port 0 picks one); *bound receives the actual address. Where
// bind or listen fails, *failedErrno (if given) receives its errno (EADDRINUSE: taken).
Status listenOn(const Address& addr, int* fd, Address* bound, int* failedErrno = nullptr);
// Connects (blocking socket, retried on ECONNREFUSED until the deadline).
Status connectTo(const Address& addr, const Deadline& deadline, int* fd);
// Connects without waiting: *fd is a non-blocking socket whose connection is under way (or
// made); connectDone says when it is made (and sets TCP_NODELAY then). A refusal is an error.
Status connectStart(const Address& addr, int* fd);
Status connectDone(int fd, bool* done);
// Accepts one connection, waiting at most until the deadline.
Status acceptOne(int listenFd, const Deadline& deadline, int* fd);
// Whole transfers on a blocking or non-blocking socket, bounded by the deadline. A closed
// connection is a loomRemoteError.
Status sendAll(int fd, const void* data, size_t bytes, const Deadline& deadline);
Status recvAll(int fd, void* data, size_t bytes, const Deadline& deadline);
void setNoDelay(int fd);
Status setNonBlocking(int fd, bool on);

}  // namespace loom::net
