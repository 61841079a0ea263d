// A row's relay of the TCP store. In a job laid out in a grid (collectives/peer/peer_grid.h), rank 0's store would
// otherwise hold two connections per rank (131,072 at 65,536 ranks). Instead the ranks are taken in rows, and one rank
// of each row runs a relay on a background thread: the ranks of its row connect to it, authenticated with the job's
// secret as rank 0 would, and it carries all their connections to rank 0 over one link, each as a channel
// (tcp_store_wire.h). Rank 0 then holds one link per row, and serves the ranks each carries as if they had connected
// to it. A relay holds two connections per member and rank 0 one per row, so rows of sqrt(N / 2) ranks keep both to
// about sqrt(2 N): 362 at 65,536 ranks.
//
// The relay is the first rank of its row, and in rank 0's own row its last rank.
//
// A rank learns its relay from rank 0's redirect, signed with the secret; the relay's own rank learns there that it
// must start it. The relay answers its members' death checks itself (rank 0 pushes the first death to every relay),
// so that checking costs rank 0 nothing however many ranks wait. A member lost without a goodbye is reported to rank 0
// as that rank's death; the relay lost, rank 0 takes every rank of its row for lost, its own first.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"

namespace ckpt::coll {
namespace store_server {
class ServerLoop;
}  // namespace store_server

// The length of the rows whose relays carry a grid's store connections: the least c with 2 c^2 >= world_size, and at
// least 2.
int StoreRelayColumns(int world_size);

// The rank whose relay carries `rank`'s connections to rank 0 when the ranks are laid out in rows of `columns`: the
// first rank of its row, or in row 0 the last. -1 for rank 0, which reaches its own store directly, and for every
// rank when `columns` is 0 (no relays).
int StoreRelayOf(int rank, int world_size, int columns);

// The ranks the relay on `relay` serves, itself included: those of its row, but rank 0.
int StoreRelayMembers(int relay, int world_size, int columns);

struct StoreRelayConfig {
  int rank = 0;  // the relay's own rank (StoreRelayOf)
  int world_size = 0;
  int columns = 0;         // the rows' length, from rank 0's redirect
  std::string store_host;  // rank 0's store
  int store_port = 0;
  std::string secret;
  std::chrono::milliseconds timeout{0};
};

class StoreRelay {
 public:
  // Connects to rank 0's store as the relay of `config.rank`'s row, listening for its members on the interface that
  // reaches rank 0 (any free port), and serves them until stopped.
  static Result<std::unique_ptr<StoreRelay>> Start(const StoreRelayConfig& config);
  const std::string& host() const { return host_; }
  int port() const { return port_; }
  // Stops once every member's connection has closed or `grace` has passed; members still connected then see their
  // connection drop, and rank 0 takes them for lost.
  void Stop(std::chrono::milliseconds grace);
  ~StoreRelay();

  StoreRelay(const StoreRelay&) = delete;
  StoreRelay& operator=(const StoreRelay&) = delete;

 private:
  StoreRelay(std::unique_ptr<store_server::ServerLoop> loop, std::string host, int port);
  std::unique_ptr<store_server::ServerLoop> loop_;
  std::string host_;
  int port_;
  std::thread thread_;
};

}  // namespace ckpt::coll
