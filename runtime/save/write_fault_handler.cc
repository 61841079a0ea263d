#include "runtime/save/write_fault_handler.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "common/os_error.h"

namespace ckpt::runtime {
namespace {

constexpr uintptr_t kPage = 4096;
constexpr size_t kBatch = 64;  // messages read at once

// A write fault on an address of no active snapshot (a save that finished, or a range it did not protect): the
// writer goes on.
void LetWrite(const UserFaultFd& uffd, uintptr_t address) {
  const uintptr_t page = address / kPage * kPage;
  if (uffd.Protect(page, kPage, false) != 0) (void)uffd.Wake(page, kPage);
}

}  // namespace

Result<std::unique_ptr<WriteFaultHandler>> WriteFaultHandler::Start() {
  ASSIGN_OR_RETURN(UserFaultFd uffd, UserFaultFd::Open());
  UniqueFd stop(eventfd(0, EFD_CLOEXEC));
  if (!stop.valid()) return OsError("cannot create the fault handler's eventfd", errno);
  std::unique_ptr<WriteFaultHandler> handler(new WriteFaultHandler(std::move(uffd), std::move(stop)));
  handler->thread_ = std::thread([h = handler.get()] { h->Run(); });
  handler->collapser_ = HugePageCollapser::Start();
  return handler;
}

WriteFaultHandler::~WriteFaultHandler() {
  const uint64_t one = 1;
  (void)!write(stop_.get(), &one, sizeof one);
  thread_.join();
}

std::shared_ptr<cow::Snapshot> WriteFaultHandler::Protect(const std::vector<cow::SpanRequest>& spans,
                                                          std::string* fallback_note) {
  if (collapser_ != nullptr) collapser_->Pause();
  activating_ = true;
  std::shared_ptr<cow::Snapshot> snapshot = cow::Snapshot::Take(uffd_, events_mutex_, spans, fallback_note);
  std::atomic_store(&active_, snapshot);
  activating_ = false;
  return snapshot;
}

void WriteFaultHandler::Deactivate(cow::Snapshot& snapshot) {
  snapshot.Finish();
  std::atomic_store(&active_, std::shared_ptr<cow::Snapshot>());
  if (collapser_ != nullptr) collapser_->Resume(snapshot.registered());
}

void WriteFaultHandler::Run() {
  pollfd fds[2] = {{uffd_.fd(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
  while (true) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if (!Drain()) return;
  }
}

// Allocates nothing: a writer it keeps waiting may hold the allocator's lock.
bool WriteFaultHandler::Drain() {
  uffd_msg messages[kBatch];
  while (true) {
    ssize_t n = 0;
    std::shared_ptr<cow::Snapshot> active;
    {
      std::lock_guard<std::mutex> events(events_mutex_);
      n = read(uffd_.fd(), messages, sizeof messages);
      if (n < 0) return errno == EAGAIN || errno == EINTR;
      active = std::atomic_load(&active_);
      for (ssize_t i = 0; active && i < n / static_cast<ssize_t>(sizeof(uffd_msg)); ++i) {
        const uffd_msg& m = messages[i];
        if (m.event == UFFD_EVENT_UNMAP) {
          active->OnLoss(m.arg.remove.start, m.arg.remove.end, cow::Snapshot::Loss::kUnmapped);
        }
        if (m.event == UFFD_EVENT_REMOVE) {
          active->OnLoss(m.arg.remove.start, m.arg.remove.end, cow::Snapshot::Loss::kReleased);
        }
        if (m.event == UFFD_EVENT_REMAP) {
          active->OnLoss(m.arg.remap.from, m.arg.remap.from + m.arg.remap.len, cow::Snapshot::Loss::kMoved);
        }
      }
    }
    for (ssize_t i = 0; i < n / static_cast<ssize_t>(sizeof(uffd_msg)); ++i) {
      if (messages[i].event != UFFD_EVENT_PAGEFAULT) continue;
      const uintptr_t address = messages[i].arg.pagefault.address;
      if (active && active->OnWriteFault(address)) continue;
      while (activating_) std::this_thread::sleep_for(std::chrono::microseconds(50));
      active = std::atomic_load(&active_);
      if (active && active->OnWriteFault(address)) continue;
      LetWrite(uffd_, address);
    }
  }
}

}  // namespace ckpt::runtime
