#include "collectives/agent/agent_connection.h"

#include <poll.h>
#include <unistd.h>

#include "collectives/agent/agent_socket.h"
#include "collectives/store/private_directory.h"
#include "collectives/store/store_auth.h"

namespace ckpt::coll::agent {
namespace {

// Where the job has a secret, the agent must have proven it over both nonces and the welcome's fields.
Status CheckWelcomeProof(const AgentEndpoint& endpoint, const std::string& challenge_nonce,
                         const std::string& hello_nonce, const Welcome& welcome) {
  if (endpoint.secret.empty()) return Status::Ok();
  const std::string expected = WelcomeProof(endpoint.secret, challenge_nonce, hello_nonce, welcome);
  if (store_auth::ProofsMatch(expected, welcome.proof)) return Status::Ok();
  return Mismatch("the process answering as the ckpt-agent of job '" + endpoint.job_id +
                  "' cannot prove the job's CKPT_AGENT_SECRET: it is not the job's agent (or was started with "
                  "another secret); this rank sends it nothing more");
}

}  // namespace

Result<AgentConnection> AgentConnection::Open(const AgentEndpoint& endpoint, int rank,
                                              std::chrono::milliseconds timeout) {
  ASSIGN_OR_RETURN(UniqueFd fd, ConnectToAgent(endpoint.socket_dir, SocketName(endpoint.job_id, endpoint.node)));
  AgentConnection connection(std::move(fd), timeout);
  ASSIGN_OR_RETURN(connection.welcome_, connection.Introduce(endpoint, rank));
  // Checked once here; the directory lies in a sticky, world-writable root at most, where nobody else can move it.
  RETURN_IF_ERROR(OpenPrivateDirectoryBeneath(endpoint.shm_root, connection.welcome_.memory_dir,
                                              "the memory directory the ckpt-agent named")
                      .status()
                      .WithContext("refusing the ckpt-agent of job '" + endpoint.job_id + "'"));
  return connection;
}

Result<Welcome> AgentConnection::Introduce(const AgentEndpoint& endpoint, int rank) {
  ASSIGN_OR_RETURN(std::string challenge_bytes, ReceiveMessage(fd_.get(), timeout_));
  ASSIGN_OR_RETURN(Challenge challenge, DecodeChallenge(challenge_bytes));
  Hello hello;
  hello.job_id = endpoint.job_id;
  hello.rank = rank;
  hello.pid = static_cast<uint32_t>(getpid());
  ASSIGN_OR_RETURN(hello.nonce, store_auth::RandomBytes(store_auth::kNonceBytes));
  if (!endpoint.secret.empty()) {
    hello.proof = store_auth::HelloProof(endpoint.secret, challenge.nonce, hello.nonce, HelloProofFields(hello));
  }
  RETURN_IF_ERROR(SendMessage(fd_.get(), EncodeHello(hello)));
  ASSIGN_OR_RETURN(std::string reply_bytes, ReceiveMessage(fd_.get(), timeout_));
  ASSIGN_OR_RETURN(Reply reply, DecodeReply(reply_bytes));
  RETURN_IF_ERROR(ReplyStatus(reply).WithContext("the node's ckpt-agent refused this rank"));
  ASSIGN_OR_RETURN(Welcome welcome, DecodeWelcome(reply.payload));
  RETURN_IF_ERROR(CheckWelcomeProof(endpoint, challenge.nonce, hello.nonce, welcome));
  return welcome;
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
