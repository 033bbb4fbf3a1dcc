#pragma once
// A TCP port no process listens on, for a test's rendezvous store. Ports derived from the
// test's pid collide when ctest starts tests in parallel (neighbouring pids plus offsets);
// the kernel's choice for port 0 does not, and it picks from the ephemeral range at random,
// so the port just closed is not handed out again at once.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

namespace siamese::testing {

inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("free_port: socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  if (!ok) throw std::runtime_error("free_port: no port to bind on 127.0.0.1");
  return ntohs(addr.sin_port);
}

}  // namespace siamese::testing
