#include "runtime/agreement.h"

#include "common/bytes.h"

namespace ckpt::runtime {
namespace {

constexpr int kMaxRanksNamed = 4;

struct Contribution {
  int32_t code = 0;
  std::string message;
  std::string payload;
};

Result<Contribution> DecodeContribution(std::string_view bytes, int rank) {
  ByteReader in(bytes, "status from rank " + std::to_string(rank));
  Contribution c;
  RETURN_IF_ERROR(in.I32(&c.code));
  RETURN_IF_ERROR(in.Bytes(&c.message));
  RETURN_IF_ERROR(in.Bytes(&c.payload));
  RETURN_IF_ERROR(in.ExpectDone());
  if (c.code < 0 || c.code > static_cast<int32_t>(Code::kInternal)) {
    return Corrupt("status from rank " + std::to_string(rank) + " has unknown code " + std::to_string(c.code));
  }
  return c;
}

}  // namespace

Result<std::vector<std::string>> AgreeAndGather(coll::ControlPlane& control, const Status& local,
                                                std::string_view payload) {
  ByteWriter out;
  out.I32(static_cast<int32_t>(local.code()));
  out.Bytes(local.message());
  out.Bytes(local.ok() ? payload : std::string_view());
  ASSIGN_OR_RETURN(std::vector<std::string> gathered, control.AllGather(out.data()));

  std::vector<std::string> payloads(gathered.size());
  Code first_code = Code::kOk;
  std::string message;
  int failed = 0;
  for (size_t r = 0; r < gathered.size(); ++r) {
    ASSIGN_OR_RETURN(Contribution c, DecodeContribution(gathered[r], static_cast<int>(r)));
    if (c.code == 0) {
      payloads[r] = std::move(c.payload);
      continue;
    }
    if (failed == 0) first_code = static_cast<Code>(c.code);
    if (failed < kMaxRanksNamed) {
      if (failed) message += "; ";
      message += "rank " + std::to_string(r) + ": " + c.message;
    }
    ++failed;
  }
  if (failed > kMaxRanksNamed) message += " (and " + std::to_string(failed - kMaxRanksNamed) + " more ranks)";
  if (failed) return Status(first_code, message);
  return payloads;
}

Status Agree(coll::ControlPlane& control, const Status& local) { return AgreeAndGather(control, local, {}).status(); }

}  // namespace ckpt::runtime
