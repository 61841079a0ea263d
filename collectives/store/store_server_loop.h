// The poll() loop of a server of the TCP store's frames, on one background thread: rank 0's store
// (tcp_store_server.h) and a row's relay (store_relay.h) each run one. It accepts connections as the stranger gate
// allows (store_strangers.h), reads and sends their frames (store_server_connection.h), hands what they say to its
// session, wakes for their deadlines, and closes them.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/store/store_server_connection.h"
#include "collectives/store/store_strangers.h"
#include "common/status.h"
#include "common/unique_fd.h"

struct pollfd;

namespace ckpt::coll::store_server {

// What a loop's connections mean: a FrameHandler, plus what the loop asks of it between reads.
class LoopSession : public FrameHandler {
 public:
  virtual ~LoopSession() = default;
  // Ends what connections waited for past its deadline.
  virtual void ExpireDeadlines(Clock::time_point now) = 0;
  // `c` is closed and about to be destroyed: nothing may keep pointing at it.
  virtual void OnRemoved(Connection& c) = 0;
  // Whether the loop may stop before its grace has passed: every connection that counts has closed.
  virtual bool Drained(const Connections& conns) const = 0;
};

class ServerLoop {
 public:
  using MakeSession = std::function<std::unique_ptr<LoopSession>(Connections& conns, StrangerGate& strangers)>;

  // `listener` is non-blocking; `name` says whose server it is in what connections turned away are told ("the
  // store on rank 0").
  static Result<std::unique_ptr<ServerLoop>> Create(UniqueFd listener, std::string name,
                                                    const MakeSession& make_session);
  // Before Run: a connection the loop serves from the start (a relay's own connection to rank 0).
  void Adopt(std::unique_ptr<Connection> c) { conns_.push_back(std::move(c)); }
  // Serves until stopped; closes every connection as it returns.
  void Run();
  // From any thread: stop once the session is drained or `grace` has passed, whichever comes first.
  void RequestStop(std::chrono::milliseconds grace);

 private:
  ServerLoop(UniqueFd listener, UniqueFd wake_read, UniqueFd wake_write, std::string name);
  void Serve();
  void BuildPollSet(std::vector<pollfd>* fds, Clock::time_point now);
  int PollTimeoutMs(Clock::time_point now) const;
  void HandleEvents(const std::vector<pollfd>& fds);
  void DrainWakePipe();
  void AcceptAll();
  bool MakeRoomFor(const std::string& source);
  void SweepHungUp();
  void RemoveClosed();
  Clock::time_point StopDeadline() const;

  UniqueFd listener_;
  UniqueFd wake_read_;
  UniqueFd wake_write_;
  const std::string busy_prefix_;
  Connections conns_;
  std::vector<Connection*> polled_;  // the connections of the poll set's slots from 2 on
  StrangerGate strangers_;
  std::unique_ptr<LoopSession> session_;  // holds conns_ and strangers_
  std::atomic<bool> stop_requested_{false};
  std::atomic<Clock::rep> stop_deadline_ticks_{0};
};

}  // namespace ckpt::coll::store_server
