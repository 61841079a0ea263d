#include "collectives/store/store_server_requests.h"

#include <cstdint>

#include "common/bytes.h"

namespace ckpt::coll::store_server {

Status KeyValueRequests::Set(Connection& c, std::string_view payload) {
  ByteReader reader(payload, "store set from rank " + std::to_string(c.rank));
  std::string key, value;
  RETURN_IF_ERROR(reader.Bytes(&key));
  RETURN_IF_ERROR(reader.Bytes(&value));
  RETURN_IF_ERROR(reader.ExpectDone());
  Send(c, Frame(MessageType::kOk, {}));
  ByteWriter reply;
  reply.Bytes(value);
  const auto frame = Frame(MessageType::kOk, reply.data());
  for (const auto& waiter : conns_) {
    if (waiter->pending == Pending::kWait && waiter->wait_key == key) Answer(*waiter, frame);
  }
  kv_[std::move(key)] = std::move(value);
  return Status::Ok();
}

Status KeyValueRequests::Get(Connection& c, std::string_view payload) {
  ByteReader reader(payload, "store get from rank " + std::to_string(c.rank));
  std::string key;
  RETURN_IF_ERROR(reader.Bytes(&key));
  RETURN_IF_ERROR(reader.ExpectDone());
  RETURN_IF_ERROR(ranks_.DeadRanksError());
  const auto it = kv_.find(key);
  ByteWriter reply;
  reply.U8(it != kv_.end() ? 1 : 0);
  reply.Bytes(it != kv_.end() ? std::string_view(it->second) : std::string_view());
  Send(c, Frame(MessageType::kOk, reply.data()));
  return Status::Ok();
}

Status KeyValueRequests::Wait(Connection& c, std::string_view payload) {
  ByteReader reader(payload, "store wait from rank " + std::to_string(c.rank));
  std::string key;
  uint64_t timeout_ms = 0;
  RETURN_IF_ERROR(reader.Bytes(&key));
  RETURN_IF_ERROR(reader.U64(&timeout_ms));
  RETURN_IF_ERROR(reader.ExpectDone());
  RETURN_IF_ERROR(ranks_.DeadRanksError());
  if (const auto it = kv_.find(key); it != kv_.end()) {
    ByteWriter reply;
    reply.Bytes(it->second);
    Send(c, Frame(MessageType::kOk, reply.data()));
    return Status::Ok();
  }
  c.wait_key = std::move(key);
  SetPending(c, Pending::kWait, timeout_ms);
  return Status::Ok();
}

Status KeyValueRequests::Delete(Connection& c, std::string_view payload) {
  ByteReader reader(payload, "store delete from rank " + std::to_string(c.rank));
  std::string key;
  RETURN_IF_ERROR(reader.Bytes(&key));
  RETURN_IF_ERROR(reader.ExpectDone());
  kv_.erase(key);
  Send(c, Frame(MessageType::kOk, {}));
  return Status::Ok();
}

void KeyValueRequests::ExpireWait(Connection& c, const std::string& waited) {
  Answer(c, ErrorFrame(Timeout("key '" + c.wait_key + "' was not set within " + waited)));
}

}  // namespace ckpt::coll::store_server
