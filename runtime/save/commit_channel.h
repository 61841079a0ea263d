// How a save's background commit talks across ranks without a collective on the training path: each rank posts its
// write report under the save's id, rank 0 collects them and posts the outcome, the others wait for it. Runs on the
// save executor's background thread (runtime/save/save_executor.h), over a connection of its own.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "collectives/store/tcp_store.h"
#include "common/status.h"

namespace ckpt::runtime {

class CommitChannel {
 public:
  virtual ~CommitChannel() = default;
  // Every rank: its report, or the error that stopped it.
  virtual Status PostReport(const std::string& save_id, int rank, const Status& status, const std::string& report) = 0;
  // Rank 0: every rank's report, or the first failure ("rank 2: ...") / a dead or silent rank.
  virtual Result<std::vector<std::string>> CollectReports(const std::string& save_id) = 0;
  // Rank 0: the save's outcome, with `payload` for the other ranks (runtime/save/memory_commit.h: the manifest).
  virtual Status PostOutcome(const std::string& save_id, const Status& outcome, const std::string& payload = {}) = 0;
  // Ranks other than 0: the outcome rank 0 posted, and its payload into `payload` unless null.
  virtual Status AwaitOutcome(const std::string& save_id, std::string* payload = nullptr) = 0;
};

// Over an auxiliary store connection of this rank.
std::unique_ptr<CommitChannel> MakeStoreCommitChannel(std::unique_ptr<coll::TcpStore> store);
// A one-rank job: reports and outcome stay in memory.
std::unique_ptr<CommitChannel> MakeLocalCommitChannel();

}  // namespace ckpt::runtime
