#include "collectives/store/store_server_collectives.h"

#include <algorithm>

#include "common/bytes.h"

namespace ckpt::coll::store_server {
namespace {

std::vector<int> MissingRanks(const Collective& collective) {
  std::vector<int> missing;
  for (size_t r = 0; r < collective.arrived.size(); ++r) {
    if (!collective.arrived[r]) missing.push_back(static_cast<int>(r));
  }
  return missing;
}

// " bytes to one rank (at most <limit>)": the tail of every message about an answer grown too large.
std::string TooLarge() { return " bytes to one rank (at most " + std::to_string(store_wire::kMaxMessageBytes) + ")"; }

}  // namespace

void CollectiveRounds::JoinConnect(Connection& c, uint64_t timeout_ms) {
  connect_.arrived[c.rank] = true;
  ++connect_.count;
  SetPending(c, Pending::kHello, timeout_ms);
  if (connect_.count < ranks_.world_size()) return;
  // Each rank gets its own proof: they answer different nonces.
  for (const auto& waiting : conns_) {
    if (waiting->pending == Pending::kHello) Answer(*waiting, Frame(MessageType::kOk, waiting->welcome));
  }
}

Status CollectiveRounds::Join(Connection& c, MessageType kind, std::string_view payload) {
  ByteReader reader(payload,
                    std::string("store ") + store_wire::CollectiveName(kind) + " from rank " + std::to_string(c.rank));
  uint64_t sequence = 0, timeout_ms = 0;
  std::string contribution;
  RETURN_IF_ERROR(reader.U64(&sequence));
  RETURN_IF_ERROR(reader.U64(&timeout_ms));
  RETURN_IF_ERROR(reader.Bytes(&contribution));
  RETURN_IF_ERROR(reader.ExpectDone());
  RETURN_IF_ERROR(ranks_.DeadRanksError());
  const std::string name = std::string(store_wire::CollectiveName(kind)) + " " + std::to_string(sequence);
  const auto [it, first] = gatherings_.try_emplace(sequence, ranks_.world_size());
  Collective& gathering = it->second;
  if (first) gathering.kind = kind;
  if (gathering.failure) return *gathering.failure;
  if (gathering.arrived[c.rank]) {
    return InvalidArgument("rank " + std::to_string(c.rank) + " joined " + name + " twice");
  }
  gathering.arrived[c.rank] = true;
  ++gathering.count;
  c.sequence = sequence;
  SetPending(c, Pending::kAllGather, timeout_ms);
  Status accepted = gathering.kind == kind
                        ? Accept(gathering, c.rank, std::move(contribution))
                        : Mismatch("rank " + std::to_string(c.rank) + " called " + name + " while others called " +
                                   store_wire::CollectiveName(gathering.kind) + " " + std::to_string(sequence));
  if (!accepted.ok()) {
    FailCollective(sequence, accepted.WithContext(name));
  } else if (gathering.count == ranks_.world_size()) {
    Complete(sequence);
  } else {
    FailIfAbandoned(sequence);
  }
  return Status::Ok();
}

Status CollectiveRounds::Accept(Collective& gathering, int rank, std::string contribution) const {
  const uint64_t limit = store_wire::kMaxMessageBytes;
  switch (gathering.kind) {
    case MessageType::kAllToAll:
      return AcceptAllToAll(gathering, rank, contribution);
    case MessageType::kBroadcast:
      if (rank != 0 && !contribution.empty()) {
        return InvalidArgument("rank " + std::to_string(rank) + " contributed to a broadcast from rank 0");
      }
      if (contribution.size() + sizeof(uint64_t) > limit) {
        return InvalidArgument("rank 0 broadcasts " + std::to_string(contribution.size()) + TooLarge());
      }
      gathering.contributions[rank] = std::move(contribution);
      return Status::Ok();
    default:
      gathering.reply_bytes[0] += sizeof(uint64_t) + contribution.size();
      if (gathering.reply_bytes[0] > limit) {
        return InvalidArgument("gathers " + std::to_string(gathering.reply_bytes[0]) + TooLarge());
      }
      gathering.contributions[rank] = std::move(contribution);
      return Status::Ok();
  }
}

// Routes each message of `rank`'s contribution to the rank it is addressed to.
Status CollectiveRounds::AcceptAllToAll(Collective& gathering, int rank, const std::string& contribution) const {
  const int world_size = ranks_.world_size();
  ByteReader parts(contribution, "alltoall contribution of rank " + std::to_string(rank));
  uint32_t count = 0;
  RETURN_IF_ERROR(parts.Count(&count, static_cast<uint32_t>(world_size), sizeof(int32_t) + sizeof(uint64_t)));
  if (gathering.routed.empty()) gathering.routed.resize(world_size);
  int previous = -1;
  for (uint32_t i = 0; i < count; ++i) {
    int32_t to = 0;
    std::string message;
    RETURN_IF_ERROR(parts.I32(&to));
    RETURN_IF_ERROR(parts.Bytes(&message));
    if (to <= previous || to >= world_size) {
      return Corrupt("rank " + std::to_string(rank) + " addressed a message to rank " + std::to_string(to) +
                     " out of order or outside the world");
    }
    previous = to;
    gathering.reply_bytes[to] += sizeof(int32_t) + sizeof(uint64_t) + message.size();
    if (gathering.reply_bytes[to] > store_wire::kMaxMessageBytes) {
      return InvalidArgument("rank " + std::to_string(to) + " would receive " +
                             std::to_string(gathering.reply_bytes[to]) + TooLarge());
    }
    gathering.routed[to].emplace_back(rank, std::move(message));
  }
  return parts.ExpectDone();
}

void CollectiveRounds::Complete(uint64_t sequence) {
  Collective gathering = std::move(gatherings_.at(sequence));
  gatherings_.erase(sequence);
  if (gathering.kind == MessageType::kAllToAll) return CompleteAllToAll(sequence, gathering);
  ByteWriter reply;
  if (gathering.kind == MessageType::kBroadcast) {
    reply.Bytes(gathering.contributions[0]);
  } else {
    reply.U32(static_cast<uint32_t>(ranks_.world_size()));
    for (const std::string& contribution : gathering.contributions) reply.Bytes(contribution);
  }
  ReplyToPending(conns_, Pending::kAllGather, sequence, Frame(MessageType::kOk, reply.data()));
}

// Each rank gets its own messages, by sender, built and sent one rank at a time so that only one reply is copied at
// once.
void CollectiveRounds::CompleteAllToAll(uint64_t sequence, Collective& gathering) {
  for (const auto& c : conns_) {
    if (c->pending != Pending::kAllGather || c->sequence != sequence) continue;
    std::vector<std::pair<int, std::string>>& row = gathering.routed.empty() ? empty_row_ : gathering.routed[c->rank];
    std::sort(row.begin(), row.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    ByteWriter reply;
    reply.U32(static_cast<uint32_t>(row.size()));
    for (const auto& [from, message] : row) {
      reply.I32(from);
      reply.Bytes(message);
    }
    row = {};
    Answer(*c, Frame(MessageType::kOk, reply.data()));
  }
}

void CollectiveRounds::FailAll(const Status& status) {
  FailConnect(status);
  for (auto& [sequence, gathering] : gatherings_) FailCollective(sequence, status);
}

void CollectiveRounds::FailAbandoned() {
  std::vector<uint64_t> in_progress;
  for (const auto& [sequence, gathering] : gatherings_) in_progress.push_back(sequence);
  for (uint64_t sequence : in_progress) FailIfAbandoned(sequence);
}

// A collective that a rank which left cleanly never joined can no longer complete.
void CollectiveRounds::FailIfAbandoned(uint64_t sequence) {
  const Collective& gathering = gatherings_.at(sequence);
  const std::vector<int> gone = ranks_.LeftWithout(gathering.arrived);
  if (gone.empty()) return;
  FailCollective(sequence, PeerFailed(FormatRanks(gone) + " left the store without joining " +
                                      store_wire::CollectiveName(gathering.kind) + " " + std::to_string(sequence)));
}

void CollectiveRounds::FailCollective(uint64_t sequence, const Status& status) {
  Collective& gathering = gatherings_.at(sequence);
  if (gathering.failure) return;
  gathering.failure = status;
  gathering.contributions = std::vector<std::string>();
  gathering.routed = {};
  ReplyToPending(conns_, Pending::kAllGather, sequence, ErrorFrame(status));
}

void CollectiveRounds::FailConnect(const Status& status) {
  if (connect_.failure || connect_.count == ranks_.world_size()) return;
  connect_.failure = status;
  ReplyToPending(conns_, Pending::kHello, 0, ErrorFrame(status));
}

void CollectiveRounds::Expire(const Connection& c, const std::string& waited) {
  if (c.pending == Pending::kHello) {
    FailConnect(Timeout("timed out after " + waited + " waiting for " + FormatRanks(MissingRanks(connect_)) +
                        " to connect to the store"));
    return;
  }
  const Collective& gathering = gatherings_.at(c.sequence);
  FailCollective(c.sequence,
                 Timeout(std::string(store_wire::CollectiveName(gathering.kind)) + " " + std::to_string(c.sequence) +
                         " timed out after " + waited + " waiting for " + FormatRanks(MissingRanks(gathering))));
}

}  // namespace ckpt::coll::store_server
