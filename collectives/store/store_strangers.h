// Who may hold a listening server's slots for strangers (connections that have not yet proven they know the job's
// secret) and for how long; the TCP store's server and the peer inboxes share it. Ranks cannot be told from
// strangers before they answer their challenge, but they answer within milliseconds, so a flood of connections is
// kept from crowding them out by time, never by closing the newest arrival's elders at random:
//  - a stranger is closed for pressure only once it has had kFairChance to answer, so a rank's connection, which
//    answers sooner, is never the one closed;
//  - one source address holds at most kMaxStrangersPerSource slots: its next connection takes the place of its own
//    oldest stranger past its fair chance, or is turned away with a kBusy frame (its client tries again), so that
//    a flood from one host never delays ranks connecting from others;
//  - when every slot holds a stranger still within its fair chance, the server stops accepting: later connections
//    wait in the kernel's listen queue, first come first served, until a slot can be given;
//  - accept() failing for want of descriptors closes the gate for kAcceptBackoff instead of spinning on it.
// A stranger that never answers goes at its hello timeout (kStrangerHelloTimeout), kept by each server.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.h"

namespace ckpt::coll {

inline constexpr size_t kMaxStrangers = 256;
inline constexpr size_t kMaxStrangersPerSource = kMaxStrangers / 2;
inline constexpr std::chrono::milliseconds kFairChance{1000};
inline constexpr std::chrono::milliseconds kStrangerHelloTimeout{10000};
inline constexpr std::chrono::milliseconds kAcceptBackoff{100};

class StrangerGate {
 public:
  using Clock = std::chrono::steady_clock;
  using Id = uint64_t;

  struct Arrival {
    UniqueFd fd;
    std::string source;  // the peer's address without its port: what a flood from one host shares
  };

  // Whether the listener is worth polling at `now`: there is a free slot or one that can be given, and accept()
  // is not backing off.
  bool Open(Clock::time_point now) const;
  // When a closed gate opens again without any stranger leaving (nullopt: only a stranger leaving opens it).
  std::optional<Clock::time_point> ReopensAt(Clock::time_point now) const;

  // The next connection waiting on `listener` (non-blocking), if the gate is open; nullopt when none waits, the
  // gate is closed, or descriptors ran out (the gate then stays closed for kAcceptBackoff).
  std::optional<Arrival> Accept(int listener, Clock::time_point now);

  // Whether one more stranger from `source` fits without closing another.
  bool HasRoomFor(const std::string& source) const;
  // The stranger to close so that one from `source` fits: the oldest past its fair chance, of `source` when that
  // source holds its share; nullopt when none may be closed (then the newcomer is turned away).
  std::optional<Id> VictimFor(const std::string& source, Clock::time_point now) const;

  // Closes strangers past their fair chance, oldest first, until one more from `source` fits: `close(id)` closes
  // the connection of the stranger `id` (or finds that it has just proven itself), and the gate forgets it. False
  // when none may go: the newcomer is then turned away.
  template <typename Close>
  bool MakeRoomFor(const std::string& source, Clock::time_point now, Close&& close) {
    while (!HasRoomFor(source)) {
      const std::optional<Id> victim = VictimFor(source, now);
      if (!victim) return false;
      close(*victim);
      Forget(*victim);
    }
    return true;
  }

  // Takes a slot for a stranger from `source`; its id, to forget it by.
  Id Admit(std::string source, Clock::time_point now);
  // The stranger proved itself or closed: its slot is free. Forgetting twice is harmless.
  void Forget(Id id);

 private:
  struct Stranger {
    Id id;
    std::string source;
    Clock::time_point arrived;
  };

  size_t CountFrom(const std::string& source) const;

  std::vector<Stranger> strangers_;  // oldest first
  Id next_id_ = 1;
  Clock::time_point backoff_until_{};
};

// Tells a connection the server will not serve (a kBusy frame with `why`), best effort: it is closed next.
void TurnAway(int fd, const std::string& why);

// The text of a kBusy frame for a stranger from `source`.
std::string BusyReason(const std::string& source);

}  // namespace ckpt::coll
