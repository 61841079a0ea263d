// libFuzzer entry for the TCP store's server (collectives/store/tcp_store_server.cc): each input is what up to four
// clients send to a fresh server on loopback, so the frame parser, the hello and every request's payload parsing run
// exactly as they do for a real peer, through the server's own socket loop and no seam of its own.
//
// Input: byte 0 picks the world size (1 + byte % 3), whether hellos are signed (byte / 3 % 4 != 3) and whether the
// ranks come through relays of rows of 2 (byte / 12 % 2, in worlds of 2 or 3); the rest is
// split at each kConnectionBreak into the byte streams of successive connections. Each client reads the server's
// challenge; where its stream opens with a hello, the harness signs it with the job's secret and that challenge, as
// a real rank would (the fuzzer could never forge the HMAC, so without this it would only ever meet the refusal),
// and leaves one input in four unsigned to explore the refusal too. Every client sends its whole stream, then
// half-closes; the input is done once the server has closed every connection (it always does at end of input: the
// stream ends mid-frame, or with a goodbye, or the connection counts as a dead rank).
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/store/store_auth.h"
#include "collectives/store/tcp_store_server.h"
#include "collectives/store/tcp_store_wire.h"
#include "common/bytes.h"
#include "common/unique_fd.h"

namespace {

constexpr std::string_view kConnectionBreak = "CKPTNEXT";
constexpr size_t kMaxConnections = 4;
constexpr char kSecret[] = "the-fuzzed-jobs-secret-0123456789";

namespace wire = ckpt::coll::store_wire;

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

// The nonce of the challenge the server opens `fd` with; empty if it sent something else.
std::string ReadChallenge(int fd) {
  char header[wire::kHeaderBytes];
  if (recv(fd, header, sizeof header, MSG_WAITALL) != static_cast<ssize_t>(sizeof header)) return {};
  const wire::FrameHeader decoded = wire::DecodeHeader(std::string_view(header, sizeof header));
  if (decoded.type != static_cast<uint32_t>(wire::MessageType::kChallenge) || decoded.length > 1024) return {};
  std::string payload(decoded.length, '\0');
  if (recv(fd, payload.data(), payload.size(), MSG_WAITALL) != static_cast<ssize_t>(payload.size())) return {};
  ckpt::ByteReader reader(payload, "challenge");
  uint32_t magic = 0, version = 0;
  std::string nonce;
  if (!reader.U32(&magic).ok() || !reader.U32(&version).ok() || !reader.Bytes(&nonce).ok()) return {};
  return nonce;
}

// `stream` with its first frame, if it is a hello whose fields parse, signed for `server_nonce`.
std::string SignFirstHello(std::string_view stream, const std::string& server_nonce) {
  if (stream.size() < wire::kHeaderBytes) return std::string(stream);
  const wire::FrameHeader header = wire::DecodeHeader(stream);
  if (header.type != static_cast<uint32_t>(wire::MessageType::kHello) ||
      header.length > stream.size() - wire::kHeaderBytes) {
    return std::string(stream);
  }
  const std::string_view payload = stream.substr(wire::kHeaderBytes, header.length);
  ckpt::ByteReader reader(payload, "hello");
  uint32_t u32 = 0;
  int32_t i32 = 0;
  uint64_t u64 = 0;
  uint8_t u8 = 0;
  std::string client_nonce;
  std::string relay_host;
  if (!reader.U32(&u32).ok() || !reader.U32(&u32).ok() || !reader.I32(&i32).ok() || !reader.I32(&i32).ok() ||
      !reader.U64(&u64).ok() || !reader.U8(&u8).ok()) {
    return std::string(stream);
  }
  // A relay's hello (role 2) says where the relay listens before its nonce.
  if (u8 == 2 && (!reader.Bytes(&relay_host).ok() || !reader.I32(&i32).ok())) return std::string(stream);
  if (!reader.Bytes(&client_nonce).ok()) return std::string(stream);
  const std::string_view signed_fields = payload.substr(0, reader.position());
  ckpt::ByteWriter hello;
  hello.Bytes(ckpt::coll::store_auth::HelloProof(kSecret, server_nonce, client_nonce, signed_fields));
  return wire::EncodeFrame(wire::MessageType::kHello, std::string(signed_fields) + hello.data()) +
         std::string(stream.substr(wire::kHeaderBytes + header.length));
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
  const bool sign_hellos = data[0] / 3 % 4 != 3;
  // Half the inputs reach a store whose ranks come through relays: relay hellos and relayed frames are then served.
  const int relay_columns = world_size > 1 && data[0] / 12 % 2 == 1 ? 2 : 0;
  auto server = ckpt::coll::StoreServer::Start("127.0.0.1", 0, world_size, relay_columns,
                                               [](int) -> ckpt::Result<std::string> { return std::string(kSecret); });
  if (!server.ok()) std::abort();
  const std::vector<std::string_view> streams =
      SplitConnections(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  std::vector<ckpt::UniqueFd> clients;
  for (std::string_view stream : streams) {
    clients.push_back(Connect(server.value()->port()));
    const std::string nonce = ReadChallenge(clients.back().get());
    SendAll(clients.back().get(), sign_hellos && !nonce.empty() ? SignFirstHello(stream, nonce) : std::string(stream));
  }
  for (const ckpt::UniqueFd& client : clients) shutdown(client.get(), SHUT_WR);
  for (const ckpt::UniqueFd& client : clients) DrainUntilClosed(client.get());
  server.value()->Stop(std::chrono::milliseconds(0));
  return 0;
}
