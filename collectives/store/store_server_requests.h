// The key-value requests a rank sends the TCP store's server (tcp_store_server.h): set, get, wait and delete, on the
// one map every rank shares; a set answers the waits for its key, and a wait not answered by its deadline times out.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>

#include "collectives/store/store_server_connection.h"
#include "collectives/store/store_server_ranks.h"
#include "common/status.h"

namespace ckpt::coll::store_server {

class KeyValueRequests {
 public:
  // `ranks` tells whether a rank has died, which fails gets and waits; `conns` holds the waits a set answers.
  KeyValueRequests(const RankRoster& ranks, const Connections& conns) : ranks_(ranks), conns_(conns) {}

  // Each answers `c` itself, or leaves it waiting; the error returned is the request's own, for the caller to send.
  Status Set(Connection& c, std::string_view payload);
  Status Get(Connection& c, std::string_view payload);
  Status Wait(Connection& c, std::string_view payload);
  Status Delete(Connection& c, std::string_view payload);

  // `c`'s wait reached its deadline, `waited` (as "500 ms") after it began.
  static void ExpireWait(Connection& c, const std::string& waited);

 private:
  const RankRoster& ranks_;
  const Connections& conns_;
  std::unordered_map<std::string, std::string> kv_;
};

}  // namespace ckpt::coll::store_server
