// No exception leaves a background thread: the save executor turns one into the save's failure (out of memory:
// kNoMemory) and goes on serving the next save, where an escaping exception would std::terminate the trainer.
// ctest-labels: threaded
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/staging_arena.h"
#include "io/worker_pool.h"
#include "runtime/save/commit_channel.h"
#include "runtime/save/save_executor.h"
#include "runtime/save/save_ticket.h"

namespace ckpt::runtime {
namespace {

using std::chrono::milliseconds;

// A one-rank channel that throws what it is told to from the next report on, then behaves.
class ThrowingChannel : public CommitChannel {
 public:
  explicit ThrowingChannel(std::vector<std::exception_ptr> throws) : throws_(std::move(throws)) {}
  Status PostReport(const std::string&, int, const Status& status, const std::string&) override {
    if (!throws_.empty()) {
      std::exception_ptr next = throws_.front();
      throws_.erase(throws_.begin());
      std::rethrow_exception(next);
    }
    return status;
  }
  Result<std::vector<std::string>> CollectReports(const std::string&) override { return std::vector<std::string>(); }
  Status PostOutcome(const std::string&, const Status& outcome, const std::string&) override {
    posted_outcomes.push_back(outcome);
    return Status::Ok();
  }
  Status AwaitOutcome(const std::string&, std::string*) override { return Status::Ok(); }

  std::vector<Status> posted_outcomes;  // what rank 0 told the other ranks

 private:
  std::vector<std::exception_ptr> throws_;
};

std::shared_ptr<SaveTicket> FailedTicket(const std::string& id) {
  auto ticket = std::make_shared<SaveTicket>();
  ticket->commit.path = "/nonexistent/ckpt-exceptions/" + id;
  ticket->commit.save_id = id;
  ticket->commit.tmp_dir = ticket->commit.path + ".tmp-" + id;
  ticket->failure = IoError("staging failed: " + id);  // no commit is attempted, so no file is touched
  return ticket;
}

TEST(BackgroundExceptionsTest, TheSaveExecutorFailsTheSaveAndServesTheNext) {
  Result<std::unique_ptr<io::StagingArena>> arena = io::StagingArena::Create(io::kMinArenaBytes);
  ASSERT_TRUE(arena.ok()) << arena.status().message();
  io::WorkerPoolOptions options;
  options.workers = 0;
  Result<std::unique_ptr<io::WorkerPool>> pool = io::WorkerPool::Start(**arena, options);
  ASSERT_TRUE(pool.ok()) << pool.status().message();
  auto channel = std::make_unique<ThrowingChannel>(std::vector<std::exception_ptr>{
      std::make_exception_ptr(std::bad_alloc()), std::make_exception_ptr(std::logic_error("a bug"))});
  SaveExecutor saves(**arena, **pool, std::move(channel), /*rank=*/1, nullptr);

  const auto out_of_memory = FailedTicket("a1");
  const auto bug = FailedTicket("a2");
  const auto next = FailedTicket("a3");
  saves.Enqueue(out_of_memory);
  saves.Enqueue(bug);
  saves.Enqueue(next);
  const Status first = out_of_memory->Wait(milliseconds(10000));
  EXPECT_EQ(first.code(), Code::kNoMemory) << first.message();
  EXPECT_NE(first.message().find("out of memory"), std::string::npos) << first.message();
  const Status second = bug->Wait(milliseconds(10000));
  EXPECT_EQ(second.code(), Code::kInternal) << second.message();
  EXPECT_NE(second.message().find("a bug"), std::string::npos) << second.message();
  // The executor is still alive: the third save gets its own outcome, the staging failure.
  const Status third = next->Wait(milliseconds(10000));
  EXPECT_EQ(third.code(), Code::kIo) << third.message();
}

TEST(BackgroundExceptionsTest, OnRankZeroTheFailureReachesTheOtherRanksInsteadOfATimeout) {
  Result<std::unique_ptr<io::StagingArena>> arena = io::StagingArena::Create(io::kMinArenaBytes);
  ASSERT_TRUE(arena.ok()) << arena.status().message();
  io::WorkerPoolOptions options;
  options.workers = 0;
  Result<std::unique_ptr<io::WorkerPool>> pool = io::WorkerPool::Start(**arena, options);
  ASSERT_TRUE(pool.ok()) << pool.status().message();
  auto owned =
      std::make_unique<ThrowingChannel>(std::vector<std::exception_ptr>{std::make_exception_ptr(std::bad_alloc())});
  ThrowingChannel& channel = *owned;
  {
    SaveExecutor saves(**arena, **pool, std::move(owned), /*rank=*/0, nullptr);
    const auto ticket = FailedTicket("b1");
    saves.Enqueue(ticket);
    EXPECT_EQ(ticket->Wait(milliseconds(10000)).code(), Code::kNoMemory);
    ASSERT_EQ(channel.posted_outcomes.size(), 1u);
    EXPECT_EQ(channel.posted_outcomes[0].code(), Code::kNoMemory) << channel.posted_outcomes[0].message();
  }
}

}  // namespace
}  // namespace ckpt::runtime
