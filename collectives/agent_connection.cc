#include "collectives/agent_connection.h"

#include <poll.h>
#include <unistd.h>

#include "collectives/agent_socket.h"
#include "collectives/store_auth.h"

namespace ckpt::coll::agent {

Result<AgentConnection> AgentConnection::Open(const std::string& job_id, const std::string& secret, int rank,
                                              std::chrono::milliseconds timeout) {
  ASSIGN_OR_RETURN(UniqueFd fd, ConnectAbstract(SocketName(static_cast<uint32_t>(geteuid()), job_id)));
  AgentConnection connection(std::move(fd), timeout);
  ASSIGN_OR_RETURN(std::string challenge_bytes, ReceiveMessage(connection.fd_.get(), timeout));
  ASSIGN_OR_RETURN(Challenge challenge, DecodeChallenge(challenge_bytes));
  Hello hello;
  hello.job_id = job_id;
  hello.rank = rank;
  hello.pid = static_cast<uint32_t>(getpid());
  ASSIGN_OR_RETURN(hello.nonce, store_auth::RandomBytes(store_auth::kNonceBytes));
  if (!secret.empty()) {
    hello.proof = store_auth::HelloProof(secret, challenge.nonce, hello.nonce, HelloProofFields(hello));
  }
  RETURN_IF_ERROR(SendMessage(connection.fd_.get(), EncodeHello(hello)));
  ASSIGN_OR_RETURN(std::string reply_bytes, ReceiveMessage(connection.fd_.get(), timeout));
  ASSIGN_OR_RETURN(Reply reply, DecodeReply(reply_bytes));
  RETURN_IF_ERROR(ReplyStatus(reply).WithContext("the node's ckpt-agent refused this rank"));
  ASSIGN_OR_RETURN(connection.welcome_, DecodeWelcome(reply.payload));
  return connection;
}

Result<Reply> AgentConnection::Call(const Request& request) {
  const char* gone = "the node's ckpt-agent did not answer (it may have died)";
  RETURN_IF_ERROR(SendMessage(fd_.get(), EncodeRequest(request)).WithContext(gone));
  Result<std::string> bytes = ReceiveMessage(fd_.get(), timeout_);
  if (!bytes.ok()) return bytes.status().WithContext(gone);
  ASSIGN_OR_RETURN(Reply reply, DecodeReply(bytes.value()));
  RETURN_IF_ERROR(ReplyStatus(reply));
  return reply;
}

bool AgentConnection::Closed() const {
  pollfd state{fd_.get(), POLLIN | POLLRDHUP, 0};
  return poll(&state, 1, 0) > 0 && (state.revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace ckpt::coll::agent
