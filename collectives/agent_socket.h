// The agent's socket: an abstract unix socket of type SOCK_SEQPACKET, so that every message arrives whole and a
// closed peer reads as end of file. Both the agent and the ranks use these.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/unique_fd.h"

namespace ckpt::coll::agent {

// Binds and listens on the abstract name `name` (close-on-exec). kAlreadyExists when another process holds it: an
// agent of this job already runs in this network namespace.
Result<UniqueFd> ListenAbstract(std::string_view name);
// Connects to the abstract name `name`. kNotFound when nobody listens there (no agent runs).
Result<UniqueFd> ConnectAbstract(std::string_view name);
// The user id of the process at the other end, as the kernel recorded it when it connected.
Result<uid_t> PeerUid(int fd);

// Sends one message whole. kPeerFailed when the other end is gone.
Status SendMessage(int fd, std::string_view message);
// Receives one message, waiting at most `timeout` (0: forever). kPeerFailed when the other end closed (or sent
// more than kMaxMessageBytes), kTimeout when nothing came in time.
Result<std::string> ReceiveMessage(int fd, std::chrono::milliseconds timeout);

}  // namespace ckpt::coll::agent
