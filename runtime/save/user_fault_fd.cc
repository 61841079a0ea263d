#include "runtime/save/user_fault_fd.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>

#include "common/fault_injection.h"
#include "common/os_error.h"

namespace ckpt::runtime {
namespace {

// Older headers (linux-libc-dev before 6.4) lack these; the kernel's values are fixed by its ABI.
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
constexpr uint64_t kFeatureWpUnpopulated = 1ull << 13;  // UFFD_FEATURE_WP_UNPOPULATED
#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif

// Without WP_UNPOPULATED a page never touched (or swapped out) is not protected, and its first write would go
// unseen; without the events a buffer unmapped or released during a save would be read as whatever replaced it.
constexpr uint64_t kNeededFeatures = UFFD_FEATURE_PAGEFAULT_FLAG_WP | kFeatureWpUnpopulated | UFFD_FEATURE_EVENT_UNMAP |
                                     UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;

// The descriptor, however this process may get one: the syscall; without the privilege it asks for
// (vm.unprivileged_userfaultfd=0), the syscall for faults in user mode only, which ours all are; then the device.
Result<UniqueFd> OpenDescriptor() {
  const int flags = O_CLOEXEC | O_NONBLOCK;
  int fd = static_cast<int>(syscall(SYS_userfaultfd, flags));
  if (fd < 0 && errno == EPERM) fd = static_cast<int>(syscall(SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY));
  if (fd >= 0) return UniqueFd(fd);
  const int syscall_error = errno;
  UniqueFd device(open("/dev/userfaultfd", O_RDWR | O_CLOEXEC));
  if (device.valid()) {
    fd = ioctl(device.get(), USERFAULTFD_IOC_NEW, flags);
    if (fd >= 0) return UniqueFd(fd);
  }
  return Unsupported("userfaultfd is refused (" + OsErrorText(syscall_error) +
                     "; /dev/userfaultfd: " + OsErrorText(errno) + ")");
}

int RangeIoctl(int fd, unsigned long request, void* argument) { return ioctl(fd, request, argument) == 0 ? 0 : errno; }

Status RangeStatus(int error, const char* what) { return error == 0 ? Status::Ok() : OsError(what, error); }

}  // namespace

Result<UserFaultFd> UserFaultFd::Open() {
  if (fault::NoUserFaultFd()) return Unsupported("userfaultfd is refused (by a test's fault injection)");
  ASSIGN_OR_RETURN(UniqueFd fd, OpenDescriptor());
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = kNeededFeatures;
  if (ioctl(fd.get(), UFFDIO_API, &api) != 0) {
    return Unsupported("the kernel lacks userfaultfd's write-protect features (" + OsErrorText(errno) + ")");
  }
  if ((api.features & kNeededFeatures) != kNeededFeatures) {
    return Unsupported("the kernel lacks userfaultfd's write-protect features");
  }
  return UserFaultFd(std::move(fd));
}

Status UserFaultFd::Register(uintptr_t begin, uint64_t length) const {
  uffdio_register reg{};
  reg.range = {begin, length};
  reg.mode = UFFDIO_REGISTER_MODE_WP;
  return RangeStatus(RangeIoctl(fd(), UFFDIO_REGISTER, &reg), "cannot register the buffer with userfaultfd");
}

Status UserFaultFd::Unregister(uintptr_t begin, uint64_t length) const {
  uffdio_range range{begin, length};
  return RangeStatus(RangeIoctl(fd(), UFFDIO_UNREGISTER, &range), "cannot unregister the buffer from userfaultfd");
}

int UserFaultFd::Protect(uintptr_t begin, uint64_t length, bool write_protected) const {
  uffdio_writeprotect wp{};
  wp.range = {begin, length};
  wp.mode = write_protected ? UFFDIO_WRITEPROTECT_MODE_WP : 0;
  return RangeIoctl(fd(), UFFDIO_WRITEPROTECT, &wp);
}

int UserFaultFd::Wake(uintptr_t begin, uint64_t length) const {
  uffdio_range range{begin, length};
  return RangeIoctl(fd(), UFFDIO_WAKE, &range);
}

int ReadOwnMemory(char* dst, const char* src, uint64_t length) {
  static const pid_t self = getpid();
  while (length > 0) {
    iovec local{dst, length};
    iovec remote{const_cast<char*>(src), length};
    const ssize_t n = process_vm_readv(self, &local, 1, &remote, 1, 0);
    if (n <= 0) return n == 0 ? EFAULT : errno;
    dst += n, src += n, length -= static_cast<uint64_t>(n);
  }
  return 0;
}

}  // namespace ckpt::runtime
