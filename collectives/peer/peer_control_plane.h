// A control plane for jobs that bootstrap through ckpt's TCP store without collectives of their own, in which no
// rank relays the others' bytes. The store keeps what only it can do cheaply: AllGather and Barrier, and knowing
// which ranks died. AllToAllV and Broadcast travel over links between the ranks (collectives/peer/peer_links.h), which
// the grid (collectives/peer/peer_grid.h) bounds in a large job: an all-to-all sends each message that is not empty
// to its receiver, straight or in one hop per dimension of the grid, each hop ended with a store agreement of a few
// bytes; a broadcast descends a binomial tree rooted at rank 0, so that rank 0 sends about log2 N copies.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collectives/control/control_plane.h"
#include "collectives/peer/peer_grid.h"
#include "collectives/store/tcp_store.h"

namespace ckpt::coll {

class PeerLinks;

class PeerControlPlane final : public ControlPlane {
 public:
  // Opens this rank's peer links (listening on the interface of its store connection); not collective. The store
  // must be connected, with world size > 1. Jobs of up to `direct_ranks` ranks link any two ranks directly; larger
  // ones give no rank more than `peer_budget` neighbours in their grid.
  static Result<std::unique_ptr<PeerControlPlane>> Open(std::shared_ptr<TcpStore> store, int direct_ranks,
                                                        int peer_budget = kGridPeerBudget);
  ~PeerControlPlane() override;

  int rank() const override { return store_->rank(); }
  int world_size() const override { return store_->world_size(); }
  std::chrono::milliseconds timeout() const override { return store_->timeout(); }
  Result<std::vector<std::string>> AllGather(std::string_view mine) override;
  Result<std::vector<std::string>> AllGatherWithin(std::string_view mine, std::chrono::milliseconds timeout) override;
  Status Barrier() override;
  Status CheckPeers() override { return store_->CheckPeers(); }
  Result<std::vector<std::string>> AllToAllV(std::vector<std::string> outgoing,
                                             std::chrono::milliseconds within) override;
  Result<std::string> Broadcast(std::string_view from_root, std::chrono::milliseconds within) override;
  ControlPlaneCounters counters() const override;

  const PeerGrid& grid() const { return grid_; }
  // The ranks this one has linked to or accepted a link from, ascending.
  std::vector<int> LinkedRanks() const;

 private:
  using Clock = std::chrono::steady_clock;

  PeerControlPlane(std::shared_ptr<TcpStore> store, std::unique_ptr<PeerLinks> links, int direct_ranks,
                   int peer_budget);
  Clock::time_point DeadlineWithin(std::chrono::milliseconds within) const;
  std::chrono::milliseconds Left(Clock::time_point deadline) const;
  // One hop: sends each (receiver, message) unless `ready` is a failure of this rank's, then agrees with every rank
  // on how the hop went; what this rank received, by sender. *every_rank_failed: the failure is every rank's (the
  // agreement failed), not this rank's alone.
  Result<std::map<int, std::string>> Hop(const std::vector<std::pair<int, std::string_view>>& messages,
                                         const Status& ready, Clock::time_point deadline, bool* every_rank_failed);
  // Every rank's outcome of a hop, `delivered` this rank's: the first failure on every rank, or Ok on every rank.
  Status Agree(const Status& delivered, Clock::time_point deadline);
  Result<std::vector<std::string>> GridAllToAllV(std::vector<std::string> outgoing, Clock::time_point deadline);

  const std::shared_ptr<TcpStore> store_;
  const std::unique_ptr<PeerLinks> links_;  // after store_: the links use it, so they go first
  const PeerGrid grid_;
  uint64_t next_sequence_ = 0;
  std::atomic<uint64_t> collectives_{0};
};

// The largest job whose peer plane links any two ranks: CKPT_PEER_DIRECT_RANKS, or kDefaultDirectRanks.
int PeerDirectRanks();

// PeerControlPlane::Open in the layout rank 0 chose for the store (a grid where its ranks reach it through relays,
// TcpStore::relay_columns), so that the two always agree.
Result<std::unique_ptr<ControlPlane>> MakePeerControlPlane(std::shared_ptr<TcpStore> store);

}  // namespace ckpt::coll
