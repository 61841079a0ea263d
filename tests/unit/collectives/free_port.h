// A TCP port on 127.0.0.1 that is free now, for a test's store. Picked at random below the kernel's ephemeral range
// (32768 on): a port from that range, found by binding port 0, can be handed to any other socket's connection (UCX
// and the store make many, in this process and in the tests running beside it) before the test binds it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>

namespace ckpt::testing {

inline int PickFreePort() {
  static std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> ports(10000, 32767);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = ports(random);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    close(fd);
    if (free) return port;
  }
  return 0;  // no port found: the store then refuses port 0 and the test fails saying so
}

}  // namespace ckpt::testing
