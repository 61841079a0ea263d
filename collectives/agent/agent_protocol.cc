#include "collectives/agent/agent_protocol.h"

#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>

#include "collectives/store/store_auth.h"
#include "common/bytes.h"

namespace ckpt::coll::agent {
namespace {

constexpr size_t kMaxJobIdBytes = 128;
constexpr uint32_t kMaxCheckpoints = 4096;
// Bounds on what a message may claim to hold, checked before anything is allocated for it.
constexpr uint32_t kMaxFiles = 1u << 20;
constexpr uint32_t kMaxPeers = 1u << 16;
// Names the agent's proof, so that no other proof made with the job's secret is ever taken for one.
constexpr std::string_view kWelcomeProofLabel = "ckpt agent welcome v1";

// The first 16 hex digits of SHA-256 over `parts` (each length-prefixed, so that no two lists collide).
std::string Digest(const std::vector<std::string_view>& parts) {
  ByteWriter message;
  for (std::string_view part : parts) message.Bytes(part);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(message.data().data(), message.data().size(), digest, &length, EVP_sha256(), nullptr);
  char hex[17];
  for (int i = 0; i < 8; ++i) std::snprintf(hex + 2 * i, 3, "%02x", digest[i]);
  return std::string(hex, 16);
}

void PutNames(ByteWriter& out, const std::vector<std::string>& names) {
  out.U32(static_cast<uint32_t>(names.size()));
  for (const std::string& name : names) out.Bytes(name);
}

Status GetNames(ByteReader& in, std::vector<std::string>* names) {
  uint32_t count = 0;
  RETURN_IF_ERROR(in.Count(&count, kMaxFiles, sizeof(uint64_t)));
  names->resize(count);
  for (std::string& name : *names) RETURN_IF_ERROR(in.Bytes(&name));
  return Status::Ok();
}

void PutCheckpoint(ByteWriter& out, const MemoryCheckpoint& c) {
  out.Bytes(c.name);
  out.Bytes(c.storage_path);
  out.Bytes(c.manager_root);
  out.U64(c.step);
  out.U64(c.bytes);
  out.U8(c.persisted ? 1 : 0);
  out.Bytes(c.persist_error);
  out.Bytes(c.save_id);
  out.U32(c.node_index);
  out.U32(c.node_count);
  PutNames(out, c.own_files);
  out.U8(c.replicated ? 1 : 0);
  out.Bytes(c.replication_error);
}

Status GetCheckpoint(ByteReader& in, MemoryCheckpoint* c) {
  uint8_t persisted = 0;
  RETURN_IF_ERROR(in.Bytes(&c->name));
  RETURN_IF_ERROR(in.Bytes(&c->storage_path));
  RETURN_IF_ERROR(in.Bytes(&c->manager_root));
  RETURN_IF_ERROR(in.U64(&c->step));
  RETURN_IF_ERROR(in.U64(&c->bytes));
  RETURN_IF_ERROR(in.U8(&persisted));
  RETURN_IF_ERROR(in.Bytes(&c->persist_error));
  c->persisted = persisted != 0;
  uint8_t replicated = 0;
  RETURN_IF_ERROR(in.Bytes(&c->save_id));
  RETURN_IF_ERROR(in.U32(&c->node_index));
  RETURN_IF_ERROR(in.U32(&c->node_count));
  RETURN_IF_ERROR(GetNames(in, &c->own_files));
  RETURN_IF_ERROR(in.U8(&replicated));
  RETURN_IF_ERROR(in.Bytes(&c->replication_error));
  c->replicated = replicated != 0;
  if (c->node_count == 0 || c->node_index >= c->node_count) {
    return Corrupt("memory checkpoint '" + c->name + "' names node " + std::to_string(c->node_index) + " of " +
                   std::to_string(c->node_count));
  }
  return Status::Ok();
}

void PutPeers(ByteWriter& out, const std::vector<PeerAgent>& peers) {
  out.U32(static_cast<uint32_t>(peers.size()));
  for (const PeerAgent& peer : peers) {
    out.U32(peer.node_index);
    out.Bytes(peer.node);
    out.Bytes(peer.address);
  }
}

Status GetPeers(ByteReader& in, std::vector<PeerAgent>* peers) {
  uint32_t count = 0;
  RETURN_IF_ERROR(in.Count(&count, kMaxPeers, 3 * sizeof(uint32_t)));
  peers->resize(count);
  for (PeerAgent& peer : *peers) {
    RETURN_IF_ERROR(in.U32(&peer.node_index));
    RETURN_IF_ERROR(in.Bytes(&peer.node));
    RETURN_IF_ERROR(in.Bytes(&peer.address));
  }
  return Status::Ok();
}

Status CheckVersion(uint32_t version, const char* what) {
  if (version == kProtocolVersion) return Status::Ok();
  return Status(Code::kVersion, std::string(what) + " speaks agent protocol " + std::to_string(version) +
                                    ", this build speaks " + std::to_string(kProtocolVersion) +
                                    ": the ranks and ckpt-agent must come from one ckpt release");
}

}  // namespace

Status ValidateJobId(std::string_view job_id) {
  if (job_id.empty() || job_id.size() > kMaxJobIdBytes) {
    return InvalidArgument("a job id must have 1 to " + std::to_string(kMaxJobIdBytes) + " bytes, not " +
                           std::to_string(job_id.size()));
  }
  for (char c : job_id) {
    if (c <= ' ' || c > '~' || c == '/') {
      return InvalidArgument("the job id '" + std::string(job_id) +
                             "' holds a character other than printable ASCII without '/' and spaces");
    }
  }
  return Status::Ok();
}

Result<std::string> JobIdFromEnvironment() {
  for (const char* name : {"CKPT_JOB_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    RETURN_IF_ERROR(ValidateJobId(value).WithContext(name));
    return std::string(value);
  }
  return InvalidArgument(
      "the memory tier needs the job's identity, so that two jobs never share a node's agent: set CKPT_JOB_ID "
      "(SLURM_JOB_ID and TORCHELASTIC_RUN_ID are taken too), the same on every rank and across restarts");
}

std::string SocketName(std::string_view job_id, std::string_view node_name) {
  return "agent-" + Digest({job_id, node_name}) + ".sock";
}

std::string MemoryDirectory(std::string_view shm_root, uint32_t uid, std::string_view job_id,
                            std::string_view node_name) {
  return std::string(shm_root) + "/ckpt-" + std::to_string(uid) + "-" + Digest({job_id, node_name});
}

std::string HelloProofFields(const Hello& hello) {
  ByteWriter out;
  out.U32(hello.version);
  out.Bytes(hello.job_id);
  out.I32(hello.rank);
  out.U32(hello.pid);
  return out.Take();
}

std::string WelcomeProof(std::string_view secret, std::string_view challenge_nonce, std::string_view hello_nonce,
                         const Welcome& welcome) {
  Welcome fields = welcome;
  fields.proof.clear();
  ByteWriter out;
  out.Bytes(challenge_nonce);
  out.Bytes(hello_nonce);
  out.Bytes(EncodeWelcome(fields));
  return store_auth::MessageProof(secret, kWelcomeProofLabel, out.Take());
}

std::string EncodeChallenge(const Challenge& c) {
  ByteWriter out;
  out.U32(c.version);
  out.Bytes(c.nonce);
  return out.Take();
}

Result<Challenge> DecodeChallenge(std::string_view bytes) {
  ByteReader in(bytes, "the agent's challenge");
  Challenge c;
  RETURN_IF_ERROR(in.U32(&c.version));
  RETURN_IF_ERROR(CheckVersion(c.version, "the agent"));
  RETURN_IF_ERROR(in.Bytes(&c.nonce));
  RETURN_IF_ERROR(in.ExpectDone());
  return c;
}

std::string EncodeHello(const Hello& h) {
  ByteWriter out;
  out.U32(h.version);
  out.Bytes(h.job_id);
  out.I32(h.rank);
  out.U32(h.pid);
  out.Bytes(h.nonce);
  out.Bytes(h.proof);
  return out.Take();
}

Result<Hello> DecodeHello(std::string_view bytes) {
  ByteReader in(bytes, "a rank's hello");
  Hello h;
  RETURN_IF_ERROR(in.U32(&h.version));
  RETURN_IF_ERROR(CheckVersion(h.version, "a rank"));
  RETURN_IF_ERROR(in.Bytes(&h.job_id));
  RETURN_IF_ERROR(in.I32(&h.rank));
  RETURN_IF_ERROR(in.U32(&h.pid));
  RETURN_IF_ERROR(in.Bytes(&h.nonce));
  RETURN_IF_ERROR(in.Bytes(&h.proof));
  RETURN_IF_ERROR(in.ExpectDone());
  return h;
}

std::string EncodeWelcome(const Welcome& w) {
  ByteWriter out;
  out.Bytes(w.memory_dir);
  out.U64(w.budget_bytes);
  out.Bytes(w.replication_address);
  out.Bytes(w.proof);
  return out.Take();
}

Result<Welcome> DecodeWelcome(std::string_view bytes) {
  ByteReader in(bytes, "the agent's welcome");
  Welcome w;
  RETURN_IF_ERROR(in.Bytes(&w.memory_dir));
  RETURN_IF_ERROR(in.U64(&w.budget_bytes));
  RETURN_IF_ERROR(in.Bytes(&w.replication_address));
  RETURN_IF_ERROR(in.Bytes(&w.proof));
  RETURN_IF_ERROR(in.ExpectDone());
  return w;
}

std::string EncodeRequest(const Request& r) {
  ByteWriter out;
  out.U8(static_cast<uint8_t>(r.op));
  out.Bytes(r.name);
  out.U64(r.bytes);
  out.Bytes(r.reservation);
  PutCheckpoint(out, r.checkpoint);
  out.U8(r.persist ? 1 : 0);
  PutPeers(out, r.peers);
  out.U32(r.node_index);
  out.U32(r.replicas);
  PutNames(out, r.files);
  out.U32(static_cast<uint32_t>(r.file_sizes.size()));
  for (uint64_t size : r.file_sizes) out.U64(size);
  return out.Take();
}

Result<Request> DecodeRequest(std::string_view bytes) {
  ByteReader in(bytes, "a request to the agent");
  Request r;
  uint8_t op = 0, persist = 0;
  RETURN_IF_ERROR(in.U8(&op));
  if (op < static_cast<uint8_t>(Op::kReserve) || op > static_cast<uint8_t>(Op::kReassign)) {
    return Corrupt("a request to the agent has the unknown operation " + std::to_string(op));
  }
  r.op = static_cast<Op>(op);
  RETURN_IF_ERROR(in.Bytes(&r.name));
  RETURN_IF_ERROR(in.U64(&r.bytes));
  RETURN_IF_ERROR(in.Bytes(&r.reservation));
  RETURN_IF_ERROR(GetCheckpoint(in, &r.checkpoint));
  RETURN_IF_ERROR(in.U8(&persist));
  RETURN_IF_ERROR(GetPeers(in, &r.peers));
  RETURN_IF_ERROR(in.U32(&r.node_index));
  RETURN_IF_ERROR(in.U32(&r.replicas));
  RETURN_IF_ERROR(GetNames(in, &r.files));
  uint32_t sizes = 0;
  RETURN_IF_ERROR(in.Count(&sizes, kMaxFiles, sizeof(uint64_t)));
  r.file_sizes.resize(sizes);
  for (uint64_t& size : r.file_sizes) RETURN_IF_ERROR(in.U64(&size));
  RETURN_IF_ERROR(in.ExpectDone());
  r.persist = persist != 0;
  return r;
}

std::string EncodeReply(const Reply& r) {
  ByteWriter out;
  out.I32(static_cast<int32_t>(r.code));
  out.Bytes(r.message);
  out.Bytes(r.payload);
  return out.Take();
}

Result<Reply> DecodeReply(std::string_view bytes) {
  ByteReader in(bytes, "the agent's reply");
  Reply r;
  int32_t code = 0;
  RETURN_IF_ERROR(in.I32(&code));
  if (code < 0 || code > static_cast<int32_t>(Code::kInternal)) {
    return Corrupt("the agent's reply carries the unknown status " + std::to_string(code));
  }
  r.code = static_cast<Code>(code);
  RETURN_IF_ERROR(in.Bytes(&r.message));
  RETURN_IF_ERROR(in.Bytes(&r.payload));
  RETURN_IF_ERROR(in.ExpectDone());
  return r;
}

std::string EncodeCheckpoints(const std::vector<MemoryCheckpoint>& list) {
  ByteWriter out;
  out.U32(static_cast<uint32_t>(list.size()));
  for (const MemoryCheckpoint& c : list) PutCheckpoint(out, c);
  return out.Take();
}

Result<std::vector<MemoryCheckpoint>> DecodeCheckpoints(std::string_view bytes) {
  ByteReader in(bytes, "the agent's list of memory checkpoints");
  uint32_t count = 0;
  RETURN_IF_ERROR(in.Count(&count, kMaxCheckpoints, 5 * sizeof(uint64_t)));
  std::vector<MemoryCheckpoint> list(count);
  for (MemoryCheckpoint& c : list) RETURN_IF_ERROR(GetCheckpoint(in, &c));
  RETURN_IF_ERROR(in.ExpectDone());
  return list;
}

Status ReplyStatus(const Reply& reply) {
  if (reply.code == Code::kOk) return Status::Ok();
  return Status(reply.code, reply.message);
}

}  // namespace ckpt::coll::agent
