#include "collectives/peer/peer_control_plane.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "collectives/peer/peer_links.h"
#include "common/settings.h"

namespace ckpt::coll {
namespace {

using ByRank = std::map<int, std::string>;

}  // namespace

Result<std::unique_ptr<PeerControlPlane>> PeerControlPlane::Open(std::shared_ptr<TcpStore> store, int direct_ranks) {
  ASSIGN_OR_RETURN(std::unique_ptr<PeerLinks> links, PeerLinks::Open(*store));
  return std::unique_ptr<PeerControlPlane>(new PeerControlPlane(std::move(store), std::move(links), direct_ranks));
}

PeerControlPlane::PeerControlPlane(std::shared_ptr<TcpStore> store, std::unique_ptr<PeerLinks> links, int direct_ranks)
    : store_(std::move(store)), links_(std::move(links)), grid_(store_->world_size(), direct_ranks) {}

PeerControlPlane::~PeerControlPlane() = default;

Result<std::vector<std::string>> PeerControlPlane::AllGather(std::string_view mine) {
  ++collectives_;
  return store_->AllGather(mine);
}

Result<std::vector<std::string>> PeerControlPlane::AllGatherWithin(std::string_view mine,
                                                                   std::chrono::milliseconds timeout) {
  ++collectives_;
  return store_->AllGatherWithin(mine, timeout);
}

Status PeerControlPlane::Barrier() {
  ++collectives_;
  return store_->Barrier();
}

Result<std::vector<std::string>> PeerControlPlane::AllToAllV(std::vector<std::string> outgoing,
                                                             std::chrono::milliseconds within) {
  if (outgoing.size() != static_cast<size_t>(world_size())) {
    return InvalidArgument("alltoall given " + std::to_string(outgoing.size()) + " messages for " +
                           std::to_string(world_size()) + " ranks");
  }
  ++collectives_;
  const uint64_t sequence = next_sequence_;
  const Clock::time_point deadline = DeadlineWithin(within);
  if (!grid_.direct()) {
    Result<std::vector<std::string>> incoming = GridAllToAllV(std::move(outgoing), deadline);
    if (!incoming.ok()) return incoming.status().WithContext("alltoall " + std::to_string(sequence));
    return incoming;
  }
  std::vector<std::pair<int, std::string_view>> messages;
  for (int to = 0; to < world_size(); ++to) {
    if (to != rank() && !outgoing[to].empty()) messages.emplace_back(to, outgoing[to]);
  }
  bool every_rank_failed = false;
  Result<std::map<int, std::string>> received = Hop(messages, Status::Ok(), deadline, &every_rank_failed);
  if (!received.ok()) return received.status().WithContext("alltoall " + std::to_string(sequence));
  std::vector<std::string> incoming(world_size());
  for (auto& [from, message] : *received) incoming[from] = std::move(message);
  incoming[rank()] = std::move(outgoing[rank()]);
  return incoming;
}

// The first hop hands each message to the rank it passes through, in one bundle per such rank; the second hands each
// on to its receiver, in one bundle per receiver. A rank is a first hop's end for the messages of its row (or, from
// the short last row, of its column), so it receives at most one bundle from each neighbour in each hop.
Result<std::vector<std::string>> PeerControlPlane::GridAllToAllV(std::vector<std::string> outgoing,
                                                                 Clock::time_point deadline) {
  const int me = rank();
  std::map<int, std::map<int, std::string_view>> first_hop;   // by the rank they pass through, by receiver
  std::map<int, std::map<int, std::string_view>> second_hop;  // by receiver, by sender: what passes through here
  for (int to = 0; to < world_size(); ++to) {
    if (to == me || outgoing[to].empty()) continue;
    const int via = grid_.Via(me, to);
    (via == me ? second_hop[to][me] : first_hop[via][to]) = outgoing[to];
  }
  std::vector<std::string> bundles;
  bundles.reserve(first_hop.size());
  std::vector<std::pair<int, std::string_view>> messages;
  for (const auto& [via, passing] : first_hop) messages.emplace_back(via, bundles.emplace_back(EncodeHop(passing)));
  bool every_rank_failed = false;
  Result<std::map<int, std::string>> arrived = Hop(messages, Status::Ok(), deadline, &every_rank_failed);
  if (every_rank_failed) return arrived.status();

  std::vector<std::string> incoming(world_size());
  std::vector<std::map<int, std::string>> passing_here;  // what second_hop's views point into
  passing_here.reserve(arrived.ok() ? arrived->size() : 0);
  // A rank whose first hop failed here alone still takes part in the second, failing it for every rank.
  Status decoded = arrived.status();
  const std::map<int, std::string> none;
  for (const auto& [from, bundle] : arrived.ok() ? *arrived : none) {
    Result<std::map<int, std::string>> messages_from = DecodeHop(
        bundle, from, world_size(), [&, from = from](int to) { return to != from && grid_.Via(from, to) == me; });
    if (!messages_from.ok()) {
      decoded = messages_from.status();
      break;
    }
    for (auto& [to, message] : passing_here.emplace_back(std::move(messages_from).value())) {
      if (to == me) {
        incoming[from] = std::move(message);
      } else {
        second_hop[to][from] = message;
      }
    }
  }
  bundles.clear();
  bundles.reserve(second_hop.size());
  messages.clear();
  if (decoded.ok()) {
    for (const auto& [to, passing] : second_hop) messages.emplace_back(to, bundles.emplace_back(EncodeHop(passing)));
  }
  ASSIGN_OR_RETURN(const ByRank handed_on, Hop(messages, decoded, deadline, &every_rank_failed));
  for (const auto& [via, bundle] : handed_on) {
    ASSIGN_OR_RETURN(ByRank messages_from, DecodeHop(bundle, via, world_size(), [&, via = via](int from) {
                       return from != me && grid_.Via(from, me) == via;
                     }));
    for (auto& [from, message] : messages_from) incoming[from] = std::move(message);
  }
  incoming[me] = std::move(outgoing[me]);
  return incoming;
}

Result<std::map<int, std::string>> PeerControlPlane::Hop(const std::vector<std::pair<int, std::string_view>>& messages,
                                                         const Status& ready, Clock::time_point deadline,
                                                         bool* every_rank_failed) {
  const uint64_t sequence = next_sequence_++;
  const Status delivered = ready.ok() ? links_->Deliver(sequence, messages, deadline) : ready;
  const Status agreed = Agree(delivered, deadline);
  *every_rank_failed = !agreed.ok();
  Result<std::map<int, std::string>> received = agreed.ok() ? links_->TakeAll(sequence) : agreed;
  links_->Finish(sequence, received.ok());
  return received;
}

Result<std::string> PeerControlPlane::Broadcast(std::string_view from_root, std::chrono::milliseconds within) {
  const uint64_t sequence = next_sequence_++;
  ++collectives_;
  const Clock::time_point deadline = DeadlineWithin(within);
  Result<std::string> message = rank() == 0 ? Result<std::string>(std::string(from_root))
                                            : links_->Receive(sequence, grid_.BroadcastParent(rank()), deadline);
  Status forwarded = message.status();
  if (message.ok()) {
    std::vector<std::pair<int, std::string_view>> copies;
    for (int child : grid_.BroadcastChildren(rank())) copies.emplace_back(child, *message);
    forwarded = links_->Deliver(sequence, copies, deadline);
  }
  links_->Finish(sequence, forwarded.ok());
  if (!forwarded.ok()) return forwarded.WithContext("broadcast " + std::to_string(sequence));
  return message;
}

ControlPlaneCounters PeerControlPlane::counters() const {
  const ControlPlaneCounters store = store_->counters();
  return {links_->bytes_sent() + store.sent, links_->bytes_received() + store.received, collectives_.load()};
}

std::vector<int> PeerControlPlane::LinkedRanks() const { return links_->LinkedRanks(); }

PeerControlPlane::Clock::time_point PeerControlPlane::DeadlineWithin(std::chrono::milliseconds within) const {
  return Clock::now() + std::min(within, store_->timeout());
}

std::chrono::milliseconds PeerControlPlane::Left(Clock::time_point deadline) const {
  return std::max(std::chrono::milliseconds(0), std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()));
}

// Every rank reports how its deliveries went, even one whose messages failed, so that all fail together and the
// store's own collectives stay in step on every rank. Failures go to rank 0 alone, in the store's sparse
// all-to-all (where all is well no rank sends anything), and rank 0 broadcasts the first: rank 0's server moves a
// few bytes per rank, where an all-gather of the outcomes would send every rank a length per rank (O(N^2)). Once
// this completes, every sender had its acks, so every message of the hop to this rank is queued.
Status PeerControlPlane::Agree(const Status& delivered, Clock::time_point deadline) {
  std::vector<std::string> reports(world_size());
  if (!delivered.ok() && rank() != 0) reports[0] = "failed: " + delivered.message();
  Result<std::vector<std::string>> received = store_->AllToAllV(std::move(reports), Left(deadline));
  std::string first_failure;
  if (rank() == 0 && received.ok()) {
    if (!delivered.ok()) (*received)[0] = "failed: " + delivered.message();
    for (size_t r = 0; r < received->size() && first_failure.empty(); ++r) {
      if (!(*received)[r].empty()) {
        first_failure = "rank " + std::to_string(r) + " could not deliver its messages: " + (*received)[r];
      }
    }
  }
  RETURN_IF_ERROR(received.status());
  Result<std::string> verdict = store_->Broadcast(first_failure, Left(deadline));
  RETURN_IF_ERROR(delivered);
  RETURN_IF_ERROR(verdict.status());
  if (!verdict->empty()) return PeerFailed(*verdict);
  return Status::Ok();
}

int PeerDirectRanks() {
  const uint64_t direct_ranks = settings::PositiveFromEnv(settings::kPeerDirectRanksVar, kDefaultDirectRanks);
  return static_cast<int>(std::min<uint64_t>(direct_ranks, std::numeric_limits<int>::max()));
}

Result<std::unique_ptr<ControlPlane>> MakePeerControlPlane(std::shared_ptr<TcpStore> store) {
  const int direct_ranks = store->relay_columns() > 0 ? 1 : store->world_size();
  ASSIGN_OR_RETURN(std::unique_ptr<PeerControlPlane> plane, PeerControlPlane::Open(std::move(store), direct_ranks));
  return std::unique_ptr<ControlPlane>(std::move(plane));
}

}  // namespace ckpt::coll
