// Fetching (replication_engine.h): a node that lacks files of a checkpoint asks every peer, in ring order from
// itself, which files it holds, then asks the first holder of each missing file it wants to push it.
#include <stdio.h>

#include <algorithm>
#include <cerrno>

#include "agent/replication_engine.h"
#include "common/os_error.h"
#include "io/file_io.h"

namespace ckpt::agent {

void Replicator::Engine::StartFetch(const MemoryCheckpoint& checkpoint, const std::vector<std::string>& files) {
  const uint64_t id = next_id_++;
  Fetch& fetch = fetches_[id];
  fetch.id = id;
  fetch.checkpoint = checkpoint;
  fetch.outcome_key = FetchKey(checkpoint.name, files);
  fetch.wanted.insert(files.begin(), files.end());
  if (!fetch.wanted.empty()) fetch.wanted.insert("MANIFEST");
  fetch.last_progress = Clock::now();
  fetch.dir = CheckpointDir(checkpoint.name);
  // Without a directory of its own the files gather in a temporary, which the store's adoption removes after a
  // crash (it has no sidecar), and which appears whole under its name or not at all.
  fetch.temporary = !io::IsDirectory(fetch.dir);
  if (fetch.temporary) {
    fetch.dir += ".fetch-" + std::to_string(id);
    (void)io::RemoveTree(fetch.dir);
    const Status made = io::MakeDirectories(io::JoinPath(fetch.dir, "data"));
    if (!made.ok()) return FailFetch(id, made.message());
  }
  const size_t node_count = peers_.size();
  std::vector<PeerAgent> ring;
  for (const PeerAgent& peer : peers_) {
    if (peer.node_index != node_index_ && !peer.address.empty()) ring.push_back(peer);
  }
  std::sort(ring.begin(), ring.end(), [&](const PeerAgent& a, const PeerAgent& b) {
    return (a.node_index + node_count - node_index_) % node_count <
           (b.node_index + node_count - node_index_) % node_count;
  });
  if (ring.empty()) {
    return FailFetch(id, "node '" + options_.node + "' knows no peer agent to fetch " + Quoted(checkpoint.name) +
                             " from (the ranks sent no peers, or none can replicate)");
  }
  for (const PeerAgent& peer : ring) {
    fetch.awaiting.push_back(peer.address);
    fetch.holdings.emplace_back(peer.address, std::vector<FileInfo>());
  }
  log_("fetching " + Quoted(checkpoint.name) + " from " + std::to_string(ring.size()) + " peers");
  for (const PeerAgent& peer : ring) {
    ReplicationMessage ask;
    ask.type = MessageType::kInventoryAsk;
    ask.checkpoint = checkpoint.name;
    ask.id = id;
    SendControl(peer.address, std::move(ask));
  }
}

void Replicator::Engine::OnInventoryAsk(const ReplicationMessage& message) {
  ReplicationMessage answer = Reply(MessageType::kInventory, message);
  const std::string dir = CheckpointDir(message.checkpoint);
  // Only a committed checkpoint is offered: a directory without a MANIFEST is a save in flight.
  if (io::PathExists(io::JoinPath(dir, "MANIFEST"))) {
    answer.files = HeldFiles(dir);
  } else {
    answer.error = "node '" + options_.node + "' holds no memory checkpoint " + Quoted(message.checkpoint);
  }
  SendControl(message.reply_address, std::move(answer));
}

void Replicator::Engine::OnInventory(const ReplicationMessage& message) {
  auto it = fetches_.find(message.id);
  if (it == fetches_.end()) return;
  Fetch& fetch = it->second;
  auto asked = std::find(fetch.awaiting.begin(), fetch.awaiting.end(), message.reply_address);
  if (asked == fetch.awaiting.end() || message.checkpoint != fetch.checkpoint.name) return;
  fetch.awaiting.erase(asked);
  fetch.last_progress = Clock::now();
  for (auto& [address, files] : fetch.holdings) {
    if (address == message.reply_address) files = message.files;
  }
  if (!message.error.empty()) fetch.notes += (fetch.notes.empty() ? "" : "; ") + message.error;
  if (fetch.awaiting.empty()) PlanFetch(fetch);
}

// Every peer answered (or failed): each wanted file this node lacks comes from its first holder in ring order.
void Replicator::Engine::PlanFetch(Fetch& fetch) {
  std::set<std::string> local;
  for (const FileInfo& file : HeldFiles(fetch.dir)) local.insert(file.name);
  std::map<std::string, std::vector<FileInfo>> asks;
  for (const auto& [address, files] : fetch.holdings) {
    for (const FileInfo& file : files) {
      if (local.count(file.name) != 0 || (!fetch.wanted.empty() && fetch.wanted.count(file.name) == 0) ||
          !fetch.missing.insert(file.name).second) {
        continue;
      }
      asks[address].push_back(file);
    }
  }
  if (local.count("MANIFEST") == 0 && fetch.missing.count("MANIFEST") == 0) {
    return FailFetch(fetch.id, "no peer holds memory checkpoint " + Quoted(fetch.checkpoint.name) +
                                   (fetch.notes.empty() ? "" : " (" + fetch.notes + ")"));
  }
  for (const std::string& name : fetch.wanted) {
    if (local.count(name) == 0 && fetch.missing.count(name) == 0) {
      return FailFetch(fetch.id, "no peer holds " + Quoted(name) + " of memory checkpoint " +
                                     Quoted(fetch.checkpoint.name) +
                                     (fetch.notes.empty() ? "" : " (" + fetch.notes + ")"));
    }
  }
  if (fetch.missing.empty()) return CompleteFetch(fetch.id);
  const uint64_t id = fetch.id;
  for (const auto& [address, files] : asks) fetch.holders.insert(address);
  for (auto& [address, files] : asks) {
    ReplicationMessage ask;
    ask.type = MessageType::kPushAsk;
    ask.checkpoint = fetch.checkpoint.name;
    ask.id = id;
    ask.files = std::move(files);
    SendControl(address, std::move(ask));
    if (fetches_.count(id) == 0) return;  // that peer failed, and the fetch with it
  }
}

Replicator::Engine::Fetch* Replicator::Engine::FetchOf(const std::string& checkpoint) {
  for (auto& [id, fetch] : fetches_) {
    if (fetch.checkpoint.name == checkpoint) return &fetch;
  }
  return nullptr;
}

void Replicator::Engine::FilesPlaced(uint64_t fetch_id, const std::vector<FileInfo>& files, uint32_t transfer) {
  auto it = fetches_.find(fetch_id);
  if (it == fetches_.end()) return store_.ReleaseIncoming(transfer);
  Fetch& fetch = it->second;
  fetch.transfers.push_back(transfer);
  for (const FileInfo& file : files) fetch.missing.erase(file.name);
  fetch.last_progress = Clock::now();
  if (fetch.missing.empty()) CompleteFetch(fetch_id);
}

void Replicator::Engine::CompleteFetch(uint64_t id) {
  Fetch& fetch = fetches_.at(id);
  const std::string target = CheckpointDir(fetch.checkpoint.name);
  if (fetch.temporary && rename(fetch.dir.c_str(), target.c_str()) != 0) {
    return FailFetch(id, OsError("cannot rename " + Quoted(fetch.dir) + " to " + Quoted(target), errno).message());
  }
  fetch.temporary = false;
  const Status registered = store_.RegisterFetched(fetch.checkpoint);
  if (!registered.ok()) return FailFetch(id, registered.message());
  log_("fetched " + Quoted(fetch.checkpoint.name) + " from peers");
  EndFetch(fetch, Status::Ok());
}

void Replicator::Engine::FailFetch(uint64_t id, const std::string& error) {
  auto it = fetches_.find(id);
  if (it == fetches_.end()) return;
  Fetch& fetch = it->second;
  log_("fetch of " + Quoted(fetch.checkpoint.name) + " failed: " + error);
  // Receives still running into it fail with it; their mappings stay valid after the files are unlinked.
  std::vector<uint32_t> receiving;
  for (const auto& [transfer, incoming] : incoming_) {
    if (incoming.fetch_id == id) receiving.push_back(transfer);
  }
  if (fetch.temporary) {
    (void)io::RemoveTree(fetch.dir);
    ReleaseDeletedMappings();  // of files placed in it
  }
  EndFetch(fetch, PeerFailed("fetching memory checkpoint " + Quoted(fetch.checkpoint.name) + " failed: " + error));
  for (uint32_t transfer : receiving) FailIncoming(transfer, error);
}

// Publishes the outcome for Replicator::Fetch and forgets the fetch, with the budget its files held until now.
void Replicator::Engine::EndFetch(Fetch& fetch, Status outcome) {
  const uint64_t id = fetch.id;
  for (uint32_t transfer : fetch.transfers) store_.ReleaseIncoming(transfer);
  {
    std::lock_guard<std::mutex> lock(mu_);
    fetching_.erase(fetch.checkpoint.name);
    fetch_outcomes_[fetch.outcome_key] = std::move(outcome);
  }
  fetches_.erase(id);
}

}  // namespace ckpt::agent
