#include "runtime/save/rank_saves.h"

#include <string>
#include <utility>

#include "runtime/save/commit_channel.h"
#include "runtime/save/save_ticket.h"

namespace ckpt::runtime {

std::unique_ptr<RankSaves> RankSaves::Start(Context& ctx) {
  std::unique_ptr<coll::TcpStore> auxiliary = ctx.TakeAuxiliaryStore();
  std::unique_ptr<CommitChannel> channel =
      auxiliary ? MakeStoreCommitChannel(std::move(auxiliary)) : MakeLocalCommitChannel();
  auto executor = std::make_unique<SaveExecutor>(ctx.arena(), ctx.workers(), std::move(channel), ctx.rank(),
                                                 [&ctx](const SaveTicket& ticket, const Status& outcome) {
                                                   ctx.stats().bytes_written += ticket.bytes_written;
                                                   ReleaseMemoryReservation(ticket, [&ctx](const std::string& m) {
                                                     ctx.Log(LogLevel::kWarning, "the memory tier: " + m);
                                                   });
                                                   if (!outcome.ok()) return;
                                                   ++ctx.stats().saves_committed;
                                                   ctx.Log(LogLevel::kInfo, DescribeSave(ticket));
                                                 });
  return std::unique_ptr<RankSaves>(new RankSaves(std::move(executor)));
}

WriteFaultHandler* RankSaves::CopyOnWrite(const Context& ctx) {
  if (copy_on_write_ == nullptr && !copy_on_write_refused_) {
    Result<std::unique_ptr<WriteFaultHandler>> started = WriteFaultHandler::Start();
    if (started.ok()) {
      copy_on_write_ = std::move(started).value();
    } else {
      copy_on_write_refused_ = true;
      ctx.Log(LogLevel::kInfo,
              "write protection is refused, so copy-on-write saves stage at the call, and replicas are checksummed "
              "during it: " +
                  started.status().message());
    }
  }
  return copy_on_write_.get();
}

void RankSaves::AwaitBackgroundStaging() {
  if (background_ != nullptr) background_->AwaitStaged();
  background_ = nullptr;
}

}  // namespace ckpt::runtime
