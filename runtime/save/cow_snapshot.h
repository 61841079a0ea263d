// The state of one copy-on-write save's buffers (CKPT_SAVE_COPY_ON_WRITE) while it stages in the background: each
// unit's span in its buffer (first to last byte it reads), whose whole pages are write-protected in stripes and whose
// partial pages at both ends were copied at the call, so that no page holding anything but the buffer's bytes (an
// allocator's headers) is ever protected. A stripe the trainer writes first is copied by the fault handler
// (runtime/save/write_fault_handler.h) before its write goes on; the stager reads each stripe from that copy or from
// the protected memory, and lifts its protection once it has read every byte units need from it. Every byte read is
// the value at the call, or the read fails naming the tensor whose buffer was unmapped, released or moved.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/save/user_fault_fd.h"

namespace ckpt::runtime::cow {

// One unit's span and the runs of it that the unit reads (the whole span for plain bytes).
struct SpanRequest {
  std::string name;  // the tensor's or object's key, for messages
  uintptr_t begin = 0;
  uintptr_t end = 0;
  std::function<void(const std::function<void(uintptr_t begin, uint64_t length)>&)> for_each_run;
};

class Snapshot {
 public:
  // Takes the spans' snapshot at the call: copies their partial end pages, registers and write-protects their whole
  // pages. A span whose pages the kernel refuses to protect (a file-backed mapping) is copied whole instead, named in
  // *fallback_note. `events_mutex` is the handler's, held while it reads and applies events (see Read).
  static std::shared_ptr<Snapshot> Take(const UserFaultFd& uffd, std::mutex& events_mutex,
                                        const std::vector<SpanRequest>& spans, std::string* fallback_note);
  ~Snapshot();
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;

  // Copies `length` bytes at `src`, inside span `span`'s runs, to `dst`, as they were at the call; each byte of a
  // run is to be read once, and a stripe's protection is lifted after its last.
  Status Read(size_t span, const char* src, uint64_t length, char* dst);
  // Lifts every protection left and unregisters the buffers: the save staged everything, or failed.
  void Finish();
  // The ranges it registered (and protected), as (begin, length).
  const std::vector<std::pair<uintptr_t, uint64_t>>& registered() const { return registered_; }

  // The fault handler's calls; they allocate nothing (see UserFaultFd). A write fault at `address`: copies the
  // stripe there unless the stager released it, lifts its protection, wakes the writer. False where no stripe of
  // this save holds it.
  bool OnWriteFault(uintptr_t address);
  // Events, applied under the events mutex: [begin, end) was unmapped, released by madvise or moved away.
  enum class Loss : uint8_t { kNone, kUnmapped, kReleased, kMoved, kUnreadable };
  void OnLoss(uintptr_t begin, uintptr_t end, Loss loss);

 private:
  // Whole protected pages, released together.
  struct Stripe {
    uintptr_t begin = 0;
    uintptr_t end = 0;
    std::mutex mutex;               // taken by the stager and the fault handler, never while holding events_mutex_
    std::atomic<uint8_t> state{0};  // StripeState (cow_snapshot.cc)
    std::atomic<Loss> loss{Loss::kNone};
    char* preserved = nullptr;  // the handler's copy, mapped apart from any heap
    uint64_t remaining = 0;     // bytes units still read from it; guarded by mutex
  };
  struct Span {
    std::string name;
    uintptr_t begin = 0;
    uintptr_t end = 0;
    // [begin, head_end) is read from head and [tail_begin, end) from tail, both copied at the call; the pages
    // between from the stripes.
    uintptr_t head_end = 0;
    uintptr_t tail_begin = 0;
    std::unique_ptr<char[]> head;
    std::unique_ptr<char[]> tail;
  };
  Snapshot(const UserFaultFd& uffd, std::mutex& events_mutex) : uffd_(uffd), events_mutex_(events_mutex) {}
  // The stripe holding `address`, or null.
  Stripe* Find(uintptr_t address);
  Status ReadStripe(const Span& span, Stripe& stripe, uintptr_t src, uint64_t length, char* dst);
  // Lifts the protection of a stripe whose every byte was read, under its lock, which it lets go while it waits.
  Status Release(const Span& span, Stripe& stripe, std::unique_lock<std::mutex>& lock);

  const UserFaultFd& uffd_;
  std::mutex& events_mutex_;
  std::vector<Span> spans_;
  std::vector<std::pair<uintptr_t, uint64_t>> registered_;  // ranges, unregistered by Finish
  std::unique_ptr<Stripe[]> stripes_;
  size_t stripe_count_ = 0;
  bool finished_ = false;
};

}  // namespace ckpt::runtime::cow
