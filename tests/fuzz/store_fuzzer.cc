// libFuzzer entry for the TCP store's server (collectives/tcp_store_server.cc): each input is what up to four
// clients send to a fresh server on loopback, so the frame parser, the hello and every request's payload parsing run
// exactly as they do for a real peer, through the server's own socket loop and no seam of its own.
//
// Input: byte 0 picks the world size (1 to 3); the rest is split at each kConnectionBreak into the byte streams of
// successive connections. Every client sends its whole stream, then half-closes; the input is done once the server
// has closed every connection (it always does at end of input: the stream ends mid-frame, or with a goodbye, or the
// connection counts as a dead rank).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "collectives/tcp_store_server.h"
#include "common/unique_fd.h"

namespace {

constexpr std::string_view kConnectionBreak = "CKPTNEXT";
constexpr size_t kMaxConnections = 4;

std::vector<std::string_view> SplitConnections(std::string_view input) {
  std::vector<std::string_view> streams;
  while (streams.size() + 1 < kMaxConnections) {
    const size_t cut = input.find(kConnectionBreak);
    if (cut == std::string_view::npos) break;
    streams.push_back(input.substr(0, cut));
    input.remove_prefix(cut + kConnectionBreak.size());
  }
  streams.push_back(input);
  return streams;
}

ckpt::UniqueFd Connect(int port) {
  ckpt::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (!fd.valid() || connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    std::abort();  // the harness itself failed: no result of this input would mean anything
  }
  return fd;
}

// Sends what it can: the server may hang up part way, which is one of the behaviours under test.
void SendAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

// Reads replies until the server closes the connection.
void DrainUntilClosed(int fd) {
  char buffer[4096];
  while (recv(fd, buffer, sizeof buffer, 0) > 0) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int world_size = 1 + data[0] % 3;
  auto server = ckpt::coll::StoreServer::Start("127.0.0.1", 0, world_size);
  if (!server.ok()) std::abort();
  const std::vector<std::string_view> streams =
      SplitConnections(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  std::vector<ckpt::UniqueFd> clients;
  for (std::string_view stream : streams) {
    clients.push_back(Connect(server.value()->port()));
    SendAll(clients.back().get(), stream);
  }
  for (const ckpt::UniqueFd& client : clients) shutdown(client.get(), SHUT_WR);
  for (const ckpt::UniqueFd& client : clients) DrainUntilClosed(client.get());
  server.value()->Stop(std::chrono::milliseconds(0));
  return 0;
}
