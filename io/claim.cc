#include "io/claim.h"

#include <sys/file.h>

namespace ckpt::io {

Claim& Claim::operator=(Claim&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = std::move(other.fd_);
  }
  return *this;
}

void Claim::Reset() {
  // Nothing is left to do if the unlock fails (it cannot, on a descriptor we locked): the close releases our copy.
  if (fd_.valid()) (void)flock(fd_.get(), LOCK_UN);
  fd_.Reset();
}

}  // namespace ckpt::io
