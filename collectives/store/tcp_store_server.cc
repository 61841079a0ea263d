#include "collectives/store/tcp_store_server.h"

#include "collectives/store/store_server_loop.h"
#include "collectives/store/store_server_session.h"
#include "collectives/store/tcp_store_wire.h"

namespace ckpt::coll {

Result<std::unique_ptr<StoreServer>> StoreServer::Start(const std::string& host, int port, int world_size,
                                                        int relay_columns, const SecretForPort& secret_for_port) {
  ASSIGN_OR_RETURN(UniqueFd listener, store_wire::Listen(host, port));
  ASSIGN_OR_RETURN(const int bound_port, store_wire::LocalPort(listener.get()));
  // Connections made before the loop runs wait in the listen backlog: none is answered before the secret exists.
  ASSIGN_OR_RETURN(std::string secret, secret_for_port(bound_port));
  ASSIGN_OR_RETURN(std::unique_ptr<store_server::ServerLoop> loop,
                   store_server::ServerLoop::Create(std::move(listener), "the store on rank 0",
                                                    [&](store_server::Connections& conns, StrangerGate& strangers) {
                                                      return std::make_unique<store_server::Session>(
                                                          std::move(secret), world_size, relay_columns, conns,
                                                          strangers);
                                                    }));
  return std::unique_ptr<StoreServer>(new StoreServer(std::move(loop), bound_port));
}

StoreServer::StoreServer(std::unique_ptr<store_server::ServerLoop> loop, int port)
    : loop_(std::move(loop)), port_(port) {
  thread_ = std::thread([loop = loop_.get()] { loop->Run(); });
}

void StoreServer::Stop(std::chrono::milliseconds grace) {
  if (!thread_.joinable()) return;
  loop_->RequestStop(grace);
  thread_.join();
}

StoreServer::~StoreServer() { Stop(std::chrono::milliseconds(0)); }

}  // namespace ckpt::coll
