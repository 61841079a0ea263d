#include "runtime/load/load_agreement.h"

#include <utility>

#include "common/bytes.h"
#include "io/checksum.h"
#include "runtime/core/agreement.h"
#include "runtime/core/dtype.h"

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
  out.Bytes(ask.node_name);
  out.U8(static_cast<uint8_t>(ask.reads_setting));
  out.U8(static_cast<uint8_t>((ask.exchanges ? 1 : 0) | (ask.files_everywhere ? 2 : 0) | (ask.storage_local ? 4 : 0)));
  out.U64(ask.own_bytes);
  return out.Take();
}

struct DecodedAsk {
  std::string checkpoint_id;
  uint64_t entries = 0;
  std::string bits;
  int32_t exchange_device = -1;
  uint64_t request_digest = 0;
  uint64_t cached_plan = 0;
  std::string node_name;
  uint8_t reads_setting = 0;
  uint8_t reads_flags = 0;  // EncodeAsk's bits: exchanges, files_everywhere, storage_local
  uint64_t own_bytes = 0;
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
  RETURN_IF_ERROR(in.Bytes(&ask.node_name));
  RETURN_IF_ERROR(in.U8(&ask.reads_setting));
  RETURN_IF_ERROR(in.U8(&ask.reads_flags));
  RETURN_IF_ERROR(in.U64(&ask.own_bytes));
  RETURN_IF_ERROR(in.ExpectDone());
  if (ask.bits.size() != (ask.entries + 7) / 8) {
    return Corrupt("load request from rank " + std::to_string(rank) + " flags " + std::to_string(ask.entries) +
                   " entries in " + std::to_string(ask.bits.size()) + " bytes");
  }
  return ask;
}

// A CKPT_LOAD_READS value as a rank sent it, for the message naming ranks that disagree.
const char* SettingName(uint8_t setting) {
  static const char* const kNames[] = {"auto", "once", "own"};
  return setting < 3 ? kNames[setting] : "?";
}

// The stored bytes of the tensors whose flag is set in `any`: from their shapes, since their chunks (which tile
// them exactly, each stored at volume x dtype size) may not be decoded on rank 0.
uint64_t NeededBytes(const Manifest& manifest, const std::string& any) {
  uint64_t bytes = 0;
  for (size_t t = 0; t < manifest.tensors.size(); ++t) {
    const TensorRecord& tensor = manifest.tensors[t];
    if (FlagSet(any, t)) bytes += Volume(tensor.shape) * DTypeSize(tensor.dtype);
  }
  return bytes;
}

// Rank 0's choice of strategy from every rank's ask (read_strategy.h); the CKPT_LOAD_READS of every rank must agree.
Result<ReadStrategyInputs> StrategyInputs(const std::vector<DecodedAsk>& asks) {
  ReadStrategyInputs in;
  in.setting = static_cast<LoadReadsSetting>(asks[0].reads_setting);
  in.exchanges = in.files_everywhere = in.one_node = in.storage_local = true;
  for (size_t r = 0; r < asks.size(); ++r) {
    const DecodedAsk& ask = asks[r];
    if (ask.reads_setting != asks[0].reads_setting) {
      return Mismatch(std::string("CKPT_LOAD_READS is '") + SettingName(ask.reads_setting) + "' on rank " +
                      std::to_string(r) + " but '" + SettingName(asks[0].reads_setting) +
                      "' on rank 0: set it alike on every rank");
    }
    in.exchanges = in.exchanges && (ask.reads_flags & 1);
    in.files_everywhere = in.files_everywhere && (ask.reads_flags & 2);
    in.storage_local = in.storage_local && (ask.reads_flags & 4);
    in.one_node = in.one_node && ask.node_name == asks[0].node_name;
    in.own_bytes += ask.own_bytes;
  }
  return in;
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
  ASSIGN_OR_RETURN(ReadStrategyInputs inputs, StrategyInputs(asks));
  inputs.needed_bytes = NeededBytes(manifest, any);
  const ReadStrategy strategy = ChooseLoadReads(inputs);
  ByteWriter verdict;
  verdict.U8(on_devices ? 1 : 0);
  verdict.U64(key);
  verdict.U8(reuse ? 1 : 0);
  verdict.U8(static_cast<uint8_t>(strategy.reads));
  verdict.Bytes(strategy.fallback);
  verdict.U64(inputs.needed_bytes);
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
  uint8_t on_devices = 0, reuse = 0, reads = 0;
  RETURN_IF_ERROR(in.U8(&on_devices));
  RETURN_IF_ERROR(in.U64(&verdict.plan_key));
  RETURN_IF_ERROR(in.U8(&reuse));
  RETURN_IF_ERROR(in.U8(&reads));
  RETURN_IF_ERROR(in.Bytes(&verdict.reads_note));
  RETURN_IF_ERROR(in.U64(&verdict.needed_bytes));
  RETURN_IF_ERROR(in.ExpectDone());
  verdict.reads = reads == static_cast<uint8_t>(LoadReads::kOwn) ? LoadReads::kOwn : LoadReads::kOnce;
  verdict.on_devices = on_devices != 0;
  verdict.reuse_plan = reuse != 0;
  return verdict;
}

}  // namespace ckpt::runtime
