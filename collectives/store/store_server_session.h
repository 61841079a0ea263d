// What the frames of the TCP store server's connections (tcp_store_server.h) mean. A connection starts as a stranger
// that must prove, in its hello, that it knows the job's secret (store_handshake.h); an authentic hello makes it a
// rank, or a rank's auxiliary connection. A rank's frames are then its requests, handed to the key-value requests
// (store_server_requests.h) or the collective rounds (store_server_collectives.h). A rank's goodbye, its loss, and
// the deadlines of what connections wait for end what they must.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "collectives/store/store_handshake.h"
#include "collectives/store/store_server_collectives.h"
#include "collectives/store/store_server_connection.h"
#include "collectives/store/store_server_ranks.h"
#include "collectives/store/store_server_requests.h"
#include "collectives/store/store_strangers.h"
#include "common/status.h"

namespace ckpt::coll::store_server {

class Session : public FrameHandler {
 public:
  // `conns` and `strangers` are the server loop's: a stranger's slot is given back once it proves itself.
  Session(std::string secret, int world_size, const Connections& conns, StrangerGate& strangers)
      : secret_(std::move(secret)),
        conns_(conns),
        strangers_(strangers),
        ranks_(world_size),
        requests_(ranks_, conns),
        rounds_(ranks_, conns) {}

  void OnFrame(Connection& c, uint32_t type, std::string_view payload) override;
  // A rank lost without a goodbye is dead, and so is every collective and wait in progress.
  void OnLost(Connection& c) override;
  // Ends what connections waited for past its deadline.
  void ExpireDeadlines(Clock::time_point now);

 private:
  // A rank's request; the error returned is the request's own, sent back to it.
  Status Serve(Connection& c, MessageType type, std::string_view payload);
  void OnHello(Connection& c, std::string_view payload);
  Status Admit(int rank, int world_size) const;
  void OnAuxiliaryHello(Connection& c, const store_handshake::Hello& hello);
  void Refuse(Connection& c, const Status& status);
  void Leave(Connection& c);

  const std::string secret_;
  const Connections& conns_;
  StrangerGate& strangers_;
  RankRoster ranks_;
  KeyValueRequests requests_;
  CollectiveRounds rounds_;
};

}  // namespace ckpt::coll::store_server
