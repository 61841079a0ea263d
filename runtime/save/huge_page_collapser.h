// Collapses the buffers of copy-on-write saves (runtime/save/write_fault_handler.h) into transparent huge pages once
// a save staged them, on a thread of its own at the lowest priority, pausing while the next save protects. Write-
// protecting 4 KiB pages walks every page table entry within ckpt_save's call, 18-20 ms per GiB here (a third of a
// memcpy of the state in bench/run's RAM disk run), huge pages 0.06 ms. The collapse (madvise MADV_COLLAPSE) copies
// the pages once, in the background (1.8 s per GiB on one core here), and changes nothing the trainer can see but its
// TLB misses.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace ckpt::runtime {

class HugePageCollapser {
 public:
  // Null where the administrator disabled transparent huge pages ("never"), which MADV_COLLAPSE would ignore.
  static std::unique_ptr<HugePageCollapser> Start();
  // Stops after the huge page being collapsed, if any.
  ~HugePageCollapser();
  HugePageCollapser(const HugePageCollapser&) = delete;
  HugePageCollapser& operator=(const HugePageCollapser&) = delete;

  // A save is about to protect its buffers: no collapse until Resume, since one takes the mmap lock for writing,
  // which the protection and the stager's reads would wait for.
  void Pause();
  // The save staged: its protected ranges, as (begin, length), are queued, and collapsing resumes.
  void Resume(const std::vector<std::pair<uintptr_t, uint64_t>>& ranges);

 private:
  HugePageCollapser() = default;
  void Run();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::pair<uintptr_t, uintptr_t>> queued_;  // (begin, end) still to collapse
  bool paused_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ckpt::runtime
