// workers == 0: the pool's jobs run on threads of this process.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "io/worker_pool_internal.h"

namespace ckpt::io::internal {
namespace {

// Slots of the in-process pool: as many as the default number of worker processes.
constexpr int kInProcessSlots = 2;

// Jobs here are not abandoned on timeout: their thread would keep using arena memory the caller then reuses.
class InProcessPool final : public JobPool {
 public:
  static Result<std::unique_ptr<WorkerPool>> Create(const StagingArena& arena, const WorkerPoolOptions& options) {
    std::unique_ptr<InProcessPool> pool(new InProcessPool(arena.capacity(), options.timeout));
    for (Slot& slot : pool->slots_) {
      ASSIGN_OR_RETURN(slot.executor, FileJobExecutor::Create(arena.data(), arena.capacity(), options.tuning));
    }
    pool->SetBackendName(pool->slots_[0].executor->backend_name());
    for (Slot& slot : pool->slots_) slot.thread = std::thread([self = pool.get(), &slot] { self->Serve(slot); });
    return std::unique_ptr<WorkerPool>(std::move(pool));
  }

  ~InProcessPool() override {
    for (Slot& slot : slots_) {
      std::lock_guard<std::mutex> lock(slot.mutex);
      slot.stopping = true;
      slot.wake.notify_one();
    }
    for (Slot& slot : slots_) {
      if (slot.thread.joinable()) slot.thread.join();
    }
  }

  int size() const override { return kInProcessSlots; }
  std::vector<pid_t> pids() const override { return {}; }

 private:
  struct Slot {
    std::unique_ptr<FileJobExecutor> executor;
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<PendingJob> jobs;
    bool stopping = false;
    std::thread thread;
  };

  InProcessPool(uint64_t arena_bytes, std::chrono::milliseconds timeout)
      : JobPool(arena_bytes, timeout), slots_(kInProcessSlots) {}

  void Dispatch(int index, PendingJob pending) override {
    Slot& slot = slots_[index];
    std::lock_guard<std::mutex> lock(slot.mutex);
    slot.jobs.push_back(std::move(pending));
    slot.wake.notify_one();
  }

  // Runs the slot's jobs in order; on shutdown, ends those not started (the executor's destructor closes its files).
  void Serve(Slot& slot) {
    std::unique_lock<std::mutex> lock(slot.mutex);
    for (;;) {
      slot.wake.wait(lock, [&] { return slot.stopping || !slot.jobs.empty(); });
      if (slot.stopping) break;
      PendingJob job = std::move(slot.jobs.front());
      slot.jobs.pop_front();
      lock.unlock();
      GuardedRun(*slot.executor, job);
      lock.lock();
    }
    for (PendingJob& job : slot.jobs) job.WorkerEnded(IoError("the I/O worker pool was shut down first"));
    slot.jobs.clear();
  }

  // An exception fails the job it came from; none may leave the slot's thread.
  // The executor runs on this thread, so once the exception is here nothing of the job runs any more.
  void GuardedRun(FileJobExecutor& executor, PendingJob& job) {
    std::optional<Status> failure = ExceptionIn("in an I/O job", [&] { Run(executor, job); });
    // A job already answered when the exception came (its promise is set) keeps its answer.
    if (failure) (void)ExceptionIn("failing an I/O job", [&] { job.WorkerEnded(*failure); });
  }

  void Run(FileJobExecutor& executor, PendingJob& job) {
    ReadFailure unused;
    switch (job.kind) {
      case JobKind::kWrite:
        job.write_done.set_value(executor.Write(job.write));
        break;
      case JobKind::kRead:
        job.status_done.set_value(executor.Read(job.read, job.failure != nullptr ? job.failure : &unused));
        break;
      case JobKind::kAbandonFiles:
        executor.AbandonFiles(job.directory);
        job.status_done.set_value(Status::Ok());
        break;
    }
    SetBackendName(executor.backend_name());
  }

  std::vector<Slot> slots_;
};

}  // namespace

Result<std::unique_ptr<WorkerPool>> StartInProcessPool(const StagingArena& arena, const WorkerPoolOptions& options) {
  return InProcessPool::Create(arena, options);
}

}  // namespace ckpt::io::internal
