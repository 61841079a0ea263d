#include "runtime/save/huge_page_collapser.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace ckpt::runtime {
namespace {

constexpr uintptr_t kHugePage = 2u << 20;
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1; older headers lack it
#endif

// Whether the administrator left transparent huge pages on ("always" or "madvise").
bool HugePagesAllowed() {
  std::ifstream enabled("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  return std::getline(enabled, line) && line.find("[never]") == std::string::npos;
}

}  // namespace

std::unique_ptr<HugePageCollapser> HugePageCollapser::Start() {
  if (!HugePagesAllowed()) return nullptr;
  std::unique_ptr<HugePageCollapser> collapser(new HugePageCollapser());
  collapser->thread_ = std::thread([c = collapser.get()] { c->Run(); });
  return collapser;
}

HugePageCollapser::~HugePageCollapser() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void HugePageCollapser::Pause() {
  std::lock_guard<std::mutex> lock(mutex_);
  paused_ = true;
}

void HugePageCollapser::Resume(const std::vector<std::pair<uintptr_t, uint64_t>>& ranges) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [begin, length] : ranges) queued_.emplace_back(begin, begin + length);
    paused_ = false;
  }
  changed_.notify_all();
}

// Each range's whole huge pages, one at a time, so that a pause or a stop waits for one at most. A range freed or
// reused meanwhile is harmless: a collapse changes no byte of whatever lies there, and fails (ignored) where it
// cannot (unmapped, file-backed, MADV_NOHUGEPAGE, write-protected by a save).
void HugePageCollapser::Run() {
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 19);
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return stopping_ || (!queued_.empty() && !paused_); });
    if (stopping_) return;
    auto& [begin, end] = queued_.back();
    const uintptr_t at = (begin + kHugePage - 1) / kHugePage * kHugePage;
    if (at + kHugePage > end) {
      queued_.pop_back();
      continue;
    }
    begin = at + kHugePage;
    lock.unlock();
    (void)madvise(reinterpret_cast<void*>(at), kHugePage, MADV_COLLAPSE);
    lock.lock();
  }
}

}  // namespace ckpt::runtime
