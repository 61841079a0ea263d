// The agent's socket: a unix socket of type SOCK_SEQPACKET, so that every message arrives whole and a closed peer
// reads as end of file. It is a file in the user's socket directory, which only that user can enter, so that nobody
// else can take the address first; both ends check the directory, and the process at the other end, before they
// say anything. Both the agent and the ranks use these.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <chrono>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/unique_fd.h"

namespace ckpt::coll::agent {

// Where this user's agents listen: $CKPT_AGENT_SOCKET_DIR when set; else "$XDG_RUNTIME_DIR/ckpt" when
// XDG_RUNTIME_DIR is a directory private to this user; else "/tmp/ckpt-<euid>". Made (mode 0700) by the agent,
// checked by both ends on every use (collectives/store/private_directory.h).
std::string DefaultSocketDirectory();

// The agent's listening socket and its lock: the lock file beside the socket, held while the agent lives, makes
// the agent of a job on a node one, and tells a live agent's socket from one a killed agent left behind.
class AgentListener {
 public:
  // Makes the private directory `dir` if missing, takes the lock of the socket file `name` in it, replaces a socket
  // left there by an agent that died, then binds and listens (close-on-exec). kAlreadyExists when another process
  // holds the lock: an agent of this job already runs on this node. kInvalidArgument when `dir` is not private.
  static Result<AgentListener> Open(const std::string& dir, const std::string& name);
  AgentListener(AgentListener&&) = default;
  // Remove(): an agent that could not start leaves no socket behind.
  ~AgentListener() { Remove(); }

  int fd() const { return socket_.get(); }
  // Removes the socket file and the lock file, then closes both: the agent leaves, and the next one starts afresh.
  void Remove();

 private:
  AgentListener(UniqueFd socket, UniqueFd lock, std::string socket_path, std::string lock_path);

  UniqueFd socket_;
  UniqueFd lock_;
  std::string socket_path_;
  std::string lock_path_;
};

// Connects to the agent socket `name` in the private directory `dir`, and checks the process listening there:
// kMismatch, naming its uid and pid, when it is another user's (nothing has been sent to it). kNotFound when nobody
// listens there (no agent runs); kInvalidArgument when `dir` is not private (collectives/store/private_directory.h).
Result<UniqueFd> ConnectToAgent(const std::string& dir, const std::string& name);
// The process at the other end of `fd` (its pid, uid and gid), as the kernel recorded it when it connected or
// listened.
Result<ucred> PeerCredentials(int fd);

// Sends one message whole. kPeerFailed when the other end is gone.
Status SendMessage(int fd, std::string_view message);
// Receives one message, waiting at most `timeout` (0: forever). kPeerFailed when the other end closed (or sent
// more than kMaxMessageBytes), kTimeout when nothing came in time.
Result<std::string> ReceiveMessage(int fd, std::chrono::milliseconds timeout);

}  // namespace ckpt::coll::agent
