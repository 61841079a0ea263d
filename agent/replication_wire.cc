#include "agent/replication_wire.h"

#include "agent/memory_store.h"
#include "collectives/store/store_auth.h"
#include "common/bytes.h"

namespace ckpt::agent {
namespace {

constexpr std::string_view kProofLabel = "ckpt agent replication v1";
// A node's ranks write a few files each: far more than any node holds.
constexpr uint32_t kMaxFiles = 1u << 16;
// Chunk tags carry 24 bits of chunk index: a chunk must be large enough for any file set (and small enough to
// be buffered).
constexpr uint64_t kMinChunkBytes = 64 << 10;
constexpr uint64_t kMaxChunkBytes = 1ull << 30;

// Everything but the proof, in a fixed order: what the proof covers.
std::string EncodeFields(const ReplicationMessage& m) {
  ByteWriter out;
  out.U8(static_cast<uint8_t>(m.type));
  out.Bytes(m.job_id);
  out.U32(m.from_node);
  out.Bytes(m.reply_address);
  out.Bytes(m.checkpoint);
  out.U64(m.id);
  out.U32(m.transfer);
  out.U64(m.chunk_bytes);
  out.U8(m.for_fetch ? 1 : 0);
  out.U32(static_cast<uint32_t>(m.files.size()));
  for (const FileInfo& file : m.files) {
    out.Bytes(file.name);
    out.U64(file.size);
  }
  out.Bytes(m.error);
  return out.Take();
}

Status DecodeFields(ByteReader& in, ReplicationMessage* m) {
  uint8_t type = 0, for_fetch = 0;
  RETURN_IF_ERROR(in.U8(&type));
  if (type < static_cast<uint8_t>(MessageType::kOffer) || type > static_cast<uint8_t>(MessageType::kPushFailed)) {
    return Corrupt("a replication message has the unknown type " + std::to_string(type));
  }
  m->type = static_cast<MessageType>(type);
  RETURN_IF_ERROR(in.Bytes(&m->job_id));
  RETURN_IF_ERROR(in.U32(&m->from_node));
  RETURN_IF_ERROR(in.Bytes(&m->reply_address));
  RETURN_IF_ERROR(in.Bytes(&m->checkpoint));
  RETURN_IF_ERROR(in.U64(&m->id));
  RETURN_IF_ERROR(in.U32(&m->transfer));
  RETURN_IF_ERROR(in.U64(&m->chunk_bytes));
  RETURN_IF_ERROR(in.U8(&for_fetch));
  m->for_fetch = for_fetch != 0;
  uint32_t count = 0;
  RETURN_IF_ERROR(in.Count(&count, kMaxFiles, 2 * sizeof(uint64_t)));
  m->files.resize(count);
  for (FileInfo& file : m->files) {
    RETURN_IF_ERROR(in.Bytes(&file.name));
    RETURN_IF_ERROR(in.U64(&file.size));
  }
  return in.Bytes(&m->error);
}

Status ValidateContent(const ReplicationMessage& m) {
  RETURN_IF_ERROR(ValidateEntryName(m.checkpoint));
  for (const FileInfo& file : m.files) RETURN_IF_ERROR(ValidateReplicatedFileName(file.name));
  if (m.type == MessageType::kOffer && (m.chunk_bytes < kMinChunkBytes || m.chunk_bytes > kMaxChunkBytes)) {
    return InvalidArgument("a replication offer has chunks of " + std::to_string(m.chunk_bytes) + " bytes, outside [" +
                           std::to_string(kMinChunkBytes) + ", " + std::to_string(kMaxChunkBytes) + "]");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateReplicatedFileName(const std::string& name) {
  if (name == "MANIFEST") return Status::Ok();
  const std::string suffix = ".bin";
  if (name.size() <= suffix.size() || name.front() == '.' || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return InvalidArgument(Quoted(name) + " is neither MANIFEST nor a plain, visible data file name ending in .bin");
  }
  return Status::Ok();
}

std::string EncodeReplicationMessage(ReplicationMessage message, std::string_view secret) {
  std::string fields = EncodeFields(message);
  ByteWriter out;
  out.Bytes(fields);
  out.Bytes(secret.empty() ? std::string() : coll::store_auth::MessageProof(secret, kProofLabel, fields));
  return out.Take();
}

Result<ReplicationMessage> DecodeReplicationMessage(std::string_view bytes, std::string_view job_id,
                                                    std::string_view secret) {
  ByteReader outer(bytes, "a replication message");
  std::string fields, proof;
  RETURN_IF_ERROR(outer.Bytes(&fields));
  RETURN_IF_ERROR(outer.Bytes(&proof));
  RETURN_IF_ERROR(outer.ExpectDone());
  ReplicationMessage message;
  ByteReader in(fields, "a replication message");
  RETURN_IF_ERROR(DecodeFields(in, &message));
  RETURN_IF_ERROR(in.ExpectDone());
  if (message.job_id != job_id) {
    return Mismatch("a replication message of job '" + message.job_id + "' reached the agent of job '" +
                    std::string(job_id) + "'");
  }
  if (secret.empty() != proof.empty()) {
    return Mismatch(secret.empty() ? "a replication message carries a proof but this agent has no job secret"
                                   : "a replication message carries no proof of the job's secret");
  }
  if (!secret.empty() &&
      !coll::store_auth::ProofsMatch(coll::store_auth::MessageProof(secret, kProofLabel, fields), proof)) {
    return Mismatch("a replication message's proof does not match the job's secret (node " +
                    std::to_string(message.from_node) + ")");
  }
  RETURN_IF_ERROR(ValidateContent(message));
  message.proof = std::move(proof);
  return message;
}

}  // namespace ckpt::agent
