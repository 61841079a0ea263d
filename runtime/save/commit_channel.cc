#include "runtime/save/commit_channel.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "common/bytes.h"

namespace ckpt::runtime {
namespace {

constexpr std::chrono::milliseconds kOutcomeGrace{30000};

std::string EncodeStatus(const Status& status, const std::string& payload) {
  ByteWriter out;
  out.I32(static_cast<int32_t>(status.code()));
  out.Bytes(status.message());
  out.Bytes(payload);
  return out.Take();
}

Status DecodeStatus(std::string_view bytes, const std::string& what, std::string* payload) {
  ByteReader in(bytes, what);
  int32_t code = 0;
  std::string message;
  RETURN_IF_ERROR(in.I32(&code));
  RETURN_IF_ERROR(in.Bytes(&message));
  RETURN_IF_ERROR(in.Bytes(payload));
  RETURN_IF_ERROR(in.ExpectDone());
  if (code < 0 || code > static_cast<int32_t>(Code::kInternal)) return Corrupt(what + ": unknown status code");
  return Status(static_cast<Code>(code), message);
}

std::string ReportKey(const std::string& save_id, int rank) {
  return "save/" + save_id + "/report/" + std::to_string(rank);
}
std::string OutcomeKey(const std::string& save_id) { return "save/" + save_id + "/outcome"; }

class StoreCommitChannel : public CommitChannel {
 public:
  explicit StoreCommitChannel(std::unique_ptr<coll::TcpStore> store) : store_(std::move(store)) {}

  Status PostReport(const std::string& save_id, int rank, const Status& status, const std::string& report) override {
    return store_->Set(ReportKey(save_id, rank), EncodeStatus(status, report));
  }

  // Each report leaves the store once read, so that the store does not grow with every save.
  Result<std::vector<std::string>> CollectReports(const std::string& save_id) override {
    std::vector<std::string> reports(store_->world_size());
    for (int r = 0; r < store_->world_size(); ++r) {
      Result<std::string> waited = store_->Wait(ReportKey(save_id, r));
      if (!waited.ok()) {
        return Status(waited.status().code(),
                      "rank " + std::to_string(r) + " did not report its writes (" + waited.status().message() + ")");
      }
      const std::string posted = std::move(waited).value();
      RETURN_IF_ERROR(store_->Delete(ReportKey(save_id, r)));
      Status status = DecodeStatus(posted, "write report of rank " + std::to_string(r), &reports[r]);
      if (!status.ok()) return Status(status.code(), "rank " + std::to_string(r) + ": " + status.message());
    }
    // Every rank posts its report only after it has read the previous save's outcome: that key is consumed.
    if (!previous_outcome_.empty()) RETURN_IF_ERROR(store_->Delete(previous_outcome_));
    previous_outcome_.clear();
    return reports;
  }

  Status PostOutcome(const std::string& save_id, const Status& outcome, const std::string& payload) override {
    previous_outcome_ = OutcomeKey(save_id);
    return store_->Set(previous_outcome_, EncodeStatus(outcome, payload));
  }

  // Longer than rank 0 waits for any report, so that when a rank goes silent the others learn rank 0's verdict,
  // which names it, rather than time out at the same moment knowing nothing.
  Status AwaitOutcome(const std::string& save_id, std::string* payload) override {
    const std::chrono::milliseconds timeout = store_->timeout();
    Result<std::string> waited = store_->Wait(OutcomeKey(save_id), timeout + std::min(timeout / 2, kOutcomeGrace));
    if (!waited.ok()) {
      return Status(waited.status().code(), "rank 0 posted no outcome of the save (" + waited.status().message() + ")");
    }
    const std::string posted = std::move(waited).value();
    std::string unused;
    return DecodeStatus(posted, "outcome of save " + save_id, payload != nullptr ? payload : &unused);
  }

 private:
  std::unique_ptr<coll::TcpStore> store_;
  std::string previous_outcome_;  // rank 0: the last outcome posted, deleted once every rank has read it
};

class LocalCommitChannel : public CommitChannel {
 public:
  Status PostReport(const std::string&, int, const Status& status, const std::string& report) override {
    status_ = status;
    report_ = report;
    return Status::Ok();
  }
  Result<std::vector<std::string>> CollectReports(const std::string&) override {
    if (!status_.ok()) return Status(status_.code(), "rank 0: " + status_.message());
    return std::vector<std::string>{report_};
  }
  Status PostOutcome(const std::string&, const Status&, const std::string&) override { return Status::Ok(); }
  Status AwaitOutcome(const std::string&, std::string*) override {
    return Internal("a one-rank job has no outcome to wait for");
  }

 private:
  Status status_;
  std::string report_;
};

}  // namespace

std::unique_ptr<CommitChannel> MakeStoreCommitChannel(std::unique_ptr<coll::TcpStore> store) {
  return std::make_unique<StoreCommitChannel>(std::move(store));
}

std::unique_ptr<CommitChannel> MakeLocalCommitChannel() { return std::make_unique<LocalCommitChannel>(); }

}  // namespace ckpt::runtime
