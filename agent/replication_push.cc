// The sending side of replication (replication_engine.h): replicas of this node's own files after a save, and the
// files a fetching peer asks for.
#include <algorithm>

#include "agent/replication_engine.h"

namespace ckpt::agent {

std::vector<Replicator::Engine::Chunk> Replicator::Engine::PlanChunks(const std::vector<FileInfo>& files,
                                                                      uint64_t chunk_bytes) {
  std::vector<Chunk> chunks;
  for (size_t file = 0; file < files.size(); ++file) {
    for (uint64_t offset = 0; offset < files[file].size; offset += chunk_bytes) {
      chunks.push_back(Chunk{file, offset, std::min(chunk_bytes, files[file].size - offset)});
    }
  }
  return chunks;
}

void Replicator::Engine::StartReplica(const std::string& name) {
  const std::optional<MemoryCheckpoint> checkpoint = store_.Find(name);
  // A checkpoint replicated already, or being pushed, is not pushed again when a kComplete repeats.
  if (!checkpoint.has_value() || checkpoint->node_count <= 1 || checkpoint->replicated ||
      replica_jobs_.count(name) != 0) {
    return;
  }
  const uint32_t node_count = checkpoint->node_count;
  const uint32_t replicas = std::min(replicas_, node_count - 1);
  if (peers_.empty()) {
    // An agent started while the job runs (its predecessor died) learns its peers at the ranks' next save.
    const std::string error = "the agent of node '" + options_.node + "' knows no peer agents yet";
    log_("no replicas of " + Quoted(name) + ": " + error);
    (void)store_.MarkReplicated(name, error);
    return;
  }
  if (replicas == 0) {
    log_("no replicas of " + Quoted(name) + " are asked");
    (void)store_.MarkReplicated(name, "");
    return;
  }
  std::vector<std::string> files = {"MANIFEST"};
  files.insert(files.end(), checkpoint->own_files.begin(), checkpoint->own_files.end());
  ReplicaJob& job = replica_jobs_[name];
  job.pending = static_cast<int>(replicas);
  std::vector<std::string> targets;
  for (uint32_t k = 1; k <= replicas; ++k) {
    const uint32_t index = (checkpoint->node_index + k) % node_count;
    auto peer = std::find_if(peers_.begin(), peers_.end(), [&](const PeerAgent& p) { return p.node_index == index; });
    if (peer == peers_.end() || peer->address.empty()) {
      job.errors += (job.errors.empty() ? "" : "; ") + std::string("node index ") + std::to_string(index) +
                    " has no replication address (the peers the ranks sent lack it)";
      --job.pending;
    } else {
      targets.push_back(peer->address);
    }
  }
  if (job.pending == 0) {
    (void)store_.MarkReplicated(name, job.errors);
    return;
  }
  for (const std::string& address : targets) StartPush(address, name, files, false, 0);
}

void Replicator::Engine::StartPush(const std::string& address, const std::string& checkpoint,
                                   const std::vector<std::string>& files, bool for_fetch, uint64_t fetch_id) {
  const uint64_t id = next_id_++;
  Push& push = pushes_[id];
  push.id = id;
  push.address = address;
  push.checkpoint = checkpoint;
  push.for_fetch = for_fetch;
  push.fetch_id = fetch_id;
  push.last_progress = Clock::now();
  const std::string dir = CheckpointDir(checkpoint);
  for (const std::string& file : files) {
    const std::string path = ReplicatedFilePath(dir, file);
    uint64_t size = 0;
    const std::string cannot_send = "node '" + options_.node + "' cannot send: ";
    Result<UniqueFd> fd = ValidateReplicatedFileName(file).ok()
                              ? OpenForSending(path, &size)
                              : Result<UniqueFd>(InvalidArgument(Quoted(file) + " is no replicated file"));
    if (!fd.ok()) return FinishPush(id, cannot_send + fd.status().message());
    // A file sent before (a recycled file the node's save wrote over) has its pages mapped already.
    io::FileMapping source = TakeKeptMapping(fd->get(), size, false);
    if (source.data() == nullptr) {
      Result<io::FileMapping> mapped = io::FileMapping::Map(fd->get(), path, 0, size);
      if (!mapped.ok()) return FinishPush(id, cannot_send + mapped.status().message());
      source = std::move(*mapped);
    }
    push.files.push_back(FileInfo{file, size});
    push.sources.push_back(std::move(source));
    push.source_files.push_back(std::move(*fd));
  }
  ReplicationMessage offer;
  offer.type = MessageType::kOffer;
  offer.checkpoint = checkpoint;
  offer.id = id;
  offer.chunk_bytes = options_.chunk_bytes;
  offer.for_fetch = for_fetch;
  offer.files = push.files;
  SendControl(address, std::move(offer));
}

void Replicator::Engine::OnAccept(const ReplicationMessage& message) {
  auto it = pushes_.find(message.id);
  if (it == pushes_.end() || it->second.address != message.reply_address || it->second.accepted) return;
  Push& push = it->second;
  // The receiver may want fewer files (a MANIFEST it has): the sources are narrowed to those, in its order.
  std::vector<FileInfo> files;
  std::vector<io::FileMapping> sources;
  std::vector<UniqueFd> source_files;
  for (const FileInfo& wanted : message.files) {
    auto offered = std::find_if(push.files.begin(), push.files.end(),
                                [&](const FileInfo& file) { return file.name == wanted.name; });
    if (offered == push.files.end() || offered->size != wanted.size) {
      return FinishPush(push.id,
                        PeerName(push.address) + " accepted " + Quoted(wanted.name) + ", which was not offered");
    }
    const size_t index = static_cast<size_t>(offered - push.files.begin());
    files.push_back(*offered);
    sources.push_back(std::move(push.sources[index]));
    source_files.push_back(std::move(push.source_files[index]));
  }
  push.files = std::move(files);
  push.sources = std::move(sources);
  push.source_files = std::move(source_files);
  push.accepted = true;
  push.transfer = message.transfer;
  push.chunks = PlanChunks(push.files, options_.chunk_bytes);
  push.last_progress = Clock::now();
  PumpPush(push);
}

// Keeps `window` chunks in flight, each sent from the source's mapping.
void Replicator::Engine::PumpPush(Push& push) {
  while (!push.finished && push.in_flight < options_.window && push.next < push.chunks.size()) {
    Result<ucp_ep_h> ep = EndpointTo(push.address);
    if (!ep.ok()) return FailAddress(push.address, ep.status().message());
    const uint64_t index = push.next++;
    const Chunk& chunk = push.chunks[index];
    Op* op = NewOp(OpKind::kChunkSend, push.id);
    ++push.in_flight;
    ucp_request_param_t param = {};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = [](void* request, ucs_status_t status, void* user_data) {
      auto* sent = static_cast<Op*>(user_data);
      sent->engine->Completed(sent, request, status, 0);
    };
    param.user_data = op;
    Track(op, ucx_.tag_send_nbx(*ep, push.sources[chunk.file].data() + chunk.offset, chunk.length,
                                DataTag(push.transfer, index), &param));
  }
}

void Replicator::Engine::OnChunkSent(Op& op) {
  auto it = pushes_.find(op.owner);
  if (it == pushes_.end()) return;
  Push& push = it->second;
  --push.in_flight;
  if (push.finished) {
    if (push.in_flight == 0) DropPush(it);
    return;
  }
  if (op.status != UCS_OK) {
    return FailAddress(push.address, std::string("failed a send: ") + ucx_.status_string(op.status));
  }
  push.last_progress = Clock::now();
  PumpPush(push);
}

// `error` empty: the receiver placed every file. A finished push stays until UCX let go of its chunks, which are
// sent from its mappings.
void Replicator::Engine::FinishPush(uint64_t id, const std::string& error) {
  auto it = pushes_.find(id);
  if (it == pushes_.end() || it->second.finished) return;
  Push& push = it->second;
  push.finished = true;
  push.failure = error;
  if (!error.empty()) log_("push of " + Quoted(push.checkpoint) + " failed: " + error);
  if (push.for_fetch && !error.empty()) {
    ReplicationMessage failed;
    failed.type = MessageType::kPushFailed;
    failed.checkpoint = push.checkpoint;
    failed.id = push.fetch_id;
    failed.error = error;
    SendControl(push.address, std::move(failed));
  }
  ReportPush(push);
  it = pushes_.find(id);  // SendControl may have failed pushes to that peer
  if (it != pushes_.end() && it->second.in_flight == 0) DropPush(it);
}

// The mappings of the data files it sent are kept (KeepMapping): the node's next save writes over these files once
// its retention recycles them, and the next push of them finds their pages mapped.
void Replicator::Engine::DropPush(std::map<uint64_t, Push>::iterator it) {
  Push& push = it->second;
  for (size_t i = 0; i < push.sources.size(); ++i) {
    if (push.files[i].name != "MANIFEST" && push.sources[i].data() != nullptr) {
      KeepMapping(std::move(push.source_files[i]), std::move(push.sources[i]));
    }
  }
  pushes_.erase(it);
}

// A replica's outcome counts towards its checkpoint's: replicated once every replica is in place.
void Replicator::Engine::ReportPush(const Push& push) {
  if (push.for_fetch) return;
  auto job = replica_jobs_.find(push.checkpoint);
  if (job == replica_jobs_.end()) return;
  if (!push.failure.empty()) job->second.errors += (job->second.errors.empty() ? "" : "; ") + push.failure;
  if (--job->second.pending > 0) return;
  Status marked = store_.MarkReplicated(push.checkpoint, job->second.errors);
  if (!marked.ok()) log_(marked.message());
  replica_jobs_.erase(job);
}

}  // namespace ckpt::agent
