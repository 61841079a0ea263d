#include "runtime/load/load.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>

#include "common/bytes.h"
#include "gpu/device_copy.h"
#include "io/checksum.h"
#include "io/committed_memory.h"
#include "runtime/core/agreement.h"
#include "runtime/core/dtype.h"
#include "runtime/core/dtype_cast.h"
#include "runtime/format/checkpoint_source.h"
#include "runtime/format/manifest.h"
#include "runtime/load/chunk_fetcher.h"
#include "runtime/load/chunk_reader.h"
#include "runtime/load/exchange_load.h"
#include "runtime/load/load_agreement.h"
#include "runtime/load/read_strategy.h"
#include "runtime/memtier/memory_load.h"

namespace ckpt::runtime {
namespace {

constexpr size_t kMaxKeysListed = 8;
// A cast into device memory goes through a host buffer of at most this many bytes, block by block.
constexpr uint64_t kCastBlockBytes = 64ull << 20;

template <typename Record>
const Record* FindByKey(const std::vector<Record>& records, const std::string& key) {
  auto it = std::lower_bound(records.begin(), records.end(), key,
                             [](const Record& r, const std::string& k) { return r.key < k; });
  return (it != records.end() && it->key == key) ? &*it : nullptr;
}

// The first few of `items` (each already quoted), joined: 'a', 'b' and 3 more.
std::string ListFirst(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < kMaxKeysListed; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > kMaxKeysListed) out += " and " + std::to_string(items.size() - kMaxKeysListed) + " more";
  return out;
}

std::string ListKeys(const std::vector<std::string>& keys) {
  std::vector<std::string> quoted;
  for (const std::string& key : keys) quoted.push_back("'" + key + "'");
  return ListFirst(quoted);
}

// Applies a strictness setting to `count` offending keys; `message` describes them (made only when needed).
Status Judge(const Context& ctx, Strictness strictness, size_t count, const std::function<std::string()>& message) {
  if (count == 0 || strictness == Strictness::kIgnore) return Status::Ok();
  if (strictness == Strictness::kFail) return Mismatch(message());
  ctx.Log(LogLevel::kWarning, message());
  return Status::Ok();
}

// How this rank's request maps onto the manifest. `requested` has one flag per manifest tensor, then per object.
struct Match {
  std::vector<const TensorRecord*> tensor_records;      // per state tensor; null if missing
  std::vector<const ObjectPieceRecord*> object_pieces;  // per state object; null if missing
  std::vector<std::string> missing;                     // quoted, with the key each was looked up as
  std::string requested;
};

// The keys of the manifest's tensors and objects this rank did not ask for: where a key it misses may have gone.
std::vector<std::string> Unasked(const Match& match, const Manifest& manifest) {
  std::vector<std::string> keys;
  for (size_t i = 0; i < match.requested.size(); ++i) {
    if (match.requested[i]) continue;
    keys.push_back(i < manifest.tensors.size() ? manifest.tensors[i].key
                                               : manifest.objects[i - manifest.tensors.size()].key);
  }
  return keys;
}

// What a load says of this rank's keys that the checkpoint lacks, naming the first few on each side.
std::string MissingMessage(const Match& match, const Manifest& manifest) {
  std::string message = std::to_string(match.missing.size()) +
                        " keys of this rank's state are not in the checkpoint: " + ListFirst(match.missing);
  const std::vector<std::string> unasked = Unasked(match, manifest);
  if (!unasked.empty()) message += "; the checkpoint's keys this rank did not ask for: " + ListKeys(unasked);
  return message;
}

// What rank 0 says of the checkpoint's keys no rank asked for; a refusal names as well its own keys the checkpoint
// lacks (allowed by the missing keys' strictness), where there are any.
std::string UnexpectedMessage(const std::vector<std::string>& unexpected, const std::vector<std::string>& missing) {
  std::string message =
      std::to_string(unexpected.size()) + " keys of the checkpoint no rank asked for: " + ListKeys(unexpected);
  if (!missing.empty()) message += "; rank 0's keys not in the checkpoint: " + ListFirst(missing);
  return message;
}

Status CheckTensorAgainstRecord(const TensorShard& shard, const TensorRecord& record) {
  if (record.dtype != shard.dtype) {
    const std::string differ = "tensor '" + shard.key + "': stored as " + DTypeName(record.dtype) + ", registered as " +
                               DTypeName(shard.dtype);
    if (!IsCastable(record.dtype, shard.dtype)) {
      return Mismatch(differ + " (a load converts only between the floating dtypes F16, BF16, F32 and F64)");
    }
    if (!shard.allow_dtype_cast) return Mismatch(differ + " without CKPT_SHARD_ALLOW_DTYPE_CAST");
  }
  if (record.shape == shard.global_shape) return Status::Ok();
  if (!shard.allow_shape_mismatch || record.shape.size() != shard.global_shape.size()) {
    return Mismatch("tensor '" + shard.key + "': the checkpoint's global shape is " + ShapeToString(record.shape) +
                    ", the state's is " + ShapeToString(shard.global_shape) +
                    (shard.allow_shape_mismatch ? " (the number of dimensions must match)"
                                                : " (set CKPT_SHARD_ALLOW_SHAPE_MISMATCH to pad or strip)"));
  }
  return Status::Ok();
}

// Matches the state's keys, each looked up as `key_map` says, against the manifest.
Result<Match> MatchState(const State& state, const Manifest& manifest, const KeyMap& key_map) {
  Match match;
  match.requested.assign(manifest.tensors.size() + manifest.objects.size(), '\0');
  for (const TensorShard& shard : state.tensors()) {
    const TensorRecord* record = FindByKey(manifest.tensors, key_map.Saved(shard.key));
    match.tensor_records.push_back(record);
    if (record == nullptr) {
      match.missing.push_back(key_map.Describe(shard.key));
      continue;
    }
    RETURN_IF_ERROR(CheckTensorAgainstRecord(shard, *record));
    match.requested[record - manifest.tensors.data()] = 1;
  }
  for (const ObjectShard& object : state.objects()) {
    const ObjectRecord* record = FindByKey(manifest.objects, key_map.Saved(object.key));
    const ObjectPieceRecord* piece = nullptr;
    if (record != nullptr) {
      if (record->grid_shape != object.grid_shape) {
        return Mismatch("object '" + object.key + "': the checkpoint's grid is " + ShapeToString(record->grid_shape) +
                        ", the state's is " + ShapeToString(object.grid_shape));
      }
      for (const ObjectPieceRecord& p : record->pieces) {
        if (p.index == object.index) piece = &p;
      }
      match.requested[manifest.tensors.size() + (record - manifest.objects.data())] = 1;
    }
    if (piece == nullptr) {
      match.missing.push_back(key_map.Describe(object.key) +
                              (object.index.empty() ? "" : " cell " + ShapeToString(object.index)));
    }
    match.object_pieces.push_back(piece);
  }
  return match;
}

// The data files (manifest indices) this rank reads by itself rather than through the exchange: those of the object
// pieces it loads and of the common bytes stored outside the manifest. None where its state does not match.
std::vector<uint32_t> FilesReadAlone(const State& state, const Manifest& manifest, const KeyMap& key_map) {
  std::vector<uint32_t> files;
  Result<Match> match = MatchState(state, manifest, key_map);
  if (match.ok()) {
    for (const ObjectPieceRecord* piece : match->object_pieces) {
      if (piece != nullptr) files.push_back(piece->bytes.file_index);
    }
  }
  for (const CommonRecord& common : manifest.common) {
    if (!common.is_inline) files.push_back(common.stored.file_index);
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

// Zeroes a destination in host or device memory.
Status Zero(char* dst, uint64_t size, int device) {
  if (device < 0) {
    std::memset(dst, 0, size);
    return Status::Ok();
  }
  const std::vector<char> zeros(size, 0);
  gpu::DeviceCopier copier;
  RETURN_IF_ERROR(copier.ToDevice(device, dst, zeros.data(), size));
  return copier.Wait();
}

// A shard registered with another dtype than the checkpoint's (CKPT_SHARD_ALLOW_DTYPE_CAST). The load fills
// `stored`, host memory in the checkpoint's dtype laid out as the shard's own buffer, exactly as it fills any other
// shard, so that plans and exchanges deal in stored bytes only; the values are converted into the shard at the end.
struct CastShard {
  const TensorShard* shard = nullptr;
  int32_t stored_dtype = 0;
  io::CommittedMemory stored;
};

// Where the load writes a shard's elements, in the stored dtype.
struct Destination {
  char* base = nullptr;
  int device = -1;
};

// The shard's own buffer, or for a cast a new host buffer, recorded in `casts`.
Result<Destination> DestinationOf(const TensorShard& shard, int32_t stored_dtype, std::vector<CastShard>* casts) {
  if (shard.dtype == stored_dtype) return Destination{static_cast<char*>(shard.data), shard.device};
  const uint64_t elements = shard.data_size / DTypeSize(shard.dtype);
  const std::string what = "tensor '" + shard.key + "': the " + DTypeName(stored_dtype) + " values to cast";
  if (elements > UINT64_MAX / DTypeSize(stored_dtype)) return Status(Code::kNoMemory, what + " exceed 64-bit sizes");
  Result<io::CommittedMemory> stored = io::CommittedMemory::Allocate(elements * DTypeSize(stored_dtype));
  RETURN_IF_ERROR(stored.status().WithContext(what));
  casts->push_back(CastShard{&shard, stored_dtype, std::move(stored).value()});
  return Destination{casts->back().stored.data(), -1};
}

// The destinations this rank registered, clipped to what the checkpoint stores. Pieces whose tensor has another
// global shape (allowed mismatch) are zeroed first, so that what the checkpoint lacks reads as zeros.
Result<std::vector<LocalPiece>> LocalPieces(const State& state, const Match& match, const Manifest& manifest,
                                            std::vector<CastShard>* casts) {
  std::vector<LocalPiece> pieces;
  for (size_t i = 0; i < state.tensors().size(); ++i) {
    const TensorShard& shard = state.tensors()[i];
    const TensorRecord* record = match.tensor_records[i];
    if (record == nullptr) continue;
    ASSIGN_OR_RETURN(const Destination destination, DestinationOf(shard, record->dtype, casts));
    const size_t element_size = DTypeSize(record->dtype);
    for (const FlatPiece& piece : shard.pieces) {
      char* dst = destination.base + piece.range_offset * element_size;
      if (record->shape != shard.global_shape)
        RETURN_IF_ERROR(Zero(dst, piece.box.volume() * element_size, destination.device));
      std::optional<Box> wanted = Intersect(piece.box, WholeBox(record->shape));
      if (!wanted) continue;
      pieces.push_back(LocalPiece{static_cast<uint32_t>(record - manifest.tensors.data()), piece.box, *wanted, dst,
                                  destination.device});
    }
  }
  return pieces;
}

// Converts the values read for a cast shard into its buffer; into device memory through a bounded host buffer.
Status ConvertCast(const CastShard& cast) {
  const TensorShard& shard = *cast.shard;
  const uint64_t size = DTypeSize(shard.dtype), stored_size = DTypeSize(cast.stored_dtype);
  const uint64_t elements = shard.data_size / size;
  if (shard.device < 0) {
    CastElements(cast.stored_dtype, shard.dtype, cast.stored.data(), shard.data, elements);
    return Status::Ok();
  }
  const uint64_t block = std::min(elements, kCastBlockBytes / size);
  ASSIGN_OR_RETURN(const io::CommittedMemory host, io::CommittedMemory::Allocate(block * size));
  gpu::DeviceCopier copier;
  for (uint64_t at = 0; at < elements; at += block) {
    const uint64_t n = std::min(block, elements - at);
    CastElements(cast.stored_dtype, shard.dtype, cast.stored.data() + at * stored_size, host.data(), n);
    RETURN_IF_ERROR(copier.ToDevice(shard.device, static_cast<char*>(shard.data) + at * size, host.data(), n * size));
    RETURN_IF_ERROR(copier.Wait());  // the next block reuses `host`
  }
  return Status::Ok();
}

// Without a transport: every chunk a piece overlaps, read by this rank, with the pieces' regions as consumers.
std::vector<ChunkFetch> LocalFetches(const Manifest& manifest, const std::vector<LocalPiece>& pieces) {
  std::vector<ChunkFetch> fetches;
  std::map<std::pair<uint32_t, size_t>, size_t> index;
  for (const LocalPiece& piece : pieces) {
    const TensorRecord& record = manifest.tensors[piece.tensor];
    for (size_t c = 0; c < record.chunks.size(); ++c) {
      std::optional<Box> region = Intersect(record.chunks[c].box, piece.wanted);
      if (!region) continue;
      auto [it, added] = index.emplace(std::make_pair(piece.tensor, c), fetches.size());
      if (added) fetches.push_back(ChunkFetch{&record, c, {}});
      fetches[it->second].consumers.push_back(ChunkConsumer{*region, piece.dst, piece.box, piece.device});
    }
  }
  return fetches;
}

// The device this rank's destinations all lie on, where the context can exchange device memory there; else -1.
int32_t ExchangeDevice(const Context& ctx, const std::vector<LocalPiece>& pieces) {
  if (pieces.empty()) return -1;
  const int device = pieces.front().device;
  for (const LocalPiece& piece : pieces) {
    if (piece.device != device) return -1;
  }
  return ctx.CanExchangeOnDevice(device) ? device : -1;
}

// The data plane of this load, the same on every rank: NCCL when every rank's destinations are device memory it can
// exchange (so pieces go from device to device), else the host transport; null: none, every rank reads alone.
Result<ExchangePlane> ChoosePlane(Context& ctx, const LoadVerdict& verdict, int32_t exchange_device) {
  if (verdict.on_devices && ctx.world_size() > 1) {
    ASSIGN_OR_RETURN(coll::Transport * nccl, ctx.DeviceTransport(exchange_device));
    if (nccl != nullptr) return ExchangePlane{nccl, exchange_device};
  }
  return ExchangePlane{ctx.transport(), -1};
}

// Own reads: every chunk block this rank's pieces need, read by this rank; returns the bytes read.
Result<uint64_t> ReadOwn(Context& ctx, const std::string& dir, const Manifest& manifest,
                         const ChunkDecoder& decode_chunks, const std::vector<LocalPiece>& pieces,
                         const std::function<void(uint64_t)>& on_filled) {
  std::vector<uint32_t> tensors;
  for (const LocalPiece& piece : pieces) tensors.push_back(piece.tensor);
  RETURN_IF_ERROR(decode_chunks(tensors));
  const FetchEngine engine{ctx.arena(), ctx.workers(), ctx.timeout(), on_filled, ctx.direct_load_tuning()};
  return FetchChunks(engine, dir, manifest, LocalFetches(manifest, pieces));
}

// Reads the tensors as the verdict chose: each stored byte once over the transport, or each rank what its own pieces
// need (read_strategy.h); `*done` says which it did, own reads as well where no plane came up (NCCL wanted, but
// not every destination on a device), alike on every rank. Reports the bytes of `pieces` filled as it goes.
Status ReadTensors(Context& ctx, LoadPlanCache& plans, const std::string& dir, const Manifest& manifest,
                   const ChunkDecoder& decode_chunks, const LoadVerdict& verdict, const LoadAsk& ask,
                   const LoadRequest& request, const FileHolders* holders, const std::vector<LocalPiece>& pieces,
                   ProgressReporter& progress, uint64_t* bytes_read, LoadReads* done, ExchangeCounters* exchanged) {
  uint64_t filled = 0;
  auto on_filled = [&](uint64_t bytes) { progress.Update(filled += bytes); };
  *done = LoadReads::kOwn;
  if (verdict.reads == LoadReads::kOwn) {
    ASSIGN_OR_RETURN(*bytes_read, ReadOwn(ctx, dir, manifest, decode_chunks, pieces, on_filled));
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(const ExchangePlane plane, ChoosePlane(ctx, verdict, ask.exchange_device));
  if (plane.transport == nullptr) {
    ASSIGN_OR_RETURN(*bytes_read, ReadOwn(ctx, dir, manifest, decode_chunks, pieces, on_filled));
    return Status::Ok();
  }
  *done = LoadReads::kOnce;
  ASSIGN_OR_RETURN(ExchangeCounters counters, ExchangeLoad(ctx, plans, plane, dir, manifest, decode_chunks, request,
                                                           verdict, holders, pieces, on_filled));
  *bytes_read = counters.bytes_read;
  *exchanged = counters;
  ctx.stats().bytes_sent += counters.bytes_sent;
  ctx.stats().bytes_received += counters.bytes_received;
  ctx.stats().exchange_ns += counters.exchange_ns;
  return Status::Ok();
}

// Fills the objects the state matched, and its common entries with the checkpoint's: under their own keys, and
// under each registered key `key_map` maps to one.
Status ReadObjectsAndCommon(CheckpointFiles& files, State& state, const Match& match, const Manifest& manifest,
                            const KeyMap& key_map) {
  for (size_t i = 0; i < state.objects().size(); ++i) {
    ObjectShard& object = state.objects()[i];
    const ObjectPieceRecord* piece = match.object_pieces[i];
    if (piece == nullptr) continue;
    const std::string what = "object '" + object.key + "' cell " + ShapeToString(object.index);
    ASSIGN_OR_RETURN(std::string bytes, ReadStoredBytes(files, piece->bytes, what));
    if (object.data == nullptr) {
      object.loaded = std::move(bytes);
      object.size = object.loaded.size();
    } else if (bytes.size() != object.size) {
      return Mismatch(what + ": the checkpoint holds " + std::to_string(bytes.size()) + " bytes, the buffer has " +
                      std::to_string(object.size));
    } else {
      std::memcpy(object.data, bytes.data(), bytes.size());
    }
  }
  state.common().clear();
  for (const CommonRecord& c : manifest.common) {
    if (c.is_inline) {
      state.common()[c.key] = c.inline_bytes;
    } else {
      ASSIGN_OR_RETURN(state.common()[c.key], ReadStoredBytes(files, c.stored, "common '" + c.key + "'"));
    }
  }
  // Every mapped value is looked up before any is stored: a map may swap two keys.
  std::vector<std::pair<std::string, std::string>> mapped;
  for (const auto& [key, saved_key] : key_map.pairs()) {
    auto it = state.common().find(saved_key);
    if (it != state.common().end()) mapped.emplace_back(key, it->second);
  }
  for (auto& [key, value] : mapped) state.common()[key] = std::move(value);
  return Status::Ok();
}

// The bytes of tensor data the pieces receive.
uint64_t PieceBytes(const Manifest& manifest, const std::vector<LocalPiece>& pieces) {
  uint64_t bytes = 0;
  for (const LocalPiece& piece : pieces)
    bytes += piece.wanted.volume() * DTypeSize(manifest.tensors[piece.tensor].dtype);
  return bytes;
}

// What own reads of this rank's pieces would read, where rank 0 may choose them by their estimate (AUTO, a transport,
// local storage, every file readable here); else 0, sparing the decoding of chunks the exchange may never touch.
Result<uint64_t> EstimateOwnReads(const LoadAsk& ask, const Manifest& manifest, const ChunkDecoder& decode_chunks,
                                  const std::vector<LocalPiece>& pieces) {
  if (ask.reads_setting != LoadReadsSetting::kAuto || !ask.exchanges || !ask.storage_local || !ask.files_everywhere) {
    return 0;
  }
  std::vector<uint32_t> tensors;
  for (const LocalPiece& piece : pieces) tensors.push_back(piece.tensor);
  RETURN_IF_ERROR(decode_chunks(tensors));
  return OwnReadBytes(LocalFetches(manifest, pieces));
}

// This rank's part of the choice of strategy: its setting, node, storage and what own reads would read.
Status AskForReads(const Context& ctx, const std::string& dir, const Manifest& manifest,
                   const ChunkDecoder& decode_chunks, const LoadSettings& settings,
                   const std::vector<LocalPiece>& pieces, LoadAsk* ask) {
  ASSIGN_OR_RETURN(ask->reads_setting, LoadReadsFromEnv());
  ask->node_name = ctx.node_name();
  ask->exchanges = ctx.exchanges();
  ask->files_everywhere = settings.holders == nullptr;
  ask->storage_local = StorageIsLocal(dir);
  ASSIGN_OR_RETURN(ask->own_bytes, EstimateOwnReads(*ask, manifest, decode_chunks, pieces));
  return Status::Ok();
}

// How a load read its tensors, for the statistics and the INFO line.
struct ReadsOutcome {
  LoadReads reads = LoadReads::kOnce;
  uint64_t amplification_milli = 1000;
  uint64_t rounds = 0;                  // of read once + exchange
  uint64_t arena_buffer_bytes = 0;      // its exchange buffers in the staging arena
  uint64_t committed_buffer_bytes = 0;  // and committed for it
};

// Rank 0's decision in the outcome agreement: the bytes every rank read, summed.
Result<std::string> SumBytesRead(std::vector<std::string> payloads) {
  uint64_t sum = 0;
  for (size_t r = 0; r < payloads.size(); ++r) {
    ByteReader in(payloads[r], "bytes read by rank " + std::to_string(r));
    uint64_t bytes = 0;
    RETURN_IF_ERROR(in.U64(&bytes));
    sum += bytes;
  }
  ByteWriter out;
  out.U64(sum);
  return out.Take();
}

// The outcome agreement, which also sums the tensor bytes every rank read: the amplification is that sum over the
// stored bytes of the tensors asked for (the distinct bytes needed where the ranks ask for whole tensors between
// them, as a restore does). Read once reads each needed stored block once, or once per group of
// LoadPlanOptions::fan_out ranks where more need it: 1 for a restore of fewer ranks.
Result<ReadsOutcome> AgreeOnOutcome(Context& ctx, const Status& read, LoadReads done, const LoadVerdict& verdict,
                                    uint64_t tensor_bytes) {
  ByteWriter mine;
  mine.U64(tensor_bytes);
  ASSIGN_OR_RETURN(const std::string summed,
                   DecideAtRoot(ctx.control(), "load (outcome)", read, mine.data(), SumBytesRead));
  ByteReader in(summed, "bytes read by every rank");
  uint64_t sum = 0;
  RETURN_IF_ERROR(in.U64(&sum));
  return ReadsOutcome{done, AmplificationMilli(sum, verdict.needed_bytes)};
}

// The load itself; Load reports how it ended. `*bytes_read`: what this rank read from storage.
// Every rank takes part in the collective steps even when its own source could not be opened (`opened` says why).
// `decode_chunks` decodes the chunks of the source's tensors where they are not yet.
Status LoadAndAgree(Context& ctx, LoadPlanCache& plans, State& state, const CheckpointSource* source,
                    const ChunkDecoder& decode_chunks, const Status& opened, const std::string& path,
                    const LoadSettings& settings, ProgressReporter& progress, uint64_t* bytes_read,
                    ReadsOutcome* outcome) {
  const std::string context = "loading '" + path + "'";
  const std::string& dir = source != nullptr ? source->dir : path;
  const Manifest* manifest = source != nullptr ? &source->manifest : nullptr;
  Result<Match> match = source != nullptr ? MatchState(state, *manifest, settings.key_map) : Result<Match>(opened);
  Status local = match.status();
  if (local.ok()) {
    local = Judge(ctx, settings.missing_keys, match->missing.size(), [&] { return MissingMessage(*match, *manifest); });
  }
  std::vector<CastShard> casts;
  std::vector<LocalPiece> pieces;
  LoadAsk mine;
  LoadRequest request;
  if (local.ok()) {
    Result<std::vector<LocalPiece>> local_pieces = LocalPieces(state, *match, *manifest, &casts);
    local = local_pieces.status();
    if (local.ok()) pieces = std::move(local_pieces).value();
  }
  if (local.ok()) {
    mine.checkpoint_id = manifest->checkpoint_id;
    mine.requested = match->requested;
    if (ctx.exchanges()) {
      request = MakeLoadRequest(ctx.rank(), ctx.node_name(), pieces);
      const std::string encoded = EncodeLoadRequest(request);
      // A plan made for other holders of the files is not reused.
      mine.request_digest =
          io::Checksum(encoded.data(), encoded.size()) ^ (settings.holders ? settings.holders->digest() : 0);
      mine.exchange_device = ExchangeDevice(ctx, pieces);
      mine.cached_plan = plans.key;
      local = DecodeChunksOfCachedPlan(ctx.rank(), plans, *manifest, decode_chunks);
    }
  }
  if (local.ok()) local = AskForReads(ctx, dir, *manifest, decode_chunks, settings, pieces, &mine);
  // Rank 0 judges the keys nobody asked for, and alone warns of them; a warning leaves the missing keys to their
  // own strictness (silent under CKPT_STRICT_IGNORE).
  auto judge_unexpected = [&](const std::vector<std::string>& unexpected) {
    const bool refusal = settings.unexpected_keys == Strictness::kFail;
    return Judge(ctx, settings.unexpected_keys, unexpected.size(),
                 [&] { return UnexpectedMessage(unexpected, refusal ? match->missing : std::vector<std::string>{}); });
  };
  Result<LoadVerdict> verdict = AgreeOnLoad(ctx.control(), local, mine, manifest, judge_unexpected);
  RETURN_IF_ERROR(verdict.status().WithContext(context));
  if (!verdict->reads_note.empty() && ctx.rank() == 0) {
    ctx.Log(LogLevel::kWarning, context + ": " + verdict->reads_note);
  }

  progress.Enter(Phase::kReading, 0, PieceBytes(*manifest, pieces));
  uint64_t tensor_bytes = 0;
  ExchangeCounters exchanged;
  LoadReads done = verdict->reads;
  Status read = ReadTensors(ctx, plans, dir, *manifest, decode_chunks, *verdict, mine, request, settings.holders.get(),
                            pieces, progress, &tensor_bytes, &done, &exchanged);
  for (const CastShard& cast : casts) {
    if (read.ok()) read = ConvertCast(cast);
  }
  CheckpointFiles files(dir, *manifest);
  if (read.ok()) read = ReadObjectsAndCommon(files, state, *match, *manifest, settings.key_map);
  *bytes_read = files.bytes_read() + tensor_bytes;
  ctx.stats().bytes_read += *bytes_read;
  Result<ReadsOutcome> agreed = AgreeOnOutcome(ctx, read, done, *verdict, tensor_bytes);
  RETURN_IF_ERROR(agreed.status().WithContext(context));
  *outcome = *agreed;
  outcome->rounds = exchanged.rounds;
  outcome->arena_buffer_bytes = exchanged.arena_buffer_bytes;
  outcome->committed_buffer_bytes = exchanged.committed_buffer_bytes;
  ctx.stats().last_load_reads = static_cast<uint64_t>(outcome->reads);
  ctx.stats().last_load_read_amplification_milli = outcome->amplification_milli;
  return Status::Ok();
}

// A value in thousandths with two decimals: 1.00.
std::string DescribeMilli(uint64_t milli) {
  const uint64_t hundredths = (milli + 5) / 10;
  const std::string cents = std::to_string(hundredths % 100);
  return std::to_string(hundredths / 100) + "." + (cents.size() < 2 ? "0" : "") + cents;
}

// Where a read-once load's host exchange buffers came from, for its INFO line; empty where it had none.
std::string ExchangeBuffersNamed(const ReadsOutcome& reads) {
  if (reads.arena_buffer_bytes == 0 && reads.committed_buffer_bytes == 0) return "";
  return ", exchange buffers " + DescribeBytes(reads.arena_buffer_bytes) + " in the staging arena and " +
         DescribeBytes(reads.committed_buffer_bytes) + " committed";
}

// The load with its progress reports and its INFO line.
// `tier` names where the bytes come from ("storage", "memory").
Status LoadReported(Context& ctx, LoadPlanCache& plans, State& state, const CheckpointSource* source,
                    const ChunkDecoder& decode_chunks, const Status& opened, const std::string& path,
                    const LoadSettings& settings, const std::string& tier = "storage") {
  const int64_t started = NowNs();
  ProgressReporter progress(settings.progress);
  progress.Enter(Phase::kPlanning, 0, 0);
  uint64_t bytes_read = 0;
  ReadsOutcome reads;
  const Status loaded =
      LoadAndAgree(ctx, plans, state, source, decode_chunks, opened, path, settings, progress, &bytes_read, &reads);
  if (!loaded.ok()) {
    progress.Enter(Phase::kFailed, progress.done(), progress.total());
    return loaded;
  }
  progress.Enter(Phase::kLoaded, progress.total(), progress.total());
  ctx.Log(LogLevel::kInfo, "loaded '" + path + "': " + DescribeThroughput(progress.total(), NowNs() - started) +
                               " into this rank; read " + DescribeBytes(bytes_read) + " from " + tier + " (" +
                               LoadReadsName(reads.reads) + ", read amplification " +
                               DescribeMilli(reads.amplification_milli) +
                               (reads.reads == LoadReads::kOnce
                                    ? ExchangeBuffersNamed(reads) + ", " + std::to_string(reads.rounds) + " rounds"
                                    : "") +
                               ")");
  return Status::Ok();
}

// The decoder of a source whose chunks are all decoded, or of none.
Status NothingToDecode(const std::vector<uint32_t>&) { return Status::Ok(); }

}  // namespace

Status Load(Context& ctx, LoadPlanCache& plans, MemoryAttachment& attachment, State& state, const std::string& path,
            const LoadSettings& settings) {
  ASSIGN_OR_RETURN(CopyChoice copy, ChooseCopy(ctx, attachment, path));
  // Each rank decodes only the chunks of the tensors it plans or reads: on a large job most of the manifest.
  Result<CheckpointSource> source = OpenCheckpointSource(copy.dir, ChunkDecoding::kOnDemand);
  LoadSettings used = settings;
  if (copy.partial) {
    Result<std::shared_ptr<const FileHolders>> holders = ShareHoldings(
        ctx, attachment, copy, source.ok() ? &source->manifest : nullptr, source.status(),
        source.ok() ? FilesReadAlone(state, source->manifest, settings.key_map) : std::vector<uint32_t>{});
    if (holders.ok()) {
      used.holders = std::move(holders).value();
    } else {
      if (ctx.rank() == 0) {
        ctx.Log(LogLevel::kWarning,
                "loading '" + path + "' from storage: the memory tier: " + holders.status().message());
      }
      copy = CopyChoice{path, false, false, std::nullopt};
      source = OpenCheckpointSource(path, ChunkDecoding::kOnDemand);
    }
  }
  const std::string tier = copy.from_memory ? "memory" : "storage";
  if (!source.ok()) return LoadReported(ctx, plans, state, nullptr, NothingToDecode, source.status(), path, used, tier);
  RETURN_IF_ERROR(LoadReported(ctx, plans, state, &*source, ChunkDecoderOf(*source), Status::Ok(), path, used, tier));
  return copy.from_memory ? ReassignCopy(ctx, attachment, copy, source->manifest, used.holders.get()) : Status::Ok();
}

Status Load(Context& ctx, LoadPlanCache& plans, State& state, const CheckpointSource& source, const std::string& path,
            const LoadSettings& settings) {
  if (source.encoded_chunks) {
    return InvalidArgument("loading '" + path + "': the source was opened with chunks left encoded");
  }
  return LoadReported(ctx, plans, state, &source, NothingToDecode, Status::Ok(), path, settings);
}

}  // namespace ckpt::runtime
