// The rounds the TCP store's server (tcp_store_server.h) runs across every rank: the connect barrier, which answers
// the ranks' hellos once all have said hello, and the collectives (allgather, all-to-all, broadcast), numbered by one
// sequence. Each round collects who has arrived with what, answers every rank at once when the last arrives, and
// fails for all when a rank dies, leaves without joining, contributes something wrong or times out.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collectives/store/store_server_connection.h"
#include "collectives/store/store_server_ranks.h"
#include "common/status.h"

namespace ckpt::coll::store_server {

// The connect barrier or one collective: who has arrived, with what.
struct Collective {
  explicit Collective(int world_size)
      : arrived(world_size, false), contributions(world_size), reply_bytes(world_size, sizeof(uint32_t)) {}
  MessageType kind = MessageType::kAllGather;
  std::vector<bool> arrived;
  // Allgather and broadcast: each rank's contribution. All-to-all: routed[to] holds the messages ranks send `to`,
  // with their senders (only messages that are not empty: most pairs of a large job have nothing to say).
  std::vector<std::string> contributions;
  std::vector<std::vector<std::pair<int, std::string>>> routed;
  int count = 0;
  std::vector<uint64_t> reply_bytes;  // the size of each rank's answer's payload so far
  std::optional<Status> failure;
};

class CollectiveRounds {
 public:
  // `ranks` tells who has died or left; `conns` holds the connections waiting on a round.
  CollectiveRounds(const RankRoster& ranks, const Connections& conns)
      : ranks_(ranks), conns_(conns), connect_(ranks.world_size()) {}

  // Why the connect barrier failed, once it has: no rank may join it any more.
  const std::optional<Status>& connect_failure() const { return connect_.failure; }
  // `c`, whose hello made it a rank, waits at the connect barrier for at most `timeout_ms`.
  void JoinConnect(Connection& c, uint64_t timeout_ms);
  // `c` joins the collective `kind` of `payload` (kAllGather, kAllToAll or kBroadcast). The error returned is the
  // request's own, for the caller to send; a failure of the collective itself answers every rank in it.
  Status Join(Connection& c, MessageType kind, std::string_view payload);

  // A rank died: every round in progress fails with `status`.
  void FailAll(const Status& status);
  // A rank left with a goodbye: the collectives it never joined fail.
  void FailAbandoned();
  // The round `c` waits in reached its deadline, `waited` (as "500 ms") after `c` joined it.
  void Expire(const Connection& c, const std::string& waited);

 private:
  // Files one rank's contribution, keeping every answer it will be part of under the message limit.
  Status Accept(Collective& gathering, int rank, std::string contribution) const;
  Status AcceptAllToAll(Collective& gathering, int rank, const std::string& contribution) const;
  void Complete(uint64_t sequence);
  void CompleteAllToAll(uint64_t sequence, Collective& gathering);
  void FailIfAbandoned(uint64_t sequence);
  void FailCollective(uint64_t sequence, const Status& status);
  void FailConnect(const Status& status);

  const RankRoster& ranks_;
  const Connections& conns_;
  Collective connect_;
  std::map<uint64_t, Collective> gatherings_;           // by sequence number
  std::vector<std::pair<int, std::string>> empty_row_;  // the messages of an all-to-all in which nobody sent any
};

}  // namespace ckpt::coll::store_server
