#include "runtime/core/agreement.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/bytes.h"

namespace ckpt::runtime {
namespace {

constexpr size_t kMaxMessages = 4;
// How long a rank that has already waited out the timeout on a peer waits for the others to agree, at most: the
// ranks waiting on the same silent peer arrive within moments of each other, so waiting out the timeout a second
// time would only double the failure's delay; ranks still busy elsewhere learn of the failure when they arrive. A
// quarter of the timeout where that is shorter, so that the whole step stays well under twice the timeout.
constexpr std::chrono::milliseconds kAgreeAfterTimeout{5000};
constexpr size_t kMaxRanksNamed = 8;

struct Contribution {
  std::string step;
  int32_t code = 0;
  std::string message;
  std::string payload;
};

Result<Contribution> DecodeContribution(std::string_view bytes, int rank) {
  ByteReader in(bytes, "status from rank " + std::to_string(rank));
  Contribution c;
  RETURN_IF_ERROR(in.Bytes(&c.step));
  RETURN_IF_ERROR(in.I32(&c.code));
  RETURN_IF_ERROR(in.Bytes(&c.message));
  RETURN_IF_ERROR(in.Bytes(&c.payload));
  RETURN_IF_ERROR(in.ExpectDone());
  if (c.code < 0 || c.code > static_cast<int32_t>(Code::kInternal)) {
    return Corrupt("status from rank " + std::to_string(rank) + " has unknown code " + std::to_string(c.code));
  }
  return c;
}

// "rank 2: ...", "ranks 0, 1, 3: ..."; a few distinct messages, then how many ranks failed otherwise.
std::string DescribeFailures(const std::vector<std::pair<std::string, std::vector<int>>>& failures) {
  std::string out;
  size_t unnamed = 0;
  for (size_t i = 0; i < failures.size(); ++i) {
    const auto& [message, ranks] = failures[i];
    if (i >= kMaxMessages) {
      unnamed += ranks.size();
      continue;
    }
    if (i) out += "; ";
    out += ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t k = 0; k < ranks.size() && k < kMaxRanksNamed; ++k) out += (k ? ", " : "") + std::to_string(ranks[k]);
    if (ranks.size() > kMaxRanksNamed) out += " and " + std::to_string(ranks.size() - kMaxRanksNamed) + " more";
    out += ": " + message;
  }
  if (unnamed) out += " (and " + std::to_string(unnamed) + " more ranks failed otherwise)";
  return out;
}

// Ranks that are not all in the same collective step answered each other's calls: a save paired with a load, say.
// Their contributions mean different things, so nothing in them is read; every rank names the steps instead.
Status CheckSameStep(const std::vector<Contribution>& contributions) {
  std::vector<std::pair<std::string, std::vector<int>>> steps;
  for (size_t r = 0; r < contributions.size(); ++r) {
    const std::string& step = contributions[r].step;
    auto same = std::find_if(steps.begin(), steps.end(), [&](const auto& s) { return s.first == step; });
    if (same == steps.end()) same = steps.insert(steps.end(), {step, {}});
    same->second.push_back(static_cast<int>(r));
  }
  if (steps.size() == 1) return Status::Ok();
  std::vector<std::pair<std::string, std::vector<int>>> described;
  for (auto& [step, ranks] : steps) described.push_back({"called " + step, std::move(ranks)});
  return Mismatch("ranks called different collective operations: " + DescribeFailures(described));
}

std::string EncodeContribution(std::string_view step, const Status& local, std::string_view payload) {
  ByteWriter out;
  out.Bytes(step);
  out.I32(static_cast<int32_t>(local.code()));
  out.Bytes(local.message());
  out.Bytes(local.ok() ? payload : std::string_view());
  return out.Take();
}

// Every rank's payload, or the one error every rank is to return: the contributions judged alike wherever they are
// judged.
Result<std::vector<std::string>> Judge(const std::vector<std::string>& gathered) {
  std::vector<Contribution> contributions;
  for (size_t r = 0; r < gathered.size(); ++r) {
    ASSIGN_OR_RETURN(Contribution c, DecodeContribution(gathered[r], static_cast<int>(r)));
    contributions.push_back(std::move(c));
  }
  RETURN_IF_ERROR(CheckSameStep(contributions));

  std::vector<std::string> payloads(gathered.size());
  Code first_code = Code::kOk;
  // Distinct failure messages in order of the lowest rank reporting each, with the ranks that reported it: a
  // failure every rank sees alike (a corrupt chunk, a dead peer) is stated once.
  std::vector<std::pair<std::string, std::vector<int>>> failures;
  for (size_t r = 0; r < contributions.size(); ++r) {
    Contribution& c = contributions[r];
    if (c.code == 0) {
      payloads[r] = std::move(c.payload);
      continue;
    }
    if (failures.empty()) first_code = static_cast<Code>(c.code);
    auto same = std::find_if(failures.begin(), failures.end(), [&](const auto& f) { return f.first == c.message; });
    if (same == failures.end()) same = failures.insert(failures.end(), {c.message, {}});
    same->second.push_back(static_cast<int>(r));
  }
  if (failures.empty()) return payloads;
  // Every rank already holds this very error (agreed in an earlier step, or seen alike by all): pass it on as is.
  if (failures.size() == 1 && failures[0].second.size() == gathered.size())
    return Status(first_code, failures[0].first);
  return Status(first_code, DescribeFailures(failures));
}

// How long this rank waits for the others in an agreement: see kAgreeAfterTimeout.
std::chrono::milliseconds AgreementWait(const coll::ControlPlane& control, const Status& local) {
  return local.code() == Code::kTimeout ? std::min(kAgreeAfterTimeout, control.timeout() / 4) : control.timeout();
}

std::string EncodeVerdict(const Result<std::string>& verdict) {
  ByteWriter out;
  out.I32(static_cast<int32_t>(verdict.status().code()));
  out.Bytes(verdict.status().message());
  out.Bytes(verdict.ok() ? std::string_view(verdict.value()) : std::string_view());
  return out.Take();
}

Result<std::string> DecodeVerdict(std::string_view bytes) {
  ByteReader in(bytes, "verdict from rank 0");
  int32_t code = 0;
  std::string message, payload;
  RETURN_IF_ERROR(in.I32(&code));
  RETURN_IF_ERROR(in.Bytes(&message));
  RETURN_IF_ERROR(in.Bytes(&payload));
  RETURN_IF_ERROR(in.ExpectDone());
  if (code < 0 || code > static_cast<int32_t>(Code::kInternal)) {
    return Corrupt("verdict from rank 0 has unknown code " + std::to_string(code));
  }
  if (code != 0) return Status(static_cast<Code>(code), message);
  return payload;
}

}  // namespace

Result<std::string> DecideAtRoot(coll::ControlPlane& control, std::string_view step, const Status& local,
                                 std::string_view payload, const Decision& decide) {
  const bool waited_out = local.code() == Code::kTimeout;
  const std::chrono::milliseconds wait = AgreementWait(control, local);
  std::vector<std::string> outgoing(control.world_size());
  outgoing[0] = EncodeContribution(step, local, payload);
  Result<std::vector<std::string>> gathered = control.AllToAllV(std::move(outgoing), wait);
  if (!gathered.ok()) return waited_out ? local : gathered.status();
  std::string verdict;
  if (control.rank() == 0) {
    Result<std::vector<std::string>> judged = Judge(gathered.value());
    verdict = EncodeVerdict(judged.ok() ? decide(std::move(judged).value()) : Result<std::string>(judged.status()));
  }
  Result<std::string> broadcast = control.Broadcast(verdict, wait);
  if (!broadcast.ok()) {
    if (waited_out) return local;
    // A failed verdict is final for the ranks that got it, and one may have exited before the broadcast reached the
    // last rank: rank 0 reports the failure itself rather than the link the exiting rank closed.
    if (control.rank() == 0) {
      Result<std::string> decided = DecodeVerdict(verdict);
      if (!decided.ok()) return decided.status();
    }
    return broadcast.status();
  }
  return DecodeVerdict(broadcast.value());
}

Result<std::vector<std::string>> AgreeAndGather(coll::ControlPlane& control, std::string_view step, const Status& local,
                                                std::string_view payload) {
  ASSIGN_OR_RETURN(std::string all, DecideAtRoot(control, step, local, payload, [](std::vector<std::string> payloads) {
                     ByteWriter out;
                     for (const std::string& p : payloads) out.Bytes(p);
                     return Result<std::string>(out.Take());
                   }));
  ByteReader in(all, "payloads agreed on rank 0");
  std::vector<std::string> payloads(control.world_size());
  for (std::string& p : payloads) RETURN_IF_ERROR(in.Bytes(&p));
  RETURN_IF_ERROR(in.ExpectDone());
  return payloads;
}

Status Agree(coll::ControlPlane& control, std::string_view step, const Status& local) {
  return DecideAtRoot(control, step, local, {},
                      [](std::vector<std::string>) -> Result<std::string> { return std::string(); })
      .status();
}

std::vector<std::string> WithStatus(std::string_view step, const Status& local, std::vector<std::string> outgoing,
                                    int world_size) {
  outgoing.resize(static_cast<size_t>(world_size));
  for (std::string& payload : outgoing) payload = EncodeContribution(step, local, payload);
  return outgoing;
}

Result<std::vector<std::string>> JudgeExchange(const std::vector<std::string>& received) { return Judge(received); }

}  // namespace ckpt::runtime
