// A userfaultfd in write-protect mode, as copy-on-write saves use it (runtime/save/copy_on_write.h): opened with the
// features they need, or refused with the reason, and the few ioctls they issue on ranges of this process.
#pragma once

#include <linux/userfaultfd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "common/unique_fd.h"

namespace ckpt::runtime {

class UserFaultFd {
 public:
  // A non-blocking descriptor with write-protect faults for populated and unpopulated anonymous pages, and events
  // for unmaps, madvise removals and moves. Unsupported (naming why) where the kernel refuses it (the sysctl
  // vm.unprivileged_userfaultfd, seccomp, an old kernel, a missing feature) or CKPT_FAULT_NO_USERFAULTFD is set.
  static Result<UserFaultFd> Open();

  int fd() const { return fd_.get(); }

  // Registers [begin, begin + length) (page-aligned) for write-protect faults; fails on a mapping the kernel cannot
  // protect (file-backed, VM_PFNMAP, another userfaultfd's).
  Status Register(uintptr_t begin, uint64_t length) const;
  // Undoes Register; the range's protection goes with it.
  Status Unregister(uintptr_t begin, uint64_t length) const;
  // The two below and ReadOwnMemory return 0 or an errno, and allocate nothing: the fault handler calls them while
  // a writer it keeps waiting may hold the allocator's lock.
  // Write-protects the range, or lifts the protection and wakes the threads that faulted on it. ENOENT where the
  // range is no longer registered (unmapped, or mapped anew).
  int Protect(uintptr_t begin, uint64_t length, bool write_protected) const;
  // Wakes the threads that faulted in the range, once another thread lifted the protection.
  int Wake(uintptr_t begin, uint64_t length) const;

 private:
  explicit UserFaultFd(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

// Reads `length` bytes at `src` of this process into `dst` without touching a mapping that may be gone: a range
// unmapped meanwhile fails (EFAULT) instead of raising SIGSEGV, and no write-protect fault is raised either. Returns
// 0 or an errno.
int ReadOwnMemory(char* dst, const char* src, uint64_t length);

}  // namespace ckpt::runtime
