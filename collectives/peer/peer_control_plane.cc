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

Result<std::unique_ptr<PeerControlPlane>> PeerControlPlane::Open(std::shared_ptr<TcpStore> store, int direct_ranks,
                                                                 int peer_budget) {
  ASSIGN_OR_RETURN(std::unique_ptr<PeerLinks> links, PeerLinks::Open(*store));
  return std::unique_ptr<PeerControlPlane>(
      new PeerControlPlane(std::move(store), std::move(links), direct_ranks, peer_budget));
}

PeerControlPlane::PeerControlPlane(std::shared_ptr<TcpStore> store, std::unique_ptr<PeerLinks> links, int direct_ranks,
                                   int peer_budget)
    : store_(std::move(store)), links_(std::move(links)), grid_(store_->world_size(), direct_ranks, peer_budget) {}

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

// Each hop hands every message on to where its route takes it (collectives/peer/peer_grid.h), in one bundle per
// neighbour, and keeps those that rest here; what reaches its receiver is taken out after the last hop. A rank sends
// and receives at most one bundle per neighbour in each hop. A rank whose hop failed here alone (a bundle it could not
// decode) still takes part in the next, failing it for every rank.
Result<std::vector<std::string>> PeerControlPlane::GridAllToAllV(std::vector<std::string> outgoing,
                                                                 Clock::time_point deadline) {
  using Route = std::pair<int, int>;  // (sender, receiver)
  const int me = rank();
  std::map<Route, std::string_view> here;  // the messages at this rank, in `outgoing` or in `arrived`
  for (int to = 0; to < world_size(); ++to) {
    if (to != me && !outgoing[to].empty()) here[{me, to}] = outgoing[to];
  }
  std::vector<std::map<Route, std::string>> arrived;  // every bundle decoded so far, which `here` points into
  Status decoded = Status::Ok();
  for (int hop = 1; hop <= grid_.hops(); ++hop) {
    std::map<int, std::map<Route, std::string_view>> leaving;  // by the neighbour they go to
    for (auto it = here.begin(); it != here.end();) {
      const int next = grid_.Position(it->first.first, it->first.second, hop);
      if (next == me) {
        ++it;
        continue;
      }
      leaving[next].emplace(it->first, it->second);
      it = here.erase(it);
    }
    std::vector<std::string> bundles;
    bundles.reserve(leaving.size());
    std::vector<std::pair<int, std::string_view>> messages;
    if (decoded.ok()) {
      for (const auto& [next, passing] : leaving) messages.emplace_back(next, bundles.emplace_back(EncodeHop(passing)));
    }
    bool every_rank_failed = false;
    Result<ByRank> handed = Hop(messages, decoded, deadline, &every_rank_failed);
    if (every_rank_failed || hop == grid_.hops()) RETURN_IF_ERROR(handed.status());
    decoded = handed.status();
    if (!decoded.ok()) continue;
    for (const auto& [from, bundle] : *handed) {
      Result<std::map<Route, std::string>> passing =
          DecodeHop(bundle, from, world_size(), [&, from = from, hop](int sender, int receiver) {
            return grid_.Position(sender, receiver, hop - 1) == from && grid_.Position(sender, receiver, hop) == me;
          });
      if (!passing.ok()) {
        decoded = passing.status();
        break;
      }
      for (const auto& [route, message] : arrived.emplace_back(std::move(passing).value())) here[route] = message;
    }
  }
  RETURN_IF_ERROR(decoded);
  std::vector<std::string> incoming(world_size());
  for (const auto& [route, message] : here) incoming[route.first] = std::string(message);
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
