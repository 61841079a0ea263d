// The server side of the TCP store, run by rank 0 on one background thread: a poll() loop over every connection
// (no thread per client) that accepts connections as the stranger gate allows (store_strangers.h), reads and sends
// their frames (store_server_connection.h), hands what they say to the session (store_server_session.h: handshake,
// key-value requests, collectives), wakes for their deadlines, and closes them.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"

namespace ckpt::coll {

class StoreServer {
 public:
  // The job's secret, given the port actually bound (a secret published for the ranks on this node is named
  // after it).
  using SecretForPort = std::function<Result<std::string>(int bound_port)>;

  // Binds host:port (SO_REUSEADDR; port 0: any free port) and serves `world_size` ranks until stopped, admitting
  // only connections that prove they know the secret.
  static Result<std::unique_ptr<StoreServer>> Start(const std::string& host, int port, int world_size,
                                                    const SecretForPort& secret_for_port);
  // The port actually bound.
  int port() const { return port_; }
  // Stops once every rank's connection has closed or `grace` has passed, whichever comes first; ranks still
  // connected then see their connection drop.
  void Stop(std::chrono::milliseconds grace);
  ~StoreServer();

  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  class Loop;

 private:
  StoreServer(std::unique_ptr<Loop> loop, int port);
  std::unique_ptr<Loop> loop_;
  int port_;
  std::thread thread_;
};

}  // namespace ckpt::coll
