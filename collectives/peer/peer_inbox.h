// The receiving half of the peer links (collectives/peer/peer_links.h): a listening socket and a background thread that
// accepts other ranks' connections (strangers as collectives/store/store_strangers.h lets them in), authenticates each
// with the job's secret as the store does, reads their messages into a queue keyed by (collective sequence number,
// sender) and acknowledges each once it is queued.
// A connection that breaks the protocol (a malformed or oversized frame, a frame for a collective already over, a
// sender other than the rank it authenticated as) is dropped, and the failure waits for the rank's next collective.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collectives/store/store_strangers.h"
#include "collectives/store/tcp_store_wire.h"
#include "common/status.h"
#include "common/unique_fd.h"

namespace ckpt::coll {

// The largest message a peer link carries in one frame.
inline constexpr uint64_t kMaxPeerMessageBytes = uint64_t{1} << 30;
// What precedes a message in its frame: the collective's sequence number and the sender's rank.
inline constexpr size_t kMessagePrefixBytes = sizeof(uint64_t) + sizeof(int32_t);

class PeerInbox {
 public:
  // Listens on host, port 0, for the ranks of a world of `world_size` that know `secret`.
  static Result<std::unique_ptr<PeerInbox>> Start(int rank, int world_size, const std::string& host,
                                                  std::string secret);
  ~PeerInbox();

  int port() const { return port_; }

  // The message of `sequence` from `from`, taken from the queue, waiting for it at most until `until`; nullopt if
  // it has not come by then.
  std::optional<std::string> Take(uint64_t sequence, int from, std::chrono::steady_clock::time_point until);
  // Every queued message of `sequence`, by sender, taken from the queue.
  std::map<int, std::string> TakeAll(uint64_t sequence);
  // Ends `sequence` on this rank: later frames for it are stale. Those of a collective that failed here (which
  // its senders may still be delivering) are dropped quietly instead of being taken for a broken peer.
  void Finish(uint64_t sequence, bool completed);

  // The first protocol failure of a link not yet reported (kCorrupt naming the sender), cleared by taking it.
  Status TakeFailure();
  // Per rank: whether it ever had an authenticated link to this one.
  std::vector<bool> Accepted() const;
  // Whether `rank` had a link to this one that has since closed, with none newer: its plane or process is gone.
  bool LinkClosed(int rank) const;

  uint64_t bytes_received() const { return bytes_received_.load(); }
  uint64_t bytes_sent() const { return bytes_sent_.load(); }

 private:
  struct Connection;

  PeerInbox(int rank, int world_size, std::string secret, UniqueFd listener, int port, UniqueFd wake);
  void Loop();
  void AcceptAll();
  bool MakeRoomFor(const std::string& source);
  std::string BusyText(const std::string& source) const;
  void ReadFrom(Connection& c);
  bool StartPayload(Connection& c);
  void OnFrame(Connection& c);
  void OnHello(Connection& c);
  Status OnMessage(Connection& c);
  void Flush(Connection& c);
  void Drop(Connection& c, const Status& why);
  void Close(Connection& c);
  void Queue(Connection& c, store_wire::MessageType type, std::string_view payload);

  const int rank_;
  const int world_size_;
  const std::string secret_;
  const UniqueFd listener_;
  const int port_;
  const UniqueFd wake_;  // an eventfd: written to stop the loop
  std::atomic<bool> stopping_{false};
  std::vector<std::unique_ptr<Connection>> connections_;  // the loop's own
  StrangerGate strangers_;                                // the loop's own

  mutable std::mutex mu_;
  std::condition_variable queued_;
  std::map<std::pair<uint64_t, int>, std::string> messages_;
  uint64_t finished_below_ = 0;   // sequences below it are over on this rank
  std::set<uint64_t> abandoned_;  // those of them that failed here
  std::vector<int> open_links_;   // per rank: its authenticated connections open now
  std::vector<bool> had_link_;    // per rank: whether it ever had one
  Status failure_;

  std::atomic<uint64_t> bytes_received_{0};
  std::atomic<uint64_t> bytes_sent_{0};
  std::thread thread_;
};

}  // namespace ckpt::coll
