#include "runtime/agreement.h"

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

}  // namespace

Result<std::vector<std::string>> AgreeAndGather(coll::ControlPlane& control, std::string_view step, const Status& local,
                                                std::string_view payload) {
  ByteWriter out;
  out.Bytes(step);
  out.I32(static_cast<int32_t>(local.code()));
  out.Bytes(local.message());
  out.Bytes(local.ok() ? payload : std::string_view());
  const bool waited_out = local.code() == Code::kTimeout;
  Result<std::vector<std::string>> exchanged =
      waited_out ? control.AllGatherWithin(out.data(), std::min(kAgreeAfterTimeout, control.timeout() / 4))
                 : control.AllGather(out.data());
  // This rank's own timeout names the silent peer better than the agreement that could not complete without it.
  if (!exchanged.ok()) return waited_out ? local : exchanged.status();
  std::vector<std::string> gathered = std::move(exchanged).value();

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

Status Agree(coll::ControlPlane& control, std::string_view step, const Status& local) {
  return AgreeAndGather(control, step, local, {}).status();
}

}  // namespace ckpt::runtime
