// The messages agents exchange to replicate memory checkpoints to each other and to fetch them. They travel as UCX
// tagged messages under one control tag; the file bytes travel as chunks under tags of their own (replicator.h). Every
// message names the job and, when the job has a secret, carries an HMAC over all its other fields, so that an agent of
// another job, or a process without the secret, cannot place files.
//
// A push: kOffer (the files, their sizes) -> kAccept (the files wanted, the transfer id the chunks are tagged with)
// or kRefuse (why) -> chunks -> kDone (all wanted files in place, or why not).
// A fetch: kInventoryAsk -> kInventory (the files the peer holds); then kPushAsk to a holder, which pushes them
// (kOffer ...) or answers kPushFailed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ckpt::agent {

enum class MessageType : uint8_t {
  kOffer = 1,
  kAccept = 2,
  kRefuse = 3,
  kDone = 4,
  kInventoryAsk = 5,
  kInventory = 6,
  kPushAsk = 7,
  kPushFailed = 8,
};

struct FileInfo {
  std::string name;  // "MANIFEST" or a data file's name inside data/
  uint64_t size = 0;
};

struct ReplicationMessage {
  MessageType type = MessageType::kOffer;
  std::string job_id;
  uint32_t from_node = 0;
  std::string reply_address;  // the sender's UCX worker address: where answers go
  std::string checkpoint;     // the memory checkpoint's name
  uint64_t id = 0;            // the sender's offer (push) or fetch the message belongs to
  uint32_t transfer = 0;      // kAccept: the chunks' tag, chosen by the receiver
  uint64_t chunk_bytes = 0;   // kOffer: the size of every chunk but a file's last
  bool for_fetch = false;     // kOffer: answers a kPushAsk (the receiver fetches), rather than a replica
  std::vector<FileInfo> files;
  std::string error;  // kRefuse, kDone, kInventory, kPushFailed: empty on success
  std::string proof;  // HMAC over every other field with the job's secret; empty without one
};

// No message is larger: a file list of a node's ranks is far below it.
inline constexpr size_t kMaxReplicationMessageBytes = 1 << 20;

// Encodes `message` and, with a non-empty `secret`, its proof.
std::string EncodeReplicationMessage(ReplicationMessage message, std::string_view secret);

// Decodes bytes from the network: bounds checked, names validated (ValidateEntryName for the checkpoint, and
// ValidateReplicatedFileName for every file), then checked against this agent's job (kMismatch) and `secret`
// (kMismatch when the proof is wrong or missing, or present although this agent has no secret).
Result<ReplicationMessage> DecodeReplicationMessage(std::string_view bytes, std::string_view job_id,
                                                    std::string_view secret);

// kInvalidArgument unless `name` is "MANIFEST" or a plain data file name: "<something>.bin", no '/', not hidden.
Status ValidateReplicatedFileName(const std::string& name);

}  // namespace ckpt::agent
