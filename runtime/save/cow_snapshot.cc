#include "runtime/save/cow_snapshot.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/fault_injection.h"
#include "common/os_error.h"
#include "common/usable_cores.h"

namespace ckpt::runtime::cow {
namespace {

constexpr uintptr_t kPage = 4096;
// Protected pages are released, and copied by the fault handler, by stripes of this size: a trainer writing every
// page right after the call stops once per stripe (a 2 MiB copy, about 0.2 ms) rather than once per page, and a
// stripe's copy is freed as soon as the stager has read it.
constexpr uintptr_t kStripeBytes = 2u << 20;
// Protection goes over at most this many threads once this many bytes took longer than kSlowProbe (huge pages take
// about 6 microseconds, 4 KiB pages 1.2 ms).
constexpr uint64_t kParallelProtectBytes = 64u << 20;
constexpr size_t kMaxProtectThreads = 8;
constexpr std::chrono::microseconds kSlowProbe{200};
// How long the stager retries lifting a stripe's protection while the kernel refuses it (EAGAIN) for an event the
// handler has not read yet, and how long it waits between tries; the handler reads events within microseconds.
constexpr std::chrono::seconds kUnprotectPatience{10};
constexpr std::chrono::microseconds kUnprotectRetryPause{100};

uintptr_t AlignDown(uintptr_t value, uintptr_t alignment) { return value / alignment * alignment; }
uintptr_t AlignUp(uintptr_t value, uintptr_t alignment) { return AlignDown(value + alignment - 1, alignment); }

enum StripeState : uint8_t { kProtected, kUnprotected, kReleased };

// The bytes [begin, end) of a buffer as they are now, read by the calling thread, which owns them during the call.
std::unique_ptr<char[]> CopyOf(uintptr_t begin, uintptr_t end) {
  if (end <= begin) return nullptr;
  std::unique_ptr<char[]> copy(new char[end - begin]);
  std::memcpy(copy.get(), reinterpret_cast<const char*>(begin), end - begin);
  return copy;
}

Status LossError(const std::string& name, Snapshot::Loss loss) {
  const char* what = "was unmapped";
  if (loss == Snapshot::Loss::kReleased) what = "was released by madvise";
  if (loss == Snapshot::Loss::kMoved) what = "was moved (mremap)";
  if (loss == Snapshot::Loss::kUnreadable) what = "could not be copied (no memory for the copy)";
  return InvalidArgument("'" + name + "': its buffer " + what +
                         " during a copy-on-write save, before ckpt had copied it; keep the buffers of a save "
                         "(CKPT_SAVE_COPY_ON_WRITE) mapped until its request finishes");
}

// Write-protects the ranges. The kernel walks every page table entry, all of it within ckpt_save's call: about 20 ms
// per GiB of 4 KiB pages on one core, 0.1 ms of transparent huge pages. It takes the mmap lock for reading only, so
// threads proceed side by side (1 GiB of 4 KiB pages: 33 ms on one thread, 20 on two, 14 on four, on a 2-core VM);
// but starting threads costs more than huge pages take (on a loaded machine, milliseconds). So the first
// kParallelProtectBytes go on this thread, timed, and the rest is split over threads only where they were slow.
// Returns each range's errno, 0 where protected.
std::vector<int> ProtectInParallel(const UserFaultFd& uffd,
                                   const std::vector<std::pair<uintptr_t, uintptr_t>>& ranges) {
  struct Piece {
    size_t range;
    uintptr_t begin;
    uint64_t length;
  };
  // The ranges cut into `parts` runs, the first of `first` bytes and the others of about equal bytes.
  auto cut = [&](uint64_t first, size_t parts, uint64_t total) {
    std::vector<std::vector<Piece>> out(parts);
    const uint64_t share = parts > 1 ? AlignUp((total - std::min(total, first) + parts - 2) / (parts - 1), kPage) : 0;
    size_t part = 0;
    uint64_t room = parts > 1 ? first : total;
    for (size_t i = 0; i < ranges.size(); ++i) {
      for (uintptr_t at = ranges[i].first; at < ranges[i].second;) {
        const uint64_t take = std::min<uint64_t>(ranges[i].second - at, room);
        if (take > 0) out[part].push_back(Piece{i, at, take});
        at += take, room -= take;
        if (room == 0) part + 1 < parts ? (++part, room = share) : room = UINT64_MAX;
      }
    }
    return out;
  };
  uint64_t total = 0;
  for (const auto& [b, e] : ranges) total += e - b;
  std::unique_ptr<std::atomic<int>[]> errors(new std::atomic<int>[ranges.size()]);
  for (size_t i = 0; i < ranges.size(); ++i) errors[i] = 0;
  auto protect = [&](const std::vector<Piece>& pieces) {
    for (const Piece& p : pieces) {
      const int error = uffd.Protect(p.begin, p.length, true);
      if (error != 0) errors[p.range] = error;
    }
  };
  const size_t cores = std::clamp<size_t>(UsableCores(), 1, kMaxProtectThreads);
  const std::vector<std::vector<Piece>> probe = cut(kParallelProtectBytes, cores + 1, total);
  const auto started = std::chrono::steady_clock::now();
  protect(probe[0]);
  const bool slow = std::chrono::steady_clock::now() - started > kSlowProbe;
  if (slow) {
    std::vector<std::thread> helpers;
    for (size_t t = 2; t < probe.size(); ++t) helpers.emplace_back(protect, std::cref(probe[t]));
    protect(probe[1]);
    for (std::thread& h : helpers) h.join();
  } else {
    for (size_t t = 1; t < probe.size(); ++t) protect(probe[t]);
  }
  std::vector<int> out(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) out[i] = errors[i];
  return out;
}

}  // namespace

std::shared_ptr<Snapshot> Snapshot::Take(const UserFaultFd& uffd, std::mutex& events_mutex,
                                         const std::vector<SpanRequest>& requests, std::string* fallback_note) {
  std::shared_ptr<Snapshot> snapshot(new Snapshot(uffd, events_mutex));
  // The whole pages of every span, merged where spans share pages.
  std::vector<std::pair<uintptr_t, uintptr_t>> interiors;
  for (const SpanRequest& r : requests) {
    const uintptr_t b = AlignUp(r.begin, kPage), e = AlignDown(r.end, kPage);
    if (b < e) interiors.emplace_back(b, e);
  }
  std::sort(interiors.begin(), interiors.end());
  std::vector<std::pair<uintptr_t, uintptr_t>> merged;
  for (const auto& range : interiors) {
    if (!merged.empty() && range.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, range.second);
    } else {
      merged.push_back(range);
    }
  }
  std::vector<std::pair<uintptr_t, uintptr_t>> refused, registered, protected_ranges;
  for (const auto& [b, e] : merged) {
    const Status status = uffd.Register(b, e - b);
    if (status.ok()) {
      registered.emplace_back(b, e);
    } else {
      refused.emplace_back(b, e);
      if (fallback_note->empty()) *fallback_note = status.message();
    }
  }
  const std::vector<int> errors = ProtectInParallel(uffd, registered);
  for (size_t i = 0; i < registered.size(); ++i) {
    const auto [b, e] = registered[i];
    if (errors[i] == 0) {
      snapshot->registered_.emplace_back(b, e - b);
      protected_ranges.emplace_back(b, e);
      continue;
    }
    (void)uffd.Protect(b, e - b, false);
    (void)uffd.Unregister(b, e - b);
    refused.emplace_back(b, e);
    if (fallback_note->empty()) *fallback_note = OsError("cannot write-protect the buffer", errors[i]).message();
  }
  // Each span: its ends copied now, or all of it where its pages could not be protected.
  for (const SpanRequest& r : requests) {
    Span span;
    span.name = r.name;
    span.begin = r.begin;
    span.end = r.end;
    span.head_end = std::clamp(AlignUp(r.begin, kPage), r.begin, r.end);
    span.tail_begin = std::max(span.head_end, AlignDown(r.end, kPage));
    const bool is_refused = std::any_of(refused.begin(), refused.end(), [&](const auto& range) {
      return span.head_end >= range.first && span.head_end < range.second;
    });
    if (is_refused || span.head_end == span.tail_begin) span.head_end = span.tail_begin = r.end;
    span.head = CopyOf(span.begin, span.head_end);
    span.tail = CopyOf(span.tail_begin, span.end);
    snapshot->spans_.push_back(std::move(span));
  }
  // The protected ranges cut into stripes at stripe-aligned addresses, each counting the bytes units read from it.
  std::vector<std::pair<uintptr_t, uintptr_t>> cuts;
  for (const auto& [b, e] : protected_ranges) {
    for (uintptr_t at = b; at < e;) {
      const uintptr_t next = std::min(e, AlignDown(at, kStripeBytes) + kStripeBytes);
      cuts.emplace_back(at, next);
      at = next;
    }
  }
  snapshot->stripe_count_ = cuts.size();
  snapshot->stripes_.reset(new Stripe[cuts.size()]);
  for (size_t i = 0; i < cuts.size(); ++i) {
    snapshot->stripes_[i].begin = cuts[i].first;
    snapshot->stripes_[i].end = cuts[i].second;
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    const Span& span = snapshot->spans_[i];
    if (span.head_end == span.tail_begin) continue;
    requests[i].for_each_run([&](uintptr_t begin, uint64_t length) {
      uintptr_t at = std::max(begin, span.head_end);
      const uintptr_t end = std::min<uintptr_t>(begin + length, span.tail_begin);
      while (at < end) {
        Stripe* stripe = snapshot->Find(at);
        const uintptr_t upto = std::min(end, stripe->end);
        stripe->remaining += upto - at;
        at = upto;
      }
    });
  }
  // Pages no unit reads (between the runs of a box, or of two units) need no protection.
  for (size_t i = 0; i < snapshot->stripe_count_; ++i) {
    Stripe& stripe = snapshot->stripes_[i];
    if (stripe.remaining != 0) continue;
    (void)uffd.Protect(stripe.begin, stripe.end - stripe.begin, false);
    stripe.state = kReleased;
  }
  return snapshot;
}

Snapshot::~Snapshot() { Finish(); }

Snapshot::Stripe* Snapshot::Find(uintptr_t address) {
  Stripe* const first = stripes_.get();
  Stripe* const last = first + stripe_count_;
  Stripe* it = std::upper_bound(first, last, address, [](uintptr_t a, const Stripe& s) { return a < s.begin; });
  if (it == first) return nullptr;
  --it;
  return address < it->end ? it : nullptr;
}

Status Snapshot::Read(size_t index, const char* src, uint64_t length, char* dst) {
  const Span& span = spans_[index];
  uintptr_t at = reinterpret_cast<uintptr_t>(src);
  while (length > 0) {
    uint64_t n = 0;
    if (at < span.head_end) {
      n = std::min<uint64_t>(length, span.head_end - at);
      std::memcpy(dst, span.head.get() + (at - span.begin), n);
    } else if (at >= span.tail_begin) {
      n = std::min<uint64_t>(length, span.end - at);
      std::memcpy(dst, span.tail.get() + (at - span.tail_begin), n);
    } else {
      Stripe* stripe = Find(at);
      n = std::min<uint64_t>({length, stripe->end - at, span.tail_begin - at});
      RETURN_IF_ERROR(ReadStripe(span, *stripe, at, n, dst));
    }
    at += n, dst += n, length -= n;
  }
  return Status::Ok();
}

Status Snapshot::ReadStripe(const Span& span, Stripe& stripe, uintptr_t src, uint64_t length, char* dst) {
  std::unique_lock<std::mutex> lock(stripe.mutex);
  if (stripe.state == kUnprotected) {
    if (stripe.preserved == nullptr) return LossError(span.name, stripe.loss);
    std::memcpy(dst, stripe.preserved + (src - stripe.begin), length);
  } else if (ReadOwnMemory(dst, reinterpret_cast<const char*>(src), length) != 0) {
    const Loss loss = stripe.loss;
    return LossError(span.name, loss == Loss::kNone ? Loss::kUnmapped : loss);
  }
  stripe.remaining -= std::min(stripe.remaining, length);
  return stripe.remaining == 0 ? Release(span, stripe, lock) : Status::Ok();
}

// Under the stripe's lock, once every byte of it was read. A loss applied before this point may have come before
// the reads from live memory (a madvise zaps the pages once the handler has read its event, an unmap before): the
// save fails. One applied after it came after every read, which then held the values at the call.
Status Snapshot::Release(const Span& span, Stripe& stripe, std::unique_lock<std::mutex>& lock) {
  const auto deadline = std::chrono::steady_clock::now() + kUnprotectPatience;
  for (uint64_t attempt = 0;; ++attempt) {
    Loss loss;
    {
      std::lock_guard<std::mutex> events(events_mutex_);
      loss = stripe.loss;
    }
    if (loss != Loss::kNone) return LossError(span.name, loss);
    if (stripe.state != kProtected) break;
    const int error =
        fault::RefuseUnprotect(attempt) ? EAGAIN : uffd_.Protect(stripe.begin, stripe.end - stripe.begin, false);
    if (error == 0) break;
    // ENOENT: the range is no longer the one registered (unmapped, and maybe mapped anew), so what was read from it
    // may not be the buffer's.
    if (error == ENOENT) return LossError(span.name, Loss::kUnmapped);
    if (error != EAGAIN || std::chrono::steady_clock::now() > deadline) {
      return OsError("'" + span.name + "': cannot lift the buffer's write protection", error);
    }
    // EAGAIN: the kernel changes no protection while an event (a madvise, unmap, mremap or fork) waits unread. The
    // handler reads it, but may first wait for this stripe's lock on a write fault read before the event: the lock
    // is let go while it does. The stripe is then protected still, or copied by the handler; a loss the event
    // brings is seen above.
    lock.unlock();
    { std::lock_guard<std::mutex> events(events_mutex_); }
    std::this_thread::sleep_for(kUnprotectRetryPause);
    lock.lock();
  }
  stripe.state = kReleased;
  if (stripe.preserved != nullptr) munmap(stripe.preserved, stripe.end - stripe.begin);
  stripe.preserved = nullptr;
  return Status::Ok();
}

void Snapshot::Finish() {
  if (finished_) return;
  finished_ = true;
  for (size_t i = 0; i < stripe_count_; ++i) {
    Stripe& stripe = stripes_[i];
    std::lock_guard<std::mutex> lock(stripe.mutex);
    if (stripe.state == kProtected) (void)uffd_.Protect(stripe.begin, stripe.end - stripe.begin, false);
    stripe.state = kReleased;
    if (stripe.preserved != nullptr) munmap(stripe.preserved, stripe.end - stripe.begin);
    stripe.preserved = nullptr;
  }
  // A range unmapped meanwhile is no longer registered: nothing to undo there.
  for (const auto& [begin, length] : registered_) (void)uffd_.Unregister(begin, length);
}

bool Snapshot::OnWriteFault(uintptr_t address) {
  Stripe* stripe = Find(address);
  if (stripe == nullptr) return false;
  std::lock_guard<std::mutex> lock(stripe->mutex);
  const uint64_t length = stripe->end - stripe->begin;
  if (stripe->state != kProtected) {
    // Its protection was lifted, or lifting it was refused (EAGAIN while an event waited unread): the page is
    // unprotected now, else the writer is woken to fault again and come back here.
    const uintptr_t page = AlignDown(address, kPage);
    if (uffd_.Protect(page, kPage, false) != 0) (void)uffd_.Wake(page, kPage);
    return true;
  }
  if (stripe->loss == Loss::kNone) {
    void* copy = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED) {
      stripe->loss = Loss::kUnreadable;
    } else if (ReadOwnMemory(static_cast<char*>(copy), reinterpret_cast<const char*>(stripe->begin), length) != 0) {
      munmap(copy, length);
      stripe->loss = Loss::kUnmapped;
    } else {
      stripe->preserved = static_cast<char*>(copy);
    }
  }
  stripe->state = kUnprotected;
  if (uffd_.Protect(stripe->begin, length, false) != 0) (void)uffd_.Wake(AlignDown(address, kPage), kPage);
  return true;
}

void Snapshot::OnLoss(uintptr_t begin, uintptr_t end, Loss loss) {
  for (size_t i = 0; i < stripe_count_; ++i) {
    Stripe& stripe = stripes_[i];
    if (stripe.end <= begin || stripe.begin >= end) continue;
    const uint8_t state = stripe.state;
    if (state == kReleased) continue;
    // A madvise zaps the pages only after the handler read its event: a copy the handler made before holds the
    // values at the call. An unmap or a move happens before its event is read, and a copy may have read whatever
    // another thread mapped there meanwhile.
    // (Unprotected with no loss: the handler, this thread, made a copy.)
    if (loss == Loss::kReleased && state == kUnprotected && stripe.loss == Loss::kNone) continue;
    stripe.loss = loss;
  }
}

}  // namespace ckpt::runtime::cow
