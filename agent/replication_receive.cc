// The receiving side of replication (replication_engine.h): files a peer offers, received chunk by chunk, written
// into hidden ".part" files by the writer thread, and renamed into place once every chunk is in.
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <set>

#include "agent/replication_engine.h"
#include "common/os_error.h"
#include "io/file_io.h"

namespace ckpt::agent {

void Replicator::Engine::OnOffer(const ReplicationMessage& message) {
  const uint32_t id = static_cast<uint32_t>(next_id_++);
  Incoming& incoming = incoming_[id];
  incoming.id = id;
  incoming.address = message.reply_address;
  incoming.offer_id = message.id;
  incoming.checkpoint = message.checkpoint;
  incoming.last_progress = Clock::now();
  const Status accepted = AcceptOffer(message, incoming);
  if (!accepted.ok()) {
    log_("refused files of " + Quoted(message.checkpoint) + " from " + PeerName(message.reply_address) + ": " +
         accepted.message());
    DropIncoming(incoming);
    incoming_.erase(id);
    ReplicationMessage refuse = Reply(MessageType::kRefuse, message);
    refuse.error = "node '" + options_.node + "' refuses: " + accepted.message();
    return SendControl(message.reply_address, std::move(refuse));
  }
  // Receives are posted before the sender learns the tag, so that no chunk arrives unexpected (UCX would hold it in
  // a buffer of its own until a receive matched it).
  PumpIncoming(incoming);
  ReplicationMessage accept = Reply(MessageType::kAccept, message);
  accept.transfer = id;
  accept.files = incoming.files;
  SendControl(message.reply_address, std::move(accept));
  if (incoming_.count(id) != 0 && incoming.chunks.empty()) PlaceFiles(id);
}

Status Replicator::Engine::AcceptOffer(const ReplicationMessage& message, Incoming& incoming) {
  const Fetch* fetch = message.for_fetch ? FetchOf(message.checkpoint) : nullptr;
  if (message.for_fetch) {
    if (fetch == nullptr || fetch->holders.count(message.reply_address) == 0) {
      return InvalidArgument("it asked that peer for no files of " + Quoted(message.checkpoint));
    }
    incoming.dir = fetch->dir;
    incoming.fetch_id = fetch->id;
  } else {
    incoming.dir = CheckpointDir(message.checkpoint);
    if (!io::IsDirectory(incoming.dir)) {
      return NotFound("it has no memory checkpoint directory " + Quoted(incoming.dir) +
                      " (the save did not commit there)");
    }
  }
  std::set<std::string> names;
  uint64_t bytes = 0;
  for (const FileInfo& file : message.files) {
    if (!names.insert(file.name).second) return InvalidArgument(Quoted(file.name) + " is offered twice");
    if (file.name == "MANIFEST" && io::PathExists(ReplicatedFilePath(incoming.dir, file.name))) continue;
    if (fetch != nullptr && fetch->missing.count(file.name) == 0) continue;
    if (file.size > store_.budget_bytes() || bytes + file.size > store_.budget_bytes()) {
      return NoSpace("the files offered exceed its whole memory budget of " + std::to_string(store_.budget_bytes()) +
                     " bytes");
    }
    bytes += file.size;
    incoming.files.push_back(file);
  }
  incoming.chunks = PlanChunks(incoming.files, message.chunk_bytes);
  if (incoming.chunks.size() > kMaxChunks) {
    return InvalidArgument("the offer needs " + std::to_string(incoming.chunks.size()) + " chunks, more than " +
                           std::to_string(kMaxChunks));
  }
  RETURN_IF_ERROR(store_.ReserveIncoming(incoming.id, message.checkpoint, bytes));
  RETURN_IF_ERROR(io::MakeDirectories(io::JoinPath(incoming.dir, "data")));
  for (const FileInfo& file : incoming.files) {
    const std::string path = PartialFilePath(incoming.dir, file.name);
    const bool recycled = file.name != "MANIFEST" && store_.TakeRecycled(path, file.size);
    ASSIGN_OR_RETURN(UniqueFd part, CreatePartFile(path, file.size, recycled));
    io::FileMapping target;
    if (recycled) target = TakeKeptMapping(part.get(), file.size, true);
    if (recycled && target.writable_data() == nullptr) {
      ASSIGN_OR_RETURN(target, MapIfAllocated(part.get(), path, file.size));
    }
    incoming.parts.push_back(std::move(part));
    incoming.targets.push_back(std::move(target));
  }
  return Status::Ok();
}

// Keeps twice the sender's window of chunks posted or being written. A chunk of a recycled file whose pages all exist
// is received straight into the file's mapping, populated when the offer was accepted, which saves a copy: 16 % less
// CPU for 1 GiB pushes into recycled files. Any other chunk is received into a reused buffer that the writer then
// writes to the file: receiving straight into a mapping of a new file costs a page fault and a zeroed page for every
// 4 KiB on this thread, which halved the replication's speed.
void Replicator::Engine::PumpIncoming(Incoming& incoming) {
  while (incoming.failure.empty() && incoming.in_flight < 2 * options_.window &&
         incoming.next < incoming.chunks.size()) {
    const uint64_t index = incoming.next++;
    const Chunk& chunk = incoming.chunks[index];
    Op* op = NewOp(OpKind::kChunkReceive, incoming.id);
    op->chunk = index;
    op->expected = chunk.length;
    char* target = incoming.targets[chunk.file].writable_data();
    if (target != nullptr) {
      target += chunk.offset;
    } else {
      op->bounce = TakeBuffer(chunk.length);
      target = op->bounce.data.get();
    }
    incoming.posted[index] = op;
    ++incoming.in_flight;
    ucp_request_param_t param = {};
    // UCX 1.13 leaves the received length unreported on an immediate completion: the callback must always run.
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv = [](void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
      auto* received = static_cast<Op*>(user_data);
      received->engine->Completed(received, request, status, status == UCS_OK ? info->length : 0);
    };
    param.user_data = op;
    Track(op, ucx_.tag_recv_nbx(worker(), target, chunk.length, DataTag(incoming.id, index), ~ucp_tag_t{0}, &param));
  }
}

Replicator::Engine::Buffer Replicator::Engine::TakeBuffer(uint64_t bytes) {
  for (size_t i = 0; i < spare_buffers_.size(); ++i) {
    if (spare_buffers_[i].capacity < bytes) continue;
    Buffer buffer = std::move(spare_buffers_[i]);
    spare_buffers_.erase(spare_buffers_.begin() + static_cast<std::ptrdiff_t>(i));
    return buffer;
  }
  return Buffer{std::unique_ptr<char[]>(new char[bytes]), bytes};
}

void Replicator::Engine::OnChunkReceived(Op& op) {
  auto write = std::make_shared<ChunkWrite>();
  write->incoming = static_cast<uint32_t>(op.owner);
  write->chunk = op.chunk;
  write->buffer = std::move(op.bounce);
  auto it = incoming_.find(write->incoming);
  if (it == incoming_.end()) return;
  Incoming& incoming = it->second;
  incoming.posted.erase(op.chunk);
  if (incoming.failure.empty() && (op.status != UCS_OK || op.received != op.expected)) {
    write->written = PeerFailed(PeerName(incoming.address) + " sent chunk " + std::to_string(op.chunk) + " of " +
                                Quoted(incoming.checkpoint) + " with " + std::to_string(op.received) + " bytes of " +
                                std::to_string(op.expected) + ": " + ucx_.status_string(op.status));
  }
  if (!incoming.failure.empty() || !write->written.ok() || write->buffer.data == nullptr) {
    return OnChunkWritten(write);  // failed, or received into its file
  }
  const Chunk& chunk = incoming.chunks[op.chunk];
  write->fd = incoming.parts[chunk.file].get();
  write->length = chunk.length;
  write->offset = chunk.offset;
  write->path = PartialFilePath(incoming.dir, incoming.files[chunk.file].name);
  QueueWrite(std::move(write));
}

void Replicator::Engine::QueueWrite(std::shared_ptr<ChunkWrite> write) {
  QueueFileTask([this, write = std::move(write)] {
    write->written = WriteFully(write->fd, write->buffer.data.get(), write->length, write->offset, write->path);
    Post([this, write] { OnChunkWritten(write); });
  });
}

void Replicator::Engine::QueueFileTask(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(writer_mu_);
    file_tasks_.push_back(std::move(task));
  }
  writer_wake_.notify_one();
}

void Replicator::Engine::WriterLoop() {
  std::unique_lock<std::mutex> lock(writer_mu_);
  while (true) {
    writer_wake_.wait(lock, [this] { return writer_stopping_ || !file_tasks_.empty(); });
    if (file_tasks_.empty()) return;  // stopping, with nothing left to do
    std::function<void()> task = std::move(file_tasks_.front());
    file_tasks_.pop_front();
    lock.unlock();
    task();
    task = nullptr;  // what it held goes here, off the engine's thread
    lock.lock();
  }
}

void Replicator::Engine::StopWriter() {
  if (!writer_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(writer_mu_);
    writer_stopping_ = true;
  }
  writer_wake_.notify_one();
  writer_.join();
}

// The chunk is in its file (or failed): its buffer serves the next receive, and the transfer goes on.
void Replicator::Engine::OnChunkWritten(const std::shared_ptr<ChunkWrite>& write) {
  if (write->buffer.data != nullptr && spare_buffers_.size() < static_cast<size_t>(2 * options_.window)) {
    spare_buffers_.push_back(std::move(write->buffer));
  }
  auto it = incoming_.find(write->incoming);
  if (it == incoming_.end()) return;
  Incoming& incoming = it->second;
  --incoming.in_flight;
  if (!incoming.failure.empty()) {
    if (incoming.in_flight == 0) {
      DropIncoming(incoming);
      incoming_.erase(it);
    }
    return;
  }
  if (!write->written.ok()) {
    const bool from_peer = write->written.code() == Code::kPeerFailed;
    return FailIncoming(incoming.id, from_peer ? write->written.message()
                                               : "node '" + options_.node + "': " + write->written.message());
  }
  ++incoming.received;
  incoming.last_progress = Clock::now();
  if (incoming.fetch_id != 0) {
    auto fetch = fetches_.find(incoming.fetch_id);
    if (fetch != fetches_.end()) fetch->second.last_progress = incoming.last_progress;
  }
  PumpIncoming(incoming);
  if (incoming.received == incoming.chunks.size()) PlaceFiles(incoming.id);
}

// Every chunk arrived: each file is renamed into place (a MANIFEST only where none is), the sender told, and the
// budget measured again with the files (or, for a fetch, once the checkpoint is registered).
void Replicator::Engine::PlaceFiles(uint32_t id) {
  Incoming& incoming = incoming_.at(id);
  for (size_t i = 0; i < incoming.files.size(); ++i) {
    const std::string part = PartialFilePath(incoming.dir, incoming.files[i].name);
    const std::string final_path = ReplicatedFilePath(incoming.dir, incoming.files[i].name);
    const Status placed = incoming.files[i].name == "MANIFEST" && io::PathExists(final_path)
                              ? io::RemoveTree(part)
                              : (rename(part.c_str(), final_path.c_str()) == 0
                                     ? Status::Ok()
                                     : OsError("cannot rename " + Quoted(part) + " into place", errno));
    if (!placed.ok()) return FailIncoming(id, "node '" + options_.node + "': " + placed.message());
  }
  ReplicationMessage done;
  done.type = MessageType::kDone;
  done.checkpoint = incoming.checkpoint;
  done.id = incoming.offer_id;
  SendControl(incoming.address, std::move(done));
  // The files are in place: the mappings of recycled files are kept for the next replica into them, and the other
  // descriptors closed on the writer's thread, after the sender was told.
  auto closed = std::make_shared<std::vector<UniqueFd>>();
  for (size_t i = 0; i < incoming.files.size(); ++i) {
    if (incoming.targets[i].writable_data() != nullptr) {
      KeepMapping(std::move(incoming.parts[i]), std::move(incoming.targets[i]));
    } else {
      closed->push_back(std::move(incoming.parts[i]));
    }
  }
  QueueFileTask([closed] { closed->clear(); });
  ReleaseDeletedMappings();  // a file placed over a kept one
  const uint64_t fetch_id = incoming.fetch_id;
  const std::vector<FileInfo> files = std::move(incoming.files);
  incoming_.erase(id);
  if (fetch_id == 0) {
    store_.ReleaseIncoming(id);
  } else {
    FilesPlaced(fetch_id, files, id);
  }
}

void Replicator::Engine::FailIncoming(uint32_t id, const std::string& error) {
  auto it = incoming_.find(id);
  if (it == incoming_.end() || !it->second.failure.empty()) return;
  Incoming& incoming = it->second;
  incoming.failure = error;
  log_("receiving files of " + Quoted(incoming.checkpoint) + " failed: " + error);
  for (auto& [chunk, op] : incoming.posted) {
    if (op->request != nullptr) ucx_.request_cancel(worker(), op->request);
  }
  ReplicationMessage done;
  done.type = MessageType::kDone;
  done.checkpoint = incoming.checkpoint;
  done.id = incoming.offer_id;
  done.error = error;
  const std::string address = incoming.address;
  const uint64_t fetch_id = incoming.fetch_id;
  if (incoming.in_flight == 0) {
    DropIncoming(incoming);
    incoming_.erase(it);
  }
  SendControl(address, std::move(done));
  if (fetch_id != 0) FailFetch(fetch_id, error);
}

void Replicator::Engine::KeepMapping(UniqueFd fd, io::FileMapping mapping) {
  struct stat st;
  std::vector<KeptMapping> evicted;
  if (fstat(fd.get(), &st) == 0) {
    std::lock_guard<std::mutex> lock(kept_mu_);
    for (auto it = kept_mappings_.begin(); it != kept_mappings_.end(); ++it) {
      if (it->device == st.st_dev && it->inode == st.st_ino) {
        evicted.push_back(std::move(*it));
        kept_mappings_.erase(it);
        break;
      }
    }
    kept_mappings_.push_back(KeptMapping{st.st_dev, st.st_ino, std::move(fd), std::move(mapping)});
    if (kept_mappings_.size() > kMaxKeptMappings) {
      evicted.push_back(std::move(kept_mappings_.front()));
      kept_mappings_.pop_front();
    }
  } else {
    evicted.push_back(KeptMapping{0, 0, std::move(fd), std::move(mapping)});
  }
  if (!evicted.empty()) ReleaseLater(std::move(evicted));
}

io::FileMapping Replicator::Engine::TakeKeptMapping(int fd, uint64_t size, bool for_writing) {
  struct stat st;
  if (fstat(fd, &st) != 0) return io::FileMapping();
  std::vector<KeptMapping> found;
  {
    std::lock_guard<std::mutex> lock(kept_mu_);
    auto it = std::find_if(kept_mappings_.begin(), kept_mappings_.end(), [&](const KeptMapping& kept) {
      return kept.device == st.st_dev && kept.inode == st.st_ino;
    });
    if (it == kept_mappings_.end()) return io::FileMapping();
    found.push_back(std::move(*it));
    kept_mappings_.erase(it);
  }
  // A mapping larger than the file now (cut to `size`) is used only below that.
  const bool fits = !for_writing || (found[0].mapping.writable_data() != nullptr && HoldsAllPages(fd, size));
  if (found[0].mapping.size() >= size && fits) return std::move(found[0].mapping);
  ReleaseLater(std::move(found));
  return io::FileMapping();
}

void Replicator::Engine::ReleaseDeletedMappings() {
  std::lock_guard<std::mutex> lock(kept_mu_);
  for (auto it = kept_mappings_.begin(); it != kept_mappings_.end();) {
    struct stat st;
    it = fstat(it->fd.get(), &st) != 0 || st.st_nlink == 0 ? kept_mappings_.erase(it) : it + 1;
  }
}

void Replicator::Engine::ReleaseLater(std::vector<KeptMapping> kept) {
  auto held = std::make_shared<std::vector<KeptMapping>>(std::move(kept));
  QueueFileTask([held] { held->clear(); });
}

// What a failed receive leaves: its open files, its hidden files and its share of the budget.
void Replicator::Engine::DropIncoming(Incoming& incoming) {
  for (size_t i = 0; i < incoming.parts.size(); ++i) {
    incoming.parts[i].Reset();
    (void)unlink(PartialFilePath(incoming.dir, incoming.files[i].name).c_str());
  }
  store_.ReleaseIncoming(incoming.id);
}

}  // namespace ckpt::agent
