// Direct TCP links between the ranks of a job that bootstraps through ckpt's TCP store, so that a collective's messages
// go straight from their sender to their receiver and no rank relays the others' bytes. Each rank listens on the
// interface of its own store connection (the one that reaches the other hosts) and publishes its address in the store;
// a rank connects to a peer the first time it sends to it and keeps the link while it lives. Links are authenticated
// with the job's secret as store connections are (collectives/store/store_auth.h); frames are those of
// collectives/store/tcp_store_wire.h. Every wait is bounded by a deadline and asks the store now and then whether a
// rank died, so that a dead peer fails a wait with kPeerFailed long before its timeout.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collectives/peer/peer_inbox.h"
#include "collectives/store/tcp_store.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace ckpt::coll {

// The store key under which `rank` publishes the address of its links: bytes host, i32 port.
std::string PeerLinkAddressKey(int rank);

class PeerLinks {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts this rank's inbox and publishes its address in `store`, which must outlive the links.
  static Result<std::unique_ptr<PeerLinks>> Open(TcpStore& store);

  // Sends each (receiver, message) of collective `sequence`, then waits until every receiver has queued its message.
  // kTimeout naming the receivers that did not by `deadline`; kPeerFailed naming a receiver whose link failed or
  // that the store reports dead; kCorrupt naming a receiver that answered with something else than its ack.
  Status Deliver(uint64_t sequence, const std::vector<std::pair<int, std::string_view>>& messages,
                 Clock::time_point deadline);
  // The message of collective `sequence` from `from`, waiting for it until `deadline`: kTimeout naming `from`,
  // kPeerFailed where its link closed or the store reports a rank dead, kCorrupt where a link broke the protocol.
  Result<std::string> Receive(uint64_t sequence, int from, Clock::time_point deadline);
  // Every message of collective `sequence` received so far, by sender; kCorrupt where a link broke the protocol.
  Result<std::map<int, std::string>> TakeAll(uint64_t sequence);
  // Ends collective `sequence` on this rank (collectives/peer/peer_inbox.h).
  void Finish(uint64_t sequence, bool completed) { inbox_->Finish(sequence, completed); }

  // The ranks this one has opened a link to or accepted one from, ascending.
  std::vector<int> LinkedRanks() const;

  uint64_t bytes_sent() const { return bytes_sent_ + inbox_->bytes_sent(); }
  uint64_t bytes_received() const { return bytes_received_ + inbox_->bytes_received(); }

 private:
  PeerLinks(TcpStore& store, std::string secret, std::unique_ptr<PeerInbox> inbox);
  Status Connect(int to, Clock::time_point deadline);
  Status Link(int to, const std::string& host, int port, Clock::time_point deadline, bool* turned_away);
  Status Handshake(int to, Clock::time_point deadline, bool* turned_away);
  Status TurnedAway(int peer, const std::string& reason, bool* turned_away);
  Status Send(int to, uint64_t sequence, std::string_view message, Clock::time_point deadline);
  Status AwaitAcks(uint64_t sequence, std::vector<int> waiting, Clock::time_point deadline);
  Status ReadAck(int from, uint64_t sequence, Clock::time_point deadline);
  Result<std::pair<uint32_t, std::string>> ReadFrame(int peer, uint64_t limit, Clock::time_point deadline);
  Status SendAll(int to, std::string_view data, Clock::time_point deadline);
  Status RecvAll(int from, char* out, size_t size, Clock::time_point deadline);
  Status WaitReady(int peer, short events, Clock::time_point deadline);
  Status Failed(int peer, Status why);
  std::string LinkTo(int peer) const;

  TcpStore& store_;
  const int rank_;
  const int world_size_;
  const std::string secret_;
  std::unique_ptr<PeerInbox> inbox_;
  std::vector<UniqueFd> links_;  // per rank: this rank's link to it, once opened
  std::vector<bool> opened_;     // per rank: whether this rank ever opened a link to it
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> bytes_received_{0};
};

}  // namespace ckpt::coll
