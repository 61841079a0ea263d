// What the frames of the TCP store server's connections (tcp_store_server.h) mean. A connection starts as a stranger
// that must prove, in its hello, that it knows the job's secret (store_handshake.h); an authentic hello makes it a
// rank, or a rank's auxiliary connection. A rank's frames are then its requests, handed to the key-value requests
// (store_server_requests.h) or the collective rounds (store_server_collectives.h). A rank's goodbye, its loss, and
// the deadlines of what connections wait for end what they must.
// In a job whose ranks reach rank 0 through relays (store_relay.h), a rank's hello is answered with a redirect to its
// row's relay instead, and each relay's one link carries its members' connections, each made a connection of its own
// here (Connection::via) and served as any other. The first rank to die is pushed to every relay, which answers its
// members' death checks itself.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "collectives/store/store_handshake.h"
#include "collectives/store/store_server_collectives.h"
#include "collectives/store/store_server_connection.h"
#include "collectives/store/store_server_loop.h"
#include "collectives/store/store_server_ranks.h"
#include "collectives/store/store_server_requests.h"
#include "collectives/store/store_strangers.h"
#include "common/status.h"

namespace ckpt::coll::store_server {

class Session : public LoopSession {
 public:
  // `conns` and `strangers` are the server loop's: a stranger's slot is given back once it proves itself, and the
  // connections relays carry are added to `conns`. `relay_columns`: see StoreServer::Start.
  Session(std::string secret, int world_size, int relay_columns, Connections& conns, StrangerGate& strangers)
      : secret_(std::move(secret)),
        relay_columns_(relay_columns),
        conns_(conns),
        strangers_(strangers),
        ranks_(world_size),
        requests_(ranks_, conns),
        rounds_(ranks_, conns) {}

  void OnFrame(Connection& c, uint32_t type, std::string_view payload) override;
  // A rank lost without a goodbye is dead, and so is every collective and wait in progress; a relay lost, every rank
  // it carried.
  void OnLost(Connection& c) override;
  void ExpireDeadlines(Clock::time_point now) override;
  void OnRemoved(Connection& c) override;
  // Every rank's and relay's connection has closed.
  bool Drained(const Connections& conns) const override;

 private:
  // A rank's request; the error returned is the request's own, sent back to it.
  Status Serve(Connection& c, MessageType type, std::string_view payload);
  void OnHello(Connection& c, std::string_view payload);
  Status Admit(int rank, int world_size) const;
  void OnAuxiliaryHello(Connection& c, const store_handshake::Hello& hello);
  // A relayed rank's hello: sent to its relay, or turned away until that relay has connected.
  void Redirect(Connection& c, const store_handshake::Hello& hello, int relay);
  void OnRelayHello(Connection& c, const store_handshake::Hello& hello);
  void OnRelayed(Connection& link, uint32_t type, std::string_view payload);
  void OpenChannel(Connection& link, uint32_t channel, std::string_view payload);
  void Refuse(Connection& c, const Status& status);
  void Leave(Connection& c);
  void LoseRank(Connection& c, const std::string& why);
  void LoseRelay(Connection& link);

  struct Relay {
    std::string host;
    int port = 0;
  };

  const std::string secret_;
  const int relay_columns_;
  Connections& conns_;
  StrangerGate& strangers_;
  RankRoster ranks_;
  KeyValueRequests requests_;
  CollectiveRounds rounds_;
  std::unordered_map<int, Relay> relays_;  // the relays connected, by rank
  bool death_pushed_ = false;              // the relays have been told of the first death
};

}  // namespace ckpt::coll::store_server
