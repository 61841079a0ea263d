// libFuzzer entry for the protocol between a rank and its ckpt-io-worker (io/worker_protocol.h). The input is a byte
// stream as it arrives on the socket, fed to the FrameReader in pieces whose sizes the input's first byte picks;
// every whole body is decoded as each message kind. A body that decodes must survive a round trip: encoding what
// was decoded and decoding that again gives the same encoding, so encoder and decoder agree on every field.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "io/worker_protocol.h"

namespace {

using ckpt::Result;
using ckpt::io::MessageType;

// Strips the u64 length prefix an encoder puts before the body.
std::string_view Body(const std::string& frame) { return std::string_view(frame).substr(sizeof(uint64_t)); }

std::string Encode(const ckpt::io::ReadyMessage& ready) { return ckpt::io::EncodeReady(ready); }

std::string Encode(const ckpt::io::WorkerRequest& request) {
  switch (request.type) {
    case MessageType::kWrite:
      return ckpt::io::EncodeWriteRequest(request.job_id, request.write);
    case MessageType::kRead:
      return ckpt::io::EncodeReadRequest(request.job_id, request.read);
    default:
      return ckpt::io::EncodeAbandonRequest(request.job_id, request.directory);
  }
}

std::string Encode(const ckpt::io::WorkerReply& reply) {
  switch (reply.type) {
    case MessageType::kWriteDone: {
      using WriteResult = Result<ckpt::io::WriteResult>;
      const WriteResult result = reply.status.ok() ? WriteResult(reply.write_result) : WriteResult(reply.status);
      return ckpt::io::EncodeWriteReply(reply.job_id, result, reply.backend);
    }
    case MessageType::kReadDone:
      return ckpt::io::EncodeReadReply(reply.job_id, reply.status, reply.read_failure, reply.backend);
    default:
      return ckpt::io::EncodeAbandonReply(reply.job_id, reply.status, reply.backend);
  }
}

// Decodes `body` with `decode`; when it decodes, checks that its encoding is a fixed point of decode-then-encode.
template <typename Decode>
void CheckRoundTrip(std::string_view body, Decode decode) {
  auto decoded = decode(body);
  if (!decoded.ok()) return;
  const std::string encoded = Encode(decoded.value());
  auto again = decode(Body(encoded));
  if (!again.ok() || Encode(again.value()) != encoded) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 64;
  ckpt::io::FrameReader reader("fuzzed stream");
  std::string body;
  for (size_t pos = 1; pos < size; pos += piece) {
    const size_t n = pos + piece <= size ? piece : size - pos;
    reader.Append(reinterpret_cast<const char*>(data) + pos, n);
    for (;;) {
      Result<bool> next = reader.Next(&body);
      if (!next.ok()) return 0;  // an oversized frame: the pool drops such a worker
      if (!next.value()) break;
      CheckRoundTrip(body, ckpt::io::DecodeReady);
      CheckRoundTrip(body, ckpt::io::DecodeRequest);
      CheckRoundTrip(body, ckpt::io::DecodeReply);
    }
  }
  return 0;
}
