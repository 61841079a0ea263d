// A held flock(2) claim (claimed_directory.h, claimed_file.h), let go of explicitly when released.
//
// The lock belongs to the open file description, not to the descriptor. A process spawned by another thread of ours
// shares every description until its exec closes the copies, so a plain close() in that instant would leave the
// claim held by the child: a manager dropped while another thread spawned a process was seen to refuse the next
// manager on its root. Unlocking first releases the claim for every copy at once.
#pragma once

#include "common/unique_fd.h"

namespace ckpt::io {

class Claim {
 public:
  Claim() = default;  // no claim: the file system cannot lock, or nothing was claimed
  explicit Claim(UniqueFd locked) : fd_(std::move(locked)) {}
  Claim(Claim&&) noexcept = default;
  Claim& operator=(Claim&& other) noexcept;
  Claim(const Claim&) = delete;
  Claim& operator=(const Claim&) = delete;
  ~Claim() { Reset(); }

  bool valid() const { return fd_.valid(); }
  int get() const { return fd_.get(); }
  // Unlocks, then closes; another process may claim the path from here on.
  void Reset();

 private:
  UniqueFd fd_;
};

}  // namespace ckpt::io
