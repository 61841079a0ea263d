// What bench/scale's simulations share: timing, peak memory, and the control-plane bytes each rank moves.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/peer/peer_grid.h"
#include "common/bytes.h"
#include "common/status.h"

namespace ckpt::bench {

using Clock = std::chrono::steady_clock;
using Messages = std::vector<std::pair<int, std::string>>;  // (sending rank, message)

// The busiest rank's save and load planning are timed again in a quiet process, best of this many runs: a timing
// taken inside the simulating process (whose heap holds the whole manifest and which times every rank in turn)
// wandered by a factor of two from run to run, and so would the growth exponent computed from it.
inline constexpr int kReplayRuns = 3;

inline constexpr uint64_t kBlockSize = 1ull << 20;
// What an agreement's contribution costs besides its payload: the step's name, a status code, an empty message.
inline constexpr uint64_t kAgreementBytes = 48;
inline constexpr uint64_t kProposalBytes = 96;  // a path, the save's id, two structure hashes
inline constexpr uint64_t kVerdictBytes = 40;
// How many of the slowest ranks of a simulated step are timed again alone before the busiest is chosen.
inline constexpr size_t kRetimedRanks = 8;

// The busiest of `ranks` ranks: the kRetimedRanks whose `seconds` are largest are timed again by `retime` (which
// keeps the faster of each rank's timings, so that `seconds` then gives the new figure), alone in this process now
// that the workers are done, and the slowest of them afterwards is the busiest. One preemption of a worker (they
// share the cores with whatever else runs) would otherwise make its rank pass for the busiest.
int RetimedBusiest(int ranks, const std::function<double(int)>& seconds, const std::function<void(int)>& retime);

inline double Since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The process's peak resident memory. Not getrusage's: its maximum survives execve, so a child forked from the large
// simulating process would report the parent's.
inline uint64_t PeakRssKib(pid_t pid = 0) {
  std::ifstream status(pid == 0 ? std::string("/proc/self/status") : "/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
  }
  return 0;
}

// The peer plane's costs (collectives/peer/peer_control_plane.h) beyond the messages themselves: each message travels
// in a frame its receiver acknowledges (header, sequence and sender; the ack's header and sequence), and each hop of
// an all-to-all ends at rank 0's store with a sparse all-to-all of failures and a broadcast verdict, four frames per
// rank (collectives/store/tcp_store_wire.h: headers, sequence numbers, timeouts, counts). A job larger than the
// plane's direct ranks routes over its grid (collectives/peer/peer_grid.h): a hop per dimension, in which each
// message also carries its sender, receiver and length in its hop's bundle.
inline constexpr uint64_t kPeerFrameBytes = (12 + 8 + 4) + (12 + 8);
inline constexpr uint64_t kPeerCompletionBytes = (12 + 8 + 8 + 4 + 4) + (12 + 4) + (12 + 8 + 8 + 4) + (12 + 4);
inline constexpr uint64_t kHopEntryBytes = 4 + 4 + 8;

// Per rank under the job's collectives; the same over the peer plane of a job that has none; and what rank 0's
// server would relay if the TCP store carried them (every message in and out, every broadcast once to each rank).
struct ControlBytes {
  std::vector<uint64_t> sent, received;
  std::vector<uint64_t> frames;  // per rank: peer-plane messages sent or received
  uint64_t all_to_alls = 0;
  uint64_t store_relay = 0;
  // Per rank, the peer plane's links it holds (collectives/peer/peer_links.h: a sender opens a link to a receiver
  // the first time it sends to it and keeps it), as peer * 2 + 1 for a link it accepted: sorted and deduplicated
  // now and then, and by PeerLinksMax.
  std::vector<std::vector<uint32_t>> links;
  std::vector<size_t> links_deduplicated;
  // Per rank under the peer plane: what it sends and receives over its links, each message counted in every hop.
  std::vector<uint64_t> peer_sent, peer_received;
  const ckpt::coll::PeerGrid grid;
  explicit ControlBytes(int ranks)
      : sent(ranks, 0),
        received(ranks, 0),
        frames(ranks, 0),
        links(ranks),
        links_deduplicated(ranks, 0),
        peer_sent(ranks, 0),
        peer_received(ranks, 0),
        grid(ranks, ckpt::coll::kDefaultDirectRanks) {}
  // The step's messages are sent (Message, once each).
  void AllToAll() { ++all_to_alls; }
  void Gather(uint64_t each) {
    for (size_t r = 1; r < sent.size(); ++r) Route(static_cast<int>(r), 0, each);
    store_relay += each * sent.size();
  }
  void Broadcast(uint64_t bytes) {
    const int ranks = static_cast<int>(sent.size());
    for (int r = 1; r < ranks; ++r) Link(grid.BroadcastParent(r), r);
    // The job's collectives' binomial tree has rank 0 send ceil(log2 N) copies; the peer plane's, as many as it has
    // children.
    sent[0] += bytes * static_cast<uint64_t>(std::ceil(std::log2(std::max(ranks, 2))));
    const uint64_t copies = grid.BroadcastChildren(0).size();
    peer_sent[0] += bytes * copies;
    frames[0] += copies;
    for (int r = 1; r < ranks; ++r) {
      received[r] += bytes;
      peer_received[r] += bytes, ++frames[r];
      const uint64_t forwarded = grid.BroadcastChildren(r).size();
      peer_sent[r] += bytes * forwarded, frames[r] += forwarded;
    }
    store_relay += bytes * sent.size();
  }
  // Decided at rank 0: a gather (an all-to-all) and a broadcast.
  void Agreement(uint64_t payload, uint64_t verdict) {
    Gather(kAgreementBytes + payload);
    AllToAll();
    Broadcast(verdict);
  }
  void Message(int from, int to, uint64_t bytes) {
    store_relay += 2 * bytes;
    if (from != to) Route(from, to, bytes);
  }
  // Under the job's collectives a message goes straight to its receiver; over the peer plane, through the ranks its
  // route passes (its frames counted one per message: an upper bound where the grid bundles them).
  void Route(int from, int to, uint64_t bytes) {
    sent[from] += bytes;
    received[to] += bytes;
    const uint64_t entry = grid.direct() ? 0 : kHopEntryBytes;
    for (int hop = 1, at = from; hop <= grid.hops(); ++hop) {
      const int next = grid.Position(from, to, hop);
      if (next != at) PeerHop(at, next, bytes + entry);
      at = next;
    }
  }
  void PeerHop(int from, int to, uint64_t bytes) {
    Link(from, to);
    peer_sent[from] += bytes;
    peer_received[to] += bytes;
    ++frames[from], ++frames[to];
  }
  uint64_t Busiest() const {
    uint64_t most = 0;
    for (size_t r = 0; r < sent.size(); ++r) most = std::max(most, sent[r] + received[r]);
    return most;
  }
  void Link(int from, int to) {
    Note(from, static_cast<uint32_t>(to) * 2);
    Note(to, static_cast<uint32_t>(from) * 2 + 1);
  }
  void Note(int rank, uint32_t link) {
    std::vector<uint32_t>& held = links[rank];
    held.push_back(link);
    if (held.size() >= 2 * links_deduplicated[rank] + 64) {
      Deduplicate(held);
      links_deduplicated[rank] = held.size();
    }
  }
  static void Deduplicate(std::vector<uint32_t>& held) {
    std::sort(held.begin(), held.end());
    held.erase(std::unique(held.begin(), held.end()), held.end());
  }
  // The rank that holds the most peer links, and how many it holds.
  std::pair<int, uint64_t> PeerLinksMax() {
    std::pair<int, uint64_t> most{0, 0};
    for (size_t r = 0; r < links.size(); ++r) {
      Deduplicate(links[r]);
      if (links[r].size() > most.second) most = {static_cast<int>(r), links[r].size()};
    }
    return most;
  }
  // Rank 0 also carries its server's share of every all-to-all's end, once per hop.
  uint64_t PeerBusiest() const {
    const auto hops = static_cast<uint64_t>(grid.hops());
    uint64_t most = 0;
    for (size_t r = 0; r < sent.size(); ++r) {
      const uint64_t completions = all_to_alls * hops * kPeerCompletionBytes * (r == 0 ? sent.size() : 1);
      most = std::max(most, peer_sent[r] + peer_received[r] + frames[r] * kPeerFrameBytes + completions);
    }
    return most;
  }
};

inline std::vector<std::string> ToIncoming(Messages messages, int ranks) {
  std::vector<std::string> incoming(ranks);
  for (auto& [from, message] : messages) incoming[from] = std::move(message);
  return incoming;
}

inline void Check(const Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "bench/scale: %s: %s\n", what, status.message().c_str());
  std::exit(1);
}

// Messages kept in a file, for a child process that replays one rank's work.
void WriteMessages(const std::string& path, const std::vector<Messages>& lists);
std::vector<Messages> ReadMessages(const std::string& path);

}  // namespace ckpt::bench
