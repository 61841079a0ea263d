#include "collectives/store/store_server_connection.h"

#include <sys/socket.h>

#include <cerrno>

namespace ckpt::coll::store_server {
namespace {

// How much one connection may read per wakeup, so that a busy sender cannot starve the others.
constexpr size_t kReadChunkBytes = 64 * 1024;
constexpr int kReadChunksPerWakeup = 16;

}  // namespace

FramePtr Frame(MessageType type, std::string_view payload) {
  return std::make_shared<const std::string>(store_wire::EncodeFrame(type, payload));
}

FramePtr ErrorFrame(const Status& status) { return Frame(MessageType::kError, store_wire::EncodeError(status)); }

std::string RelayHeader(uint32_t channel, uint64_t frame_bytes) {
  std::string header = store_wire::EncodeHeader(MessageType::kRelayed, sizeof channel + frame_bytes);
  header.append(reinterpret_cast<const char*>(&channel), sizeof channel);
  return header;
}

FramePtr RelayedFrame(uint32_t channel, std::string_view frame) {
  std::string relayed = RelayHeader(channel, frame.size());
  relayed.append(frame.data(), frame.size());
  return std::make_shared<const std::string>(std::move(relayed));
}

void ReadFrom(Connection& c, FrameHandler& handler) {
  char buffer[kReadChunkBytes];
  for (int chunk = 0; chunk < kReadChunksPerWakeup && !c.closed; ++chunk) {
    const ssize_t n = recv(c.fd.get(), buffer, sizeof buffer, 0);
    if (n > 0) {
      c.in.append(buffer, static_cast<size_t>(n));
      ParseFrames(c, handler);
    } else if (n == 0) {
      handler.OnLost(c);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return;
    } else if (errno != EINTR) {
      handler.OnLost(c);
    }
  }
}

void ParseFrames(Connection& c, FrameHandler& handler) {
  size_t pos = 0;
  while (!c.closed && (c.out.empty() || ReadsAhead(c)) && c.in.size() - pos >= store_wire::kHeaderBytes) {
    const store_wire::FrameHeader header = store_wire::DecodeHeader(std::string_view(c.in).substr(pos));
    const uint64_t limit = c.rank < 0     ? store_wire::kMaxHandshakeBytes
                           : c.relay_link ? store_wire::kMaxRelayedBytes
                                          : store_wire::kMaxMessageBytes;
    if (header.length > limit) {
      handler.OnLost(c);
      return;
    }
    if (c.in.size() - pos - store_wire::kHeaderBytes < header.length) break;
    const std::string_view payload(c.in.data() + pos + store_wire::kHeaderBytes, header.length);
    pos += store_wire::kHeaderBytes + header.length;
    handler.OnFrame(c, header.type, payload);
  }
  c.in.erase(0, pos);
}

void Send(Connection& c, FramePtr frame) {
  if (c.closed || c.hung_up) return;
  if (c.via != nullptr) {
    Connection& link = *c.via;
    if (link.closed || link.hung_up) return;
    link.out.push_back(std::make_shared<const std::string>(RelayHeader(c.channel, frame->size())));
    link.out.push_back(std::move(frame));
    return Flush(link);
  }
  c.out.push_back(std::move(frame));
  Flush(c);
}

void Flush(Connection& c) {
  while (!c.out.empty() && !c.hung_up) {
    const std::string& front = *c.out.front();
    const ssize_t n = send(c.fd.get(), front.data() + c.out_offset, front.size() - c.out_offset, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) c.hung_up = true;
      return;
    }
    c.out_offset += static_cast<size_t>(n);
    if (c.out_offset == front.size()) {
      c.out.pop_front();
      c.out_offset = 0;
    }
  }
}

void Answer(Connection& c, const FramePtr& frame) {
  c.pending = Pending::kNone;
  c.wait_key.clear();
  Send(c, frame);
}

void ReplyToPending(const Connections& conns, Pending kind, uint64_t sequence, const FramePtr& frame) {
  for (const auto& c : conns) {
    if (c->pending == kind && (kind != Pending::kAllGather || c->sequence == sequence)) Answer(*c, frame);
  }
}

void SetPending(Connection& c, Pending kind, uint64_t timeout_ms) {
  c.pending = kind;
  c.timeout = store_wire::ClampTimeout(timeout_ms);
  c.deadline = Clock::now() + c.timeout;
}

}  // namespace ckpt::coll::store_server
