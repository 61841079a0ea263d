#include "runtime/save/save_ticket.h"

#include <algorithm>

namespace ckpt::runtime {
namespace {

// The length of the span from `begin` to `end`; one not begun is 0, one not ended lasts until the save finished, or
// until `now` while it runs.
uint64_t Span(int64_t begin, int64_t end, int64_t finished, int64_t now) {
  if (begin == 0) return 0;
  const int64_t until = end != 0 ? end : finished != 0 ? finished : now;
  return static_cast<uint64_t>(std::max<int64_t>(until - begin, 0));
}

}  // namespace

void SaveTicket::Finish(Status status) {
  std::lock_guard<std::mutex> lock(mutex_);
  status_ = std::move(status);
  done_ = true;
  finished_.notify_all();
}

void SaveTicket::MarkStaged() {
  std::lock_guard<std::mutex> lock(mutex_);
  marks.staged = NowNs();
  staged_.notify_all();
}

void SaveTicket::AwaitStaged() const {
  std::unique_lock<std::mutex> lock(mutex_);
  staged_.wait(lock, [this] { return marks.staged != 0; });
}

Status SaveTicket::Test() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_ ? status_ : Status(Code::kInProgress, "the save is still in progress");
}

Status SaveTicket::Wait(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  auto done = [this] { return done_; };
  if (timeout.count() == 0) {
    finished_.wait(lock, done);
  } else if (!finished_.wait_for(lock, timeout, done)) {
    return Status(Code::kInProgress, "the save did not finish within " + std::to_string(timeout.count()) + " ms");
  }
  return status_;
}

SaveStats SaveTicket::Stats() const {
  SaveStats s;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    s.committed = done_ && status_.ok();
  }
  // Read latest first: a point read as reached has every earlier point reached too.
  const int64_t finished = marks.finished, durable = marks.durable, staged = marks.staged;
  const int64_t returned = marks.returned, planned = marks.planned, called = marks.called, now = NowNs();
  // A copy-on-write save stages from its return on, beside its writes; any other within the call.
  const bool in_background = marks.stages_in_background;
  s.state_bytes = state_bytes;
  s.bytes_to_write = bytes_to_write;
  s.bytes_staged = bytes_staged;
  s.bytes_written = bytes_written;
  s.bytes_committed = s.committed ? s.bytes_written : 0;
  s.files_written = files_written;
  s.planning_ns = Span(called, planned, finished, now);
  s.staging_ns = Span(in_background ? returned : planned, staged, finished, now);
  s.blocking_ns = Span(called, returned, finished, now);
  s.writing_ns = Span(returned, durable, finished, now);
  s.committing_ns = Span(durable, finished, finished, now);
  s.total_ns = Span(called, finished, finished, now);
  return s;
}

std::string DescribeSave(const SaveTicket& ticket) {
  const SaveStats s = ticket.Stats();
  return "saved '" + ticket.commit.path + "': " + DescribeThroughput(s.bytes_written, s.total_ns) +
         " from this rank in " + std::to_string(s.files_written) + (s.files_written == 1 ? " file" : " files") +
         (ticket.bytes_stored != 0 ? ", stored compressed in " + DescribeBytes(ticket.bytes_stored) : std::string()) +
         "; the call blocked " + DescribeSeconds(s.blocking_ns) + ", writes durable after " +
         DescribeSeconds(s.blocking_ns + s.writing_ns) + ", committed after " + DescribeSeconds(s.total_ns);
}

void ReleaseMemoryReservation(const SaveTicket& ticket, const std::function<void(const std::string&)>& warn) {
  const std::shared_ptr<MemoryTier>& agent = ticket.commit.memory_tier;
  if (!agent || agent->broken()) return;
  const Status released = agent->Release(ticket.commit.memory_reservation);
  if (!released.ok()) warn(released.message());
}

}  // namespace ckpt::runtime
