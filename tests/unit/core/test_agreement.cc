// AgreeAndGather and Agree: every rank gets every payload (or the verdict), or the same error naming the failing
// ranks and what they said, decided at rank 0. WithStatus and JudgeExchange: the same judgement, made by every rank
// over an all-to-all exchange.
// ctest-labels: threaded
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "common/bytes.h"
#include "runtime/core/agreement.h"

namespace ckpt::runtime {
namespace {

constexpr char kStep[] = "save (proposals)";

std::string Contribution(const Status& status, const std::string& payload = {}, const std::string& step = kStep) {
  ByteWriter out;
  out.Bytes(step);
  out.I32(static_cast<int32_t>(status.code()));
  out.Bytes(status.message());
  out.Bytes(payload);
  return out.Take();
}

// Rank 0 of a world whose other ranks' contributions are given: what they send rank 0 in the agreement's gather.
// This rank contributes what the agreement encodes, and its broadcast comes back as it was sent.
class FakeControlPlane : public coll::ControlPlane {
 public:
  explicit FakeControlPlane(std::vector<std::string> others) : others_(std::move(others)) {}
  int rank() const override { return 0; }
  int world_size() const override { return static_cast<int>(others_.size()) + 1; }
  Result<std::vector<std::string>> AllGather(std::string_view) override {
    return Internal("the agreement gathers at rank 0; it never gathers everywhere");
  }
  Result<std::vector<std::string>> AllToAllV(std::vector<std::string> outgoing,
                                             std::chrono::milliseconds within) override {
    bounded_by = within;
    if (silent_) return Timeout("alltoall timed out after " + std::to_string(within.count()) + " ms");
    std::vector<std::string> incoming{std::move(outgoing[0])};
    incoming.insert(incoming.end(), others_.begin(), others_.end());
    return incoming;
  }
  Result<std::string> Broadcast(std::string_view from_root, std::chrono::milliseconds) override {
    return std::string(from_root);
  }
  // The others never come: only a bounded wait returns.
  void GoSilent() { silent_ = true; }
  std::chrono::milliseconds timeout() const override { return timeout_; }

  std::chrono::milliseconds timeout_ = std::chrono::milliseconds(300000);
  std::optional<std::chrono::milliseconds> bounded_by;

 private:
  std::vector<std::string> others_;
  bool silent_ = false;
};

TEST(AgreementTest, EveryPayloadComesBackWhenAllRanksSucceed) {
  FakeControlPlane control({Contribution(Status::Ok(), "b"), Contribution(Status::Ok(), "c")});
  Result<std::vector<std::string>> got = AgreeAndGather(control, kStep, Status::Ok(), "a");
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, (std::vector<std::string>{"a", "b", "c"}));
}

TEST(AgreementTest, RanksReportingTheSameFailureAreNamedTogetherOnce) {
  const Status corrupt = Corrupt("tensor 'w': checksum mismatch");
  FakeControlPlane control({Contribution(corrupt), Contribution(Status::Ok()), Contribution(corrupt)});
  const Status got = Agree(control, kStep, corrupt);
  EXPECT_EQ(got.code(), Code::kCorrupt);
  EXPECT_EQ(got.message(), "ranks 0, 1, 3: tensor 'w': checksum mismatch");
}

TEST(AgreementTest, AnErrorEveryRankAlreadyHoldsIsPassedOnUnwrapped) {
  const Status agreed = Corrupt("ranks 0, 1: tensor 'w': checksum mismatch");
  FakeControlPlane control({Contribution(agreed), Contribution(agreed)});
  const Status got = Agree(control, kStep, agreed);
  EXPECT_EQ(got.code(), Code::kCorrupt);
  EXPECT_EQ(got.message(), agreed.message());
}

TEST(AgreementTest, DistinctFailuresKeepTheirRanksAndTheLowestRanksCode) {
  FakeControlPlane control({Contribution(NoSpace("disk full")), Contribution(Timeout("slow"))});
  const Status got = Agree(control, kStep, Status::Ok());
  EXPECT_EQ(got.code(), Code::kNoSpace);
  EXPECT_EQ(got.message(), "rank 1: disk full; rank 2: slow");
}

TEST(AgreementTest, ManyDistinctFailuresAreCountedBeyondAFew) {
  std::vector<std::string> others;
  for (int r = 1; r < 7; ++r) others.push_back(Contribution(IoError("error " + std::to_string(r))));
  FakeControlPlane control(others);
  const Status got = Agree(control, kStep, Status::Ok());
  EXPECT_NE(got.message().find("rank 4: error 4"), std::string::npos) << got.message();
  EXPECT_EQ(got.message().find("error 5"), std::string::npos) << got.message();
  EXPECT_NE(got.message().find("(and 2 more ranks failed otherwise)"), std::string::npos) << got.message();
}

TEST(AgreementTest, AMalformedContributionIsCorruptNamingTheRank) {
  FakeControlPlane control({"\\x01"});
  const Status got = Agree(control, kStep, Status::Ok());
  EXPECT_EQ(got.code(), Code::kCorrupt);
  EXPECT_NE(got.message().find("rank 1"), std::string::npos) << got.message();
}

TEST(AgreementTest, ARankThatWaitedOutTheTimeoutAgreesWithinAFewSecondsAndKeepsItsOwnError) {
  FakeControlPlane control({Contribution(Status::Ok())});
  const Status agreed = Agree(control, kStep, Status::Ok());
  EXPECT_TRUE(agreed.ok()) << agreed.message();
  EXPECT_EQ(control.bounded_by, control.timeout()) << "a rank without a timeout waits as long as the control plane";

  control.GoSilent();
  const Status stalled = Timeout("exchange timed out after 300000 ms waiting for rank 2");
  const Status got = Agree(control, kStep, stalled);
  ASSERT_TRUE(control.bounded_by.has_value());
  EXPECT_LE(control.bounded_by->count(), 5000);
  control.timeout_ = std::chrono::milliseconds(8000);
  (void)Agree(control, kStep, stalled);
  EXPECT_EQ(control.bounded_by->count(), 2000) << "a quarter of a short timeout";
  EXPECT_EQ(got.code(), Code::kTimeout);
  EXPECT_EQ(got.message(), stalled.message());
}

TEST(AgreementTest, RanksInDifferentCollectiveStepsAllGetMismatchNamingWhatEachCalled) {
  FakeControlPlane control({Contribution(Status::Ok(), "request", "load (requests)"),
                            Contribution(Corrupt("not a proposal"), {}, "load (requests)")});
  const Status got = Agree(control, kStep, Status::Ok());
  EXPECT_EQ(got.code(), Code::kMismatch);
  EXPECT_EQ(got.message(),
            "ranks called different collective operations: rank 0: called save (proposals); ranks 1, 2: called load "
            "(requests)");
}

TEST(AgreementTest, RankZerosDecisionFromEveryPayloadIsTheVerdict) {
  FakeControlPlane control({Contribution(Status::Ok(), "b"), Contribution(Status::Ok(), "c")});
  std::vector<std::string> seen;
  Result<std::string> verdict =
      DecideAtRoot(control, kStep, Status::Ok(), "a", [&](std::vector<std::string> payloads) -> Result<std::string> {
        seen = payloads;
        return std::string("decided");
      });
  ASSERT_TRUE(verdict.ok()) << verdict.status().message();
  EXPECT_EQ(*verdict, "decided");
  EXPECT_EQ(seen, (std::vector<std::string>{"a", "b", "c"}));
}

TEST(AgreementTest, ADecisionThatFailsIsEveryRanksErrorAndAFailedRankSkipsTheDecision) {
  FakeControlPlane control({Contribution(Status::Ok(), "b")});
  Result<std::string> refused = DecideAtRoot(control, kStep, Status::Ok(), "a", [](std::vector<std::string>) {
    return Result<std::string>(Mismatch("ranks save to different paths"));
  });
  EXPECT_EQ(refused.status().code(), Code::kMismatch);
  EXPECT_EQ(refused.status().message(), "ranks save to different paths");

  FakeControlPlane failing({Contribution(NotFound("no such file"))});
  bool decided = false;
  Result<std::string> failed = DecideAtRoot(failing, kStep, Status::Ok(), "a", [&](std::vector<std::string>) {
    decided = true;
    return Result<std::string>(std::string());
  });
  EXPECT_FALSE(decided) << "rank 0 decides only when every rank succeeded";
  EXPECT_EQ(failed.status().code(), Code::kNotFound);
  EXPECT_NE(failed.status().message().find("rank 1: no such file"), std::string::npos) << failed.status().message();
}

// What rank `to` receives in an exchange where rank r sends WithStatus(kStep, statuses[r], {"r->0", "r->1", ...}).
std::vector<std::string> ReceivedBy(int to, const std::vector<Status>& statuses) {
  const int world = static_cast<int>(statuses.size());
  std::vector<std::string> received;
  for (int from = 0; from < world; ++from) {
    std::vector<std::string> outgoing;
    for (int r = 0; r < world; ++r) outgoing.push_back(std::to_string(from) + "->" + std::to_string(r));
    received.push_back(WithStatus(kStep, statuses[from], std::move(outgoing), world)[to]);
  }
  return received;
}

TEST(AgreementTest, AnExchangeWithStatusesGivesEachRankWhatEveryRankSentIt) {
  const std::vector<Status> fine(3, Status::Ok());
  Result<std::vector<std::string>> got = JudgeExchange(ReceivedBy(1, fine));
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, (std::vector<std::string>{"0->1", "1->1", "2->1"}));
}

TEST(AgreementTest, AFailureCarriedByAnExchangeIsTheSameErrorOnEveryRank) {
  const std::vector<Status> statuses = {Status::Ok(), Mismatch("tensor 'w': rows [6, 8) held by nobody"), Status::Ok(),
                                        Mismatch("tensor 'w': rows [6, 8) held by nobody")};
  for (int rank = 0; rank < 4; ++rank) {
    Result<std::vector<std::string>> got = JudgeExchange(ReceivedBy(rank, statuses));
    EXPECT_EQ(got.status().code(), Code::kMismatch) << "rank " << rank;
    EXPECT_EQ(got.status().message(), "ranks 1, 3: tensor 'w': rows [6, 8) held by nobody") << "rank " << rank;
  }
}

TEST(AgreementTest, ARankThatFailedSendsItsStatusWithoutPayloads) {
  const std::vector<std::string> sent = WithStatus(kStep, NoSpace("disk full"), {}, 3);
  ASSERT_EQ(sent.size(), 3u) << "every rank hears of the failure";
  for (const std::string& contribution : sent) EXPECT_EQ(contribution, Contribution(NoSpace("disk full")));
}

TEST(AgreementTest, RanksInDifferentStepsOfAnExchangeGetMismatch) {
  std::vector<std::string> received = ReceivedBy(0, {Status::Ok(), Status::Ok()});
  received[1] = Contribution(Status::Ok(), "request", "load (requests)");
  const Status got = JudgeExchange(received).status();
  EXPECT_EQ(got.code(), Code::kMismatch);
  EXPECT_NE(got.message().find("rank 1: called load (requests)"), std::string::npos) << got.message();
}

}  // namespace
}  // namespace ckpt::runtime
