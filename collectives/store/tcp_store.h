// A TCP key-value store hosted by rank 0, with server-side collectives. Every rank (rank 0 too) holds one
// connection to the server for its lifetime; a connection that drops marks that rank dead, and every pending and
// later operation fails on every rank with kPeerFailed naming it. Messages are length-prefixed and length-checked.
// In a job laid out in a grid, every rank but rank 0 reaches the server through its row's relay
// (collectives/store/store_relay.h), so that no process holds a connection per rank.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collectives/control/control_plane.h"
#include "common/status.h"

namespace ckpt::coll {

// Where to reach the store, as a rendezvous spreads it.
struct StoreAddress {
  std::string host;
  int port = 0;
  std::string secret;
};

struct TcpStoreConfig {
  int rank = 0;
  int world_size = 1;
  std::string host = "127.0.0.1";  // rank 0 binds it; the others connect to it
  int port = 29500;                // 0 on rank 0: any free port (then a rendezvous must spread it)
  std::chrono::milliseconds timeout{300000};
  // The job's secret (collectives/store/store_auth.h), the same on every rank. Empty: rank 0 makes one and publishes it
  // for the ranks on its node, which read it (collectives/store/job_secret.h); ranks elsewhere then cannot connect.
  std::string secret;
  // A rank's second connection, opened after its first (for a background thread): key-value requests only, no
  // collectives, and its loss is not taken for the rank's death.
  bool auxiliary = false;
  // Rank 0 only: take the ranks in rows of this many (store_relay.h: StoreRelayColumns), each row reaching the server
  // through a relay run by one of its ranks, the peer plane then laid out in a grid (collectives/peer/peer_grid.h);
  // 0, every rank connects directly. The other ranks learn it as they connect.
  int relay_columns = 0;
  // Called on every rank before connecting, with the port rank 0 bound (0 on other ranks) and rank 0's secret
  // (empty on other ranks); returns the address and secret to connect with. Lets an out-of-band exchange (a user's
  // allgather) spread an ephemeral port and a secret made by rank 0.
  std::function<Result<StoreAddress>(int bound_port, const std::string& secret)> rendezvous;
};

// How often a rank asks its store server (rank 0's, or its row's relay, which answers such questions itself) whether
// a rank died while it waits, when `askers` ranks ask that server: every 250 ms for a few hundred, and for more every
// askers / 4,000 seconds, so that no server answers more than about 4,000 such questions a second however many ranks
// wait (a straggler keeps them all waiting); at most a quarter of `timeout`, so that a death is still found well
// within it.
std::chrono::milliseconds PeerCheckInterval(int askers, std::chrono::milliseconds timeout);

class TcpStore : public ControlPlane {
 public:
  // Rank 0 starts the server (a background thread) and connects to it; the others connect, retrying until the
  // timeout (also while a store flooded with strangers turns them away). Returns once every rank has connected
  // (kTimeout naming the ranks that never did).
  static Result<std::unique_ptr<TcpStore>> Connect(const TcpStoreConfig& config);
  ~TcpStore() override;

  int rank() const override;
  int world_size() const override;
  // The rows of the relays the ranks reach the store through (TcpStoreConfig::relay_columns), as rank 0 chose them:
  // 0 when every rank connects directly.
  int relay_columns() const;
  // The configuration with the address actually connected to and the secret used (after any rendezvous), without
  // the rendezvous: what an auxiliary connection of this rank needs.
  TcpStoreConfig AuxiliaryConfig() const;
  // The numeric address of this rank's end of its store connection: the interface through which the other ranks'
  // hosts reach this one.
  Result<std::string> LocalHost();
  Result<std::vector<std::string>> AllGather(std::string_view mine) override;
  Result<std::vector<std::string>> AllGatherWithin(std::string_view mine, std::chrono::milliseconds timeout) override;
  std::chrono::milliseconds timeout() const override;
  // Routed by the server: each rank sends its messages once and receives only those addressed to it.
  Result<std::vector<std::string>> AllToAllV(std::vector<std::string> outgoing,
                                             std::chrono::milliseconds within) override;
  Result<std::string> Broadcast(std::string_view from_root, std::chrono::milliseconds within) override;
  // An all-to-all of nothing: each rank's frame and its reply hold a few bytes, where the base version's all-gather
  // of nothing would send every rank a length per rank.
  Status Barrier() override;
  // Asks the store at most once per PeerCheckInterval (from any thread); in between, says what it last heard.
  Status CheckPeers() override;
  ControlPlaneCounters counters() const override;

  Status Set(std::string_view key, std::string_view value);
  // Removes the key, if set (waiters for it keep waiting).
  Status Delete(std::string_view key);
  // nullopt if the key is not set.
  Result<std::optional<std::string>> Get(std::string_view key);
  // Blocks until the key is set, then returns its value; kTimeout after the store's timeout.
  Result<std::string> Wait(std::string_view key);
  // The same, waiting `timeout` instead of the store's own.
  Result<std::string> Wait(std::string_view key, std::chrono::milliseconds timeout);

  class Impl;

 private:
  explicit TcpStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::mutex peer_check_mutex_;
  std::chrono::steady_clock::time_point next_peer_check_{};  // guarded by peer_check_mutex_
  Status last_peer_check_;                                   // guarded by peer_check_mutex_
};

}  // namespace ckpt::coll
