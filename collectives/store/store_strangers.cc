#include "collectives/store/store_strangers.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>

#include "collectives/store/tcp_store_wire.h"

namespace ckpt::coll {
namespace {

// The peer's address without its port, printable: "10.0.0.5", "::1".
std::string SourceOf(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = "unknown";
  if (address.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(address).sin_addr, text, sizeof text);
  } else if (address.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(address).sin6_addr, text, sizeof text);
  }
  return text;
}

// accept() errors that say the process or the system is out of something: retrying at once would fail again.
bool OutOfResources(int err) { return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM; }

}  // namespace

bool StrangerGate::Open(Clock::time_point now) const {
  if (now < backoff_until_) return false;
  return strangers_.size() < kMaxStrangers || now >= strangers_.front().arrived + kFairChance;
}

std::optional<StrangerGate::Clock::time_point> StrangerGate::ReopensAt(Clock::time_point now) const {
  if (now < backoff_until_) return backoff_until_;
  if (strangers_.size() < kMaxStrangers) return std::nullopt;
  return strangers_.front().arrived + kFairChance;
}

std::optional<StrangerGate::Arrival> StrangerGate::Accept(int listener, Clock::time_point now) {
  while (Open(now)) {
    sockaddr_storage address = {};
    socklen_t length = sizeof address;
    UniqueFd fd(accept4(listener, reinterpret_cast<sockaddr*>(&address), &length, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (fd.valid()) return Arrival{std::move(fd), SourceOf(address)};
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (OutOfResources(errno)) backoff_until_ = now + kAcceptBackoff;
    return std::nullopt;
  }
  return std::nullopt;
}

bool StrangerGate::HasRoomFor(const std::string& source) const {
  return strangers_.size() < kMaxStrangers && CountFrom(source) < kMaxStrangersPerSource;
}

std::optional<StrangerGate::Id> StrangerGate::VictimFor(const std::string& source, Clock::time_point now) const {
  const bool source_full = CountFrom(source) >= kMaxStrangersPerSource;
  for (const Stranger& s : strangers_) {
    if (now < s.arrived + kFairChance) return std::nullopt;  // the rest are younger still
    if (!source_full || s.source == source) return s.id;
  }
  return std::nullopt;
}

StrangerGate::Id StrangerGate::Admit(std::string source, Clock::time_point now) {
  strangers_.push_back({next_id_, std::move(source), now});
  return next_id_++;
}

void StrangerGate::Forget(Id id) {
  const auto it = std::find_if(strangers_.begin(), strangers_.end(), [id](const Stranger& s) { return s.id == id; });
  if (it != strangers_.end()) strangers_.erase(it);
}

size_t StrangerGate::CountFrom(const std::string& source) const {
  return std::count_if(strangers_.begin(), strangers_.end(), [&](const Stranger& s) { return s.source == source; });
}

void TurnAway(int fd, const std::string& why) {
  const std::string frame = store_wire::EncodeFrame(store_wire::MessageType::kBusy, why);
  (void)!send(fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

std::string BusyReason(const std::string& source) {
  return "too many connections from " + source + " have not yet proven that they belong to the job; try again";
}

}  // namespace ckpt::coll
