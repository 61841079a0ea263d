#include "runtime/load/load_agreement.h"

#include <utility>

#include "common/bytes.h"
#include "io/checksum.h"
#include "runtime/core/agreement.h"

namespace ckpt::runtime {
namespace {

// The flags travel as bits: rank 0 receives one bit per manifest entry from every rank.
std::string PackFlags(const std::string& flags) {
  std::string bits((flags.size() + 7) / 8, '\0');
  for (size_t i = 0; i < flags.size(); ++i) {
    if (flags[i]) bits[i / 8] = static_cast<char>(bits[i / 8] | (1 << (i % 8)));
  }
  return bits;
}

bool FlagSet(const std::string& bits, size_t i) { return (bits[i / 8] >> (i % 8)) & 1; }

std::string EncodeAsk(const LoadAsk& ask) {
  ByteWriter out;
  out.Bytes(ask.checkpoint_id);
  out.U64(ask.requested.size());
  out.Bytes(PackFlags(ask.requested));
  out.I32(ask.exchange_device);
  out.U64(ask.request_digest);
  out.U64(ask.cached_plan);
  return out.Take();
}

struct DecodedAsk {
  std::string checkpoint_id;
  uint64_t entries = 0;
  std::string bits;
  int32_t exchange_device = -1;
  uint64_t request_digest = 0;
  uint64_t cached_plan = 0;
};

Result<DecodedAsk> DecodeAsk(std::string_view bytes, int rank) {
  ByteReader in(bytes, "load request from rank " + std::to_string(rank));
  DecodedAsk ask;
  RETURN_IF_ERROR(in.Bytes(&ask.checkpoint_id));
  RETURN_IF_ERROR(in.U64(&ask.entries));
  RETURN_IF_ERROR(in.Bytes(&ask.bits));
  RETURN_IF_ERROR(in.I32(&ask.exchange_device));
  RETURN_IF_ERROR(in.U64(&ask.request_digest));
  RETURN_IF_ERROR(in.U64(&ask.cached_plan));
  RETURN_IF_ERROR(in.ExpectDone());
  if (ask.bits.size() != (ask.entries + 7) / 8) {
    return Corrupt("load request from rank " + std::to_string(rank) + " flags " + std::to_string(ask.entries) +
                   " entries in " + std::to_string(ask.bits.size()) + " bytes");
  }
  return ask;
}

Result<std::string> Decide(std::vector<std::string> payloads, const Manifest& manifest,
                           const std::function<Status(const std::vector<std::string>&)>& judge_unexpected) {
  std::vector<DecodedAsk> asks;
  for (size_t r = 0; r < payloads.size(); ++r) {
    ASSIGN_OR_RETURN(DecodedAsk ask, DecodeAsk(payloads[r], static_cast<int>(r)));
    asks.push_back(std::move(ask));
  }
  const uint64_t entries = manifest.tensors.size() + manifest.objects.size();
  uint64_t key = 0;
  bool on_devices = true;
  for (size_t r = 0; r < asks.size(); ++r) {
    if (asks[r].checkpoint_id != asks[0].checkpoint_id || asks[r].entries != entries) {
      return Mismatch("rank " + std::to_string(r) + " read a different checkpoint (" + asks[r].checkpoint_id + ", " +
                      std::to_string(asks[r].entries) + " entries) than rank 0 (" + asks[0].checkpoint_id + ", " +
                      std::to_string(entries) + " entries): was the checkpoint replaced during the load?");
    }
    on_devices = on_devices && asks[r].exchange_device >= 0;
    key = key * 31 + asks[r].request_digest;
  }
  key = (key ^ io::Checksum(asks[0].checkpoint_id.data(), asks[0].checkpoint_id.size())) | 1;
  std::string any((entries + 7) / 8, '\0');
  for (const DecodedAsk& ask : asks) {
    for (size_t b = 0; b < any.size(); ++b) any[b] = static_cast<char>(any[b] | ask.bits[b]);
  }
  std::vector<std::string> unexpected;
  for (uint64_t i = 0; i < entries; ++i) {
    if (FlagSet(any, i)) continue;
    unexpected.push_back(i < manifest.tensors.size() ? manifest.tensors[i].key
                                                     : manifest.objects[i - manifest.tensors.size()].key);
  }
  RETURN_IF_ERROR(judge_unexpected(unexpected));
  bool reuse = true;
  for (const DecodedAsk& ask : asks) reuse = reuse && ask.cached_plan == key;
  ByteWriter verdict;
  verdict.U8(on_devices ? 1 : 0);
  verdict.U64(key);
  verdict.U8(reuse ? 1 : 0);
  return verdict.Take();
}

}  // namespace

Result<LoadVerdict> AgreeOnLoad(coll::ControlPlane& control, const Status& local, const LoadAsk& mine,
                                const Manifest* manifest,
                                const std::function<Status(const std::vector<std::string>&)>& judge_unexpected) {
  ASSIGN_OR_RETURN(std::string decided,
                   DecideAtRoot(control, "load (requests)", local, local.ok() ? EncodeAsk(mine) : std::string(),
                                [&](std::vector<std::string> payloads) {
                                  return Decide(std::move(payloads), *manifest, judge_unexpected);
                                }));
  ByteReader in(decided, "load verdict from rank 0");
  LoadVerdict verdict;
  uint8_t on_devices = 0, reuse = 0;
  RETURN_IF_ERROR(in.U8(&on_devices));
  RETURN_IF_ERROR(in.U64(&verdict.plan_key));
  RETURN_IF_ERROR(in.U8(&reuse));
  RETURN_IF_ERROR(in.ExpectDone());
  verdict.on_devices = on_devices != 0;
  verdict.reuse_plan = reuse != 0;
  return verdict;
}

}  // namespace ckpt::runtime
