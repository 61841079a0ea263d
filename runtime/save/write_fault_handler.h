// The fault handler of a context's copy-on-write saves (CKPT_SAVE_COPY_ON_WRITE): one userfaultfd and one thread,
// started at the first such save and kept with the rank's saves (runtime/save/rank_saves.h). The thread answers the
// write faults on the buffers of the save staging in the background (runtime/save/cow_snapshot.h), and applies the
// events that unmap, release or move them. One save stages at a time (a save waits for the previous one's staging),
// so one snapshot is active at a time.
//
// Once a save staged, its buffers go to a HugePageCollapser (runtime/save/huge_page_collapser.h), so that the next
// saves' protection walks huge pages instead of 4 KiB ones.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <thread>

#include "common/status.h"
#include "common/unique_fd.h"
#include "runtime/save/cow_snapshot.h"
#include "runtime/save/huge_page_collapser.h"
#include "runtime/save/user_fault_fd.h"

namespace ckpt::runtime {

class WriteFaultHandler {
 public:
  // Unsupported (naming why) where userfaultfd or a feature it needs is refused.
  static Result<std::unique_ptr<WriteFaultHandler>> Start();
  // Stops the thread; no snapshot may be active.
  ~WriteFaultHandler();
  WriteFaultHandler(const WriteFaultHandler&) = delete;
  WriteFaultHandler& operator=(const WriteFaultHandler&) = delete;

  // The write-protected snapshot of `spans` (cow::Snapshot::Take), whose faults and events this handler answers
  // from now until Deactivate.
  std::shared_ptr<cow::Snapshot> Protect(const std::vector<cow::SpanRequest>& spans, std::string* fallback_note);
  // The snapshot's save staged (or failed): its protection is lifted, its faults and events no longer come here,
  // and its buffers go to the collapser.
  void Deactivate(cow::Snapshot& snapshot);

 private:
  WriteFaultHandler(UserFaultFd uffd, UniqueFd stop) : uffd_(std::move(uffd)), stop_(std::move(stop)) {}
  void Run();
  // Reads and answers what is queued; false when the descriptor failed.
  bool Drain();

  UserFaultFd uffd_;
  UniqueFd stop_;  // an eventfd that ends Run
  // Held while the thread reads messages and applies their events, so that the stager, which takes it before
  // releasing a stripe, sees every event the kernel considered delivered (cow::Snapshot::Release).
  std::mutex events_mutex_;
  std::shared_ptr<cow::Snapshot> active_;  // read and written with std::atomic_load / atomic_store
  // Set while Protect takes a snapshot, whose faults the thread then waits to answer instead of taking them for a
  // stranger's (an address of no active snapshot, whose protection it lifts).
  std::atomic<bool> activating_{false};
  std::thread thread_;
  std::unique_ptr<HugePageCollapser> collapser_;  // null where huge pages are disabled
};

}  // namespace ckpt::runtime
