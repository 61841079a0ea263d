// The server side of the TCP store, run by rank 0 on one background thread: a poll() loop over every connection
// (store_server_loop.h: no thread per client) whose session (store_server_session.h) runs the handshake, the
// key-value requests and the collectives, and, in a job whose ranks reach it through relays (store_relay.h), sends
// each rank to its row's relay and serves the ranks each relay carries.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"

namespace ckpt::coll {
namespace store_server {
class ServerLoop;
}  // namespace store_server

class StoreServer {
 public:
  // The job's secret, given the port actually bound (a secret published for the ranks on this node is named
  // after it).
  using SecretForPort = std::function<Result<std::string>(int bound_port)>;

  // Binds host:port (SO_REUSEADDR; port 0: any free port) and serves `world_size` ranks until stopped, admitting
  // only connections that prove they know the secret. With `relay_columns` (0: none), every rank but rank 0 reaches
  // the store through the relay of its row of that many ranks.
  static Result<std::unique_ptr<StoreServer>> Start(const std::string& host, int port, int world_size,
                                                    int relay_columns, const SecretForPort& secret_for_port);
  // The port actually bound.
  int port() const { return port_; }
  // Stops once every rank's connection has closed or `grace` has passed, whichever comes first; ranks still
  // connected then see their connection drop.
  void Stop(std::chrono::milliseconds grace);
  ~StoreServer();

  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

 private:
  StoreServer(std::unique_ptr<store_server::ServerLoop> loop, int port);
  std::unique_ptr<store_server::ServerLoop> loop_;
  int port_;
  std::thread thread_;
};

}  // namespace ckpt::coll
