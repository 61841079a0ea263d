#include "collectives/peer/peer_control_plane.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "collectives/peer/peer_links.h"

namespace ckpt::coll {
namespace {

using Clock = PeerLinks::Clock;

// Rank r's parent in the binomial tree rooted at rank 0: r without its highest bit.
int Parent(int rank) {
  int highest = 1;
  while (highest * 2 <= rank) highest *= 2;
  return rank - highest;
}

// Rank r's children, the largest subtree first so that the deepest branch starts soonest: r + 2^k for every 2^k
// above r that stays inside the world.
std::vector<int> Children(int rank, int world_size) {
  int step = 1;
  while (step <= rank) step *= 2;
  std::vector<int> children;
  for (; rank + step < world_size; step *= 2) children.push_back(rank + step);
  std::reverse(children.begin(), children.end());
  return children;
}

class PeerControlPlane : public ControlPlane {
 public:
  PeerControlPlane(std::shared_ptr<TcpStore> store, std::unique_ptr<PeerLinks> links)
      : store_(std::move(store)), links_(std::move(links)) {}

  int rank() const override { return store_->rank(); }
  int world_size() const override { return store_->world_size(); }
  std::chrono::milliseconds timeout() const override { return store_->timeout(); }

  Result<std::vector<std::string>> AllGather(std::string_view mine) override {
    ++collectives_;
    return store_->AllGather(mine);
  }

  Result<std::vector<std::string>> AllGatherWithin(std::string_view mine, std::chrono::milliseconds timeout) override {
    ++collectives_;
    return store_->AllGatherWithin(mine, timeout);
  }

  Status Barrier() override {
    ++collectives_;
    return store_->Barrier();
  }

  Status CheckPeers() override { return store_->CheckPeers(); }

  Result<std::vector<std::string>> AllToAllV(std::vector<std::string> outgoing,
                                             std::chrono::milliseconds within) override {
    if (outgoing.size() != static_cast<size_t>(world_size())) {
      return InvalidArgument("alltoall given " + std::to_string(outgoing.size()) + " messages for " +
                             std::to_string(world_size()) + " ranks");
    }
    const uint64_t sequence = next_sequence_++;
    ++collectives_;
    const Clock::time_point deadline = DeadlineWithin(within);
    std::vector<std::pair<int, std::string_view>> messages;
    for (int to = 0; to < world_size(); ++to) {
      if (to != rank() && !outgoing[to].empty()) messages.emplace_back(to, outgoing[to]);
    }
    const Status delivered = links_->Deliver(sequence, messages, deadline);
    Result<std::map<int, std::string>> received = Gather(sequence, delivered, deadline);
    links_->Finish(sequence, received.ok());
    if (!received.ok()) return received.status().WithContext("alltoall " + std::to_string(sequence));
    std::vector<std::string> incoming(world_size());
    for (auto& [from, message] : *received) incoming[from] = std::move(message);
    incoming[rank()] = std::move(outgoing[rank()]);
    return incoming;
  }

  Result<std::string> Broadcast(std::string_view from_root, std::chrono::milliseconds within) override {
    const uint64_t sequence = next_sequence_++;
    ++collectives_;
    const Clock::time_point deadline = DeadlineWithin(within);
    Result<std::string> message =
        rank() == 0 ? Result<std::string>(std::string(from_root)) : links_->Receive(sequence, Parent(rank()), deadline);
    Status forwarded = message.status();
    if (message.ok()) {
      std::vector<std::pair<int, std::string_view>> copies;
      for (int child : Children(rank(), world_size())) copies.emplace_back(child, *message);
      forwarded = links_->Deliver(sequence, copies, deadline);
    }
    links_->Finish(sequence, forwarded.ok());
    if (!forwarded.ok()) return forwarded.WithContext("broadcast " + std::to_string(sequence));
    return message;
  }

  ControlPlaneCounters counters() const override {
    const ControlPlaneCounters store = store_->counters();
    return {links_->bytes_sent() + store.sent, links_->bytes_received() + store.received, collectives_.load()};
  }

 private:
  Clock::time_point DeadlineWithin(std::chrono::milliseconds within) const {
    return Clock::now() + std::min(within, store_->timeout());
  }

  std::chrono::milliseconds Left(Clock::time_point deadline) const {
    return std::max(std::chrono::milliseconds(0),
                    std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()));
  }

  // Every rank reports how its deliveries went, even one whose messages failed, so that all fail together and the
  // store's own collectives stay in step on every rank. Failures go to rank 0 alone, in the store's sparse
  // all-to-all (where all is well no rank sends anything), and rank 0 broadcasts the first: rank 0's server moves a
  // few bytes per rank, where an all-gather of the outcomes would send every rank a length per rank (O(N^2)). Once
  // this completes, every sender had its acks, so every message of `sequence` to this rank is queued.
  Result<std::map<int, std::string>> Gather(uint64_t sequence, const Status& delivered, Clock::time_point deadline) {
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
    return links_->TakeAll(sequence);
  }

  const std::shared_ptr<TcpStore> store_;
  const std::unique_ptr<PeerLinks> links_;  // after store_: the links use it, so they go first
  uint64_t next_sequence_ = 0;
  std::atomic<uint64_t> collectives_{0};
};

}  // namespace

Result<std::unique_ptr<ControlPlane>> MakePeerControlPlane(std::shared_ptr<TcpStore> store) {
  ASSIGN_OR_RETURN(std::unique_ptr<PeerLinks> links, PeerLinks::Open(*store));
  return std::unique_ptr<ControlPlane>(new PeerControlPlane(std::move(store), std::move(links)));
}

}  // namespace ckpt::coll
