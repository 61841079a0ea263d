#include "tests/simgpu/sim_nccl_group.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include "tests/simgpu/sim_config.h"
#include "tests/simgpu/sim_cuda_internal.h"
#include "tests/simgpu/sim_nccl_api.h"

namespace simgpu {
namespace {

constexpr size_t kHeaderBytes = sizeof(uint64_t);
// Bytes moved on one connection before the others get a turn.
constexpr size_t kBurstBytes = size_t{4} << 20;
constexpr int kPollMilliseconds = 50;

struct Message {
  char* data;  // the shadow of the device buffer
  size_t size;
};

// What a failed step reports: an NCCL result (kNcclSuccess: none) and the message for ncclGetLastError.
struct Outcome {
  int result = kNcclSuccess;
  std::string message;
};

// One peer's part of the group. Each frame is the message's size then its bytes; `*_done` counts the bytes of the
// current frame moved so far, header included.
struct Channel {
  int peer = -1;
  int fd = -1;
  std::vector<Message> out;
  std::vector<Message> in;
  size_t out_index = 0;
  size_t out_done = 0;
  size_t in_index = 0;
  size_t in_done = 0;
  uint64_t in_header = 0;

  bool sending() const { return out_index < out.size(); }
  bool receiving() const { return in_index < in.size(); }
};

Outcome ConnectionFailed(const Channel& channel, int error) {
  if (error == EPIPE || error == ECONNRESET) {
    return {kNcclRemoteError, "peer rank " + std::to_string(channel.peer) + " closed the connection"};
  }
  return {kNcclRemoteError,
          "connection to peer rank " + std::to_string(channel.peer) + " failed: " + std::strerror(error)};
}

// Sends as much of the pending frames as the socket takes now.
Outcome Push(Channel& channel) {
  size_t budget = kBurstBytes;
  while (channel.sending() && budget > 0) {
    const Message& message = channel.out[channel.out_index];
    const uint64_t header = message.size;
    const char* piece;
    size_t length;
    if (channel.out_done < kHeaderBytes) {
      piece = reinterpret_cast<const char*>(&header) + channel.out_done;
      length = kHeaderBytes - channel.out_done;
    } else {
      piece = message.data + (channel.out_done - kHeaderBytes);
      length = std::min(message.size - (channel.out_done - kHeaderBytes), budget);
      budget -= length;
    }
    const ssize_t sent = send(channel.fd, piece, length, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return {};
      return ConnectionFailed(channel, errno);
    }
    channel.out_done += static_cast<size_t>(sent);
    if (channel.out_done == kHeaderBytes + message.size) {
      ++channel.out_index;
      channel.out_done = 0;
    }
  }
  return {};
}

// Receives as much of the expected frames as has arrived, checking each frame's size against its receive.
Outcome Pull(Channel& channel, int rank) {
  size_t budget = kBurstBytes;
  while (channel.receiving() && budget > 0) {
    const Message& message = channel.in[channel.in_index];
    char* piece;
    size_t length;
    if (channel.in_done < kHeaderBytes) {
      piece = reinterpret_cast<char*>(&channel.in_header) + channel.in_done;
      length = kHeaderBytes - channel.in_done;
    } else {
      piece = message.data + (channel.in_done - kHeaderBytes);
      length = std::min(message.size - (channel.in_done - kHeaderBytes), budget);
      budget -= length;
    }
    const ssize_t got = recv(channel.fd, piece, length, MSG_DONTWAIT);
    if (got == 0) return {kNcclRemoteError, "peer rank " + std::to_string(channel.peer) + " closed the connection"};
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return {};
      return ConnectionFailed(channel, errno);
    }
    channel.in_done += static_cast<size_t>(got);
    if (channel.in_done == kHeaderBytes && channel.in_header != message.size) {
      return {kNcclInvalidUsage, "rank " + std::to_string(rank) + " posted a receive of " +
                                     std::to_string(message.size) + " bytes from peer rank " +
                                     std::to_string(channel.peer) + ", which sent " +
                                     std::to_string(channel.in_header) + " bytes"};
    }
    if (channel.in_done == kHeaderBytes + message.size) {
      ++channel.in_index;
      channel.in_done = 0;
    }
  }
  return {};
}

// Sends to this rank itself match its receives from itself in issue order.
Outcome CopyToSelf(int rank, const std::vector<Message>& sends, const std::vector<Message>& receives) {
  const std::string who = "rank " + std::to_string(rank);
  if (sends.size() != receives.size()) {
    return {kNcclInvalidUsage, who + " posted " + std::to_string(sends.size()) + " sends to itself and " +
                                   std::to_string(receives.size()) + " receives from itself"};
  }
  for (size_t i = 0; i < sends.size(); ++i) {
    if (sends[i].size != receives[i].size) {
      return {kNcclInvalidUsage, who + " sent itself " + std::to_string(sends[i].size) + " bytes into a receive of " +
                                     std::to_string(receives[i].size) + " bytes"};
    }
    std::memmove(receives[i].data, sends[i].data, sends[i].size);
  }
  return {};
}

// Moves bytes on every channel until all are done, one fails, or the communicator is aborted.
Outcome Progress(Communicator& comm, std::map<int, Channel>& channels) {
  for (;;) {
    std::vector<pollfd> waiting;
    std::vector<Channel*> owners;
    for (auto& entry : channels) {
      Channel& channel = entry.second;
      const short events = static_cast<short>((channel.sending() ? POLLOUT : 0) | (channel.receiving() ? POLLIN : 0));
      if (events == 0) continue;
      waiting.push_back(pollfd{channel.fd, events, 0});
      owners.push_back(&channel);
    }
    if (waiting.empty() || comm.aborted()) return {};
    if (poll(waiting.data(), waiting.size(), kPollMilliseconds) < 0 && errno != EINTR) {
      return {kNcclSystemError, std::string("poll failed: ") + std::strerror(errno)};
    }
    for (size_t i = 0; i < waiting.size(); ++i) {
      const short seen = waiting[i].revents;
      Outcome outcome;
      if ((seen & (POLLIN | POLLHUP | POLLERR)) && owners[i]->receiving()) outcome = Pull(*owners[i], comm.rank());
      if (outcome.result == kNcclSuccess && (seen & (POLLOUT | POLLHUP | POLLERR)) && owners[i]->sending()) {
        outcome = Push(*owners[i]);
      }
      if (outcome.result != kNcclSuccess) return outcome;
    }
  }
}

// Sorts the group's transfers into self copies and per-peer channels, with the shadows of their buffers.
Outcome Arrange(Communicator& comm, const std::vector<Transfer>& transfers, std::map<int, Channel>* channels,
                std::vector<Message>* self_sends, std::vector<Message>* self_receives) {
  for (const Transfer& transfer : transfers) {
    Message message{nullptr, transfer.size};
    if (TranslateDeviceRange(transfer.buffer, transfer.size, &message.data) != kCudaSuccess) {
      return {kNcclInvalidArgument, "a buffer of " + std::to_string(transfer.size) +
                                        " bytes was freed before its group ran on rank " + std::to_string(comm.rank())};
    }
    if (transfer.peer == comm.rank()) {
      (transfer.send ? self_sends : self_receives)->push_back(message);
      continue;
    }
    Channel& channel = (*channels)[transfer.peer];
    channel.peer = transfer.peer;
    (transfer.send ? channel.out : channel.in).push_back(message);
  }
  return {};
}

Outcome Execute(Communicator& comm, const std::vector<Transfer>& transfers) {
  std::map<int, Channel> channels;
  std::vector<Message> self_sends;
  std::vector<Message> self_receives;
  Outcome outcome = Arrange(comm, transfers, &channels, &self_sends, &self_receives);
  if (outcome.result == kNcclSuccess) outcome = CopyToSelf(comm.rank(), self_sends, self_receives);
  if (outcome.result != kNcclSuccess) return outcome;
  const auto deadline = std::chrono::steady_clock::now() + ConnectTimeout();
  for (auto& entry : channels) {
    std::string error;
    entry.second.fd = comm.Connection(entry.first, deadline, &error);
    if (entry.second.fd < 0) return comm.aborted() ? Outcome{} : Outcome{kNcclRemoteError, error};
  }
  return Progress(comm, channels);
}

}  // namespace

int RunGroup(Communicator& comm, const std::vector<Transfer>& transfers) {
  std::lock_guard<std::mutex> group(comm.group_mutex());
  if (comm.aborted()) return kCudaSuccess;
  const Outcome outcome = Execute(comm, transfers);
  if (outcome.result == kNcclSuccess || comm.aborted()) return kCudaSuccess;
  comm.Fail(outcome.result, outcome.message);
  return kCudaErrorLaunchFailure;
}

}  // namespace simgpu
