#include "runtime/load/exchange_load.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "common/bytes.h"
#include "common/fault_injection.h"
#include "gpu/device_copy.h"
#include "io/checksum.h"
#include "io/committed_memory.h"
#include "io/staging_arena.h"
#include "runtime/core/agreement.h"
#include "runtime/core/dtype.h"
#include "runtime/load/chunk_fetcher.h"
#include "runtime/load/load_partition.h"

namespace ckpt::runtime {
namespace {

using PiecesByTensor = std::map<uint32_t, std::vector<const LocalPiece*>>;

// Where a region that reached this rank goes: every registered piece it overlaps.
template <typename Fn>
void ForEachDestination(const PiecesByTensor& pieces, uint32_t tensor, const Box& region, Fn&& fn) {
  auto it = pieces.find(tensor);
  if (it == pieces.end()) return;
  for (const LocalPiece* piece : it->second) {
    if (std::optional<Box> part = Intersect(region, piece->wanted)) fn(*piece, *part);
  }
}

PiecesByTensor ByTensor(const std::vector<LocalPiece>& pieces) {
  PiecesByTensor by_tensor;
  for (const LocalPiece& piece : pieces) by_tensor[piece.tensor].push_back(&piece);
  return by_tensor;
}

// The piece a transfer can be received straight into: its region lies in one registered piece only, whole, in the
// memory the plane moves (host memory, or device memory of the plane's `device`). Null otherwise.
const LocalPiece* SolePiece(const LoadPlan& plan, const PiecesByTensor& pieces, int device, const Transfer& t) {
  const LocalPiece* only = nullptr;
  int overlapping = 0;
  ForEachDestination(pieces, plan.reads[t.read].tensor, t.region, [&](const LocalPiece& piece, const Box& part) {
    ++overlapping;
    if (part == t.region) only = &piece;
  });
  return overlapping == 1 && only != nullptr && only->device == device ? only : nullptr;
}

// Where a transfer can be received in place in one contiguous run (SolePiece, and one run there): the piece, and the
// run's offset in it.
std::optional<std::pair<const LocalPiece*, uint64_t>> InPlaceRun(const LoadPlan& plan, const Manifest& manifest,
                                                                 const PiecesByTensor& pieces, int device,
                                                                 const Transfer& t) {
  const LocalPiece* only = SolePiece(plan, pieces, device, t);
  if (only == nullptr) return std::nullopt;
  const std::optional<uint64_t> offset =
      SingleRunOffset(only->box, t.region, DTypeSize(manifest.tensors[plan.reads[t.read].tensor].dtype));
  if (!offset) return std::nullopt;
  return std::make_pair(only, *offset);
}

// A region of a wider piece (the columns of a chunk saved by another tensor parallelism, say) lands in several runs.
// Where the plane's transport scatters a transfer over them (Transport::Scatters), it takes at most this many runs
// of at least this many bytes each, and the round needs no buffer for them. An iovec per run costs no more than the
// copy out of a buffer it saves from 1 KiB up: 256 MiB pulled by process_vm_readv into runs of 1, 3 and 16 KiB took
// 0.96, 0.89 and 0.82 x the time of a pull into a buffer and its copy into the runs; runs of 512 bytes, 1.10 x. The
// list of runs takes 16 bytes each, under 2% of the bytes they hold.
constexpr uint64_t kMaxScatterRuns = 1 << 16;
constexpr uint64_t kMinScatterRunBytes = 1 << 10;

// Whether the load scatters transfers over `plane`: where its transport can, unless a test turns it off.
bool Scatters(const ExchangePlane& plane) { return plane.transport->Scatters() && !fault::NoScatter(); }

// Where a transfer can be received in place scattered over several runs of one piece (SolePiece, within the bounds
// above) where `scatter`: the piece. Null otherwise, and for a region that lands in one run (InPlaceRun).
const LocalPiece* ScatterPiece(const LoadPlan& plan, const Manifest& manifest, const PiecesByTensor& pieces, int device,
                               bool scatter, const Transfer& t) {
  if (!scatter) return nullptr;
  const LocalPiece* only = SolePiece(plan, pieces, device, t);
  if (only == nullptr) return nullptr;
  const RunShape shape = RunsOf(only->box, t.region, DTypeSize(manifest.tensors[plan.reads[t.read].tensor].dtype));
  const bool fits = shape.runs > 1 && shape.runs <= kMaxScatterRuns && shape.run_bytes >= kMinScatterRunBytes;
  return fits ? only : nullptr;
}

// Read -> the regions its local copies fill on `rank`, where `rank` reads it.
std::multimap<size_t, const Box*> KeptRegions(const LoadPlan& plan, int rank) {
  std::multimap<size_t, const Box*> kept;
  for (const Transfer& copy : plan.local_copies) {
    if (plan.reads[copy.read].reader == rank) kept.emplace(copy.read, &copy.region);
  }
  return kept;
}

// Whether a transfer `rank` sends can be sent from its own destination: a local copy of the same read fills the
// whole region there (before the exchange, as reads that feed sends run first), in memory the plane moves, in one
// contiguous run or, where `scatter`, in runs of a wider piece (ScatterPiece).
bool SentFromKept(const LoadPlan& plan, const Manifest& manifest, const PiecesByTensor& pieces, int device,
                  bool scatter, const Transfer& t, const std::multimap<size_t, const Box*>& kept_regions) {
  const auto [first, last] = kept_regions.equal_range(t.read);
  for (auto it = first; it != last; ++it) {
    if (Contains(*it->second, t.region)) {
      return InPlaceRun(plan, manifest, pieces, device, t).has_value() ||
             ScatterPiece(plan, manifest, pieces, device, scatter, t) != nullptr;
    }
  }
  return false;
}

// Where the plane's transport scatters host memory, a reader holds each small region it sends (those packed with a
// pair's other small transfers) once in its send buffers, however many consumers it goes to, and gathers each pair's
// packed message from there. Packed per pair, a replicated tensor's small pieces (a layer norm's, its optimizer
// states') took a copy per consumer: in bench/scale's job of 1,024 ranks without a distributed optimizer, 900 MB of
// a reader's send buffers, which set its rounds.
bool SharesSmallSends(int device, bool scatter) { return scatter && device < 0; }

// A packed message gathered from shared small regions takes two runs per transfer at most (its bytes, the alignment
// padding after them); a pair with more small transfers than this allows is packed by copy.
constexpr size_t kMaxGatheredTransfers = kMaxScatterRuns / 2;

// Bounds of a round's reads and of its exchange buffers (each).
constexpr uint64_t kMinRoundBytes = 64ull << 20;
constexpr uint64_t kMaxRoundBytes = 128ull << 20;
// The exchange buffers come from the staging arena only where it holds this many round budgets: the two rounds in
// flight take at most two, and the rounds' reads keep at least as much.
constexpr uint64_t kArenaRoundBudgets = 4;

// Rank 0's decision on the number of rounds: as many as the reader that needs the most.
Result<std::string> MostRounds(std::vector<std::string> payloads) {
  uint32_t most = 0;
  for (size_t r = 0; r < payloads.size(); ++r) {
    ByteReader in(payloads[r], "rounds of rank " + std::to_string(r));
    uint32_t rounds = 0;
    RETURN_IF_ERROR(in.U32(&rounds));
    RETURN_IF_ERROR(in.ExpectDone());
    most = std::max(most, rounds);
  }
  ByteWriter out;
  out.U32(most);
  return out.Take();
}

// This rank's rounds of the job's plan (runtime/load/load_partition.h), planned with the other ranks unless every rank
// still holds the plan of `verdict.plan_key`. Every step that can fail on one rank is agreed, so that all ranks stop
// together. Rounds bound what takes memory, as `pieces` and the plane tell (BufferlessTransfers); a reused
// plan was made for the same boxes, and pieces that moved to another device change only the memory a round takes.
Result<std::shared_ptr<const std::vector<LoadPlan>>> RoundsFor(
    Context& ctx, LoadPlanCache& cache, const Manifest& manifest, const ChunkDecoder& decode_chunks,
    const LoadRequest& mine, const LoadVerdict& verdict, const FileHolders* holders, uint64_t max_round_bytes,
    const std::vector<LocalPiece>& pieces, const ExchangePlane& plane) {
  if (verdict.reuse_plan && cache.key == verdict.plan_key && cache.rounds) return cache.rounds;
  cache = LoadPlanCache{};
  coll::ControlPlane& control = ctx.control();
  const int world = ctx.world_size();
  ASSIGN_OR_RETURN(std::vector<std::string> incoming,
                   control.AllToAllV(PartitionLoadRequest(mine, manifest, world), control.timeout()));
  Result<std::vector<std::string>> parts = PlanOwnedTensors(incoming, manifest, ctx.rank(), decode_chunks, holders);
  incoming = {};
  RETURN_IF_ERROR(Agree(control, "load (plan)", parts.status()));
  ASSIGN_OR_RETURN(std::vector<std::string> routed, control.AllToAllV(std::move(parts).value(), control.timeout()));
  Result<LoadPlan> view = MergeLoadPlan(routed, ctx.rank(), manifest, decode_chunks);
  routed = {};
  RETURN_IF_ERROR(Agree(control, "load (plan parts)", view.status()));
  const Bufferless bufferless = BufferlessTransfers(*view, ctx.rank(), manifest, pieces, plane.device, Scatters(plane));
  std::vector<std::string> offered = ReaderShares(*view, ctx.rank(), max_round_bytes, bufferless);
  ASSIGN_OR_RETURN(std::vector<std::string> shares, control.AllToAllV(std::move(offered), control.timeout()));
  Result<std::vector<uint32_t>> placed = PlaceOwnReads(*view, ctx.rank(), shares, max_round_bytes, bufferless);
  uint32_t needed = 0;
  if (placed.ok()) {
    for (size_t i = 0; i < view->reads.size(); ++i) {
      if (view->reads[i].reader == ctx.rank()) needed = std::max(needed, (*placed)[i] + 1);
    }
  }
  ByteWriter mine_needed;
  mine_needed.U32(needed);
  ASSIGN_OR_RETURN(std::string decided,
                   DecideAtRoot(control, "load (rounds)", placed.status(), mine_needed.data(), MostRounds));
  ByteReader agreed(decided, "rounds agreed on rank 0");
  uint32_t round_count = 0;
  RETURN_IF_ERROR(agreed.U32(&round_count));
  ASSIGN_OR_RETURN(std::vector<std::string> transfer_rounds,
                   control.AllToAllV(TransferRounds(*view, ctx.rank(), *placed), control.timeout()));
  Result<std::vector<LoadPlan>> rounds =
      CutIntoRounds(*view, ctx.rank(), std::move(placed).value(), transfer_rounds, round_count);
  RETURN_IF_ERROR(Agree(control, "load (rounds cut)", rounds.status()));
  cache.rounds = std::make_shared<const std::vector<LoadPlan>>(std::move(rounds).value());
  cache.key = verdict.plan_key;
  cache.checkpoint_id = manifest.checkpoint_id;
  return cache.rounds;
}

// The send and receive buffers of every other round of a load: one block of host memory (a region of the staging
// arena, or committed at once, not page by page as the exchange writes it), or of device memory on the plane's device,
// kept from round to round so that it is committed (or the device memory allocated) once per load rather than once
// per round.
class RoundMemory {
 public:
  // `arena`: where host blocks come from while it has room at once (null: always fresh committed memory).
  RoundMemory(int device, io::StagingArena* arena) : device_(device), arena_(arena) {}
  ~RoundMemory() { Drop(); }
  RoundMemory(const RoundMemory&) = delete;
  RoundMemory& operator=(const RoundMemory&) = delete;

  // At least `bytes`, not value-initialised; what an earlier round was given is invalidated.
  Result<char*> Reserve(uint64_t bytes) {
    if (bytes <= capacity_) return base_;
    Drop();
    if (device_ >= 0) {
      ASSIGN_OR_RETURN(gpu::CudaRuntime * cuda, gpu::CudaRuntime::Get());
      ASSIGN_OR_RETURN(device_memory_, gpu::ScopedDeviceMemory::Allocate(*cuda, device_, bytes));
      base_ = device_memory_.get();
    } else if (Result<io::ArenaRegion> region = TakeFromArena(bytes); region.ok()) {
      region_ = *region;
      base_ = arena_->data() + region_.offset;
      arena_bytes_ += bytes;
    } else {
      Result<io::CommittedMemory> committed = io::CommittedMemory::Allocate(bytes);
      if (!committed.ok()) {
        return Status(Code::kNoMemory, "no memory for " + std::to_string(bytes) +
                                           " bytes of load exchange buffers: " + committed.status().message());
      }
      host_ = std::move(committed).value();
      base_ = host_.data();
      committed_bytes_ += bytes;
    }
    capacity_ = bytes;
    return base_;
  }

  // The host bytes reserved so far in the arena, and committed for the load.
  uint64_t arena_bytes() const { return arena_bytes_; }
  uint64_t committed_bytes() const { return committed_bytes_; }

 private:
  // A region of the arena now, without waiting for one: a save in flight keeps what it holds.
  Result<io::ArenaRegion> TakeFromArena(uint64_t bytes) {
    if (arena_ == nullptr) return Status(Code::kUnsupported, "no arena for the exchange buffers");
    return arena_->Allocate(bytes, std::chrono::milliseconds(0));
  }

  void Drop() {
    if (region_.size > 0) arena_->Release(region_);
    region_ = io::ArenaRegion{};
    host_ = io::CommittedMemory();
    device_memory_ = gpu::ScopedDeviceMemory();
    base_ = nullptr;
    capacity_ = 0;
  }

  const int device_;
  io::StagingArena* const arena_;
  uint64_t arena_bytes_ = 0;
  uint64_t committed_bytes_ = 0;
  uint64_t capacity_ = 0;
  char* base_ = nullptr;
  io::ArenaRegion region_;
  io::CommittedMemory host_;
  gpu::ScopedDeviceMemory device_memory_;
};

// Buffers are carved out of the round's memory at this alignment: enough for any element type and for the copy
// engines of a GPU.
constexpr uint64_t kSlotAlignment = 256;

// Offsets of the buffers a round needs, decided before the memory is reserved.
class SlotLayout {
 public:
  // The offset of a new buffer of `bytes`.
  uint64_t Add(uint64_t bytes) {
    const uint64_t offset = total_;
    total_ += (bytes + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment;
    return offset;
  }
  uint64_t total() const { return total_; }

 private:
  uint64_t total_ = 0;
};

// What reaches this rank in one message, still to be copied into its destinations: transfers at their offsets.
struct Arrival {
  size_t message = 0;                                  // index into the round's receives
  std::vector<std::pair<size_t, uint64_t>> transfers;  // (index into LoadPlan::transfers, offset in the message)
};

class Round {
 public:
  Round(Context& ctx, const ExchangePlane& exchange, RoundMemory& memory, const std::string& path,
        const Manifest& manifest, const LoadPlan& plan, size_t index, const PiecesByTensor& pieces)
      : ctx_(ctx),
        exchange_(exchange),
        memory_(memory),
        path_(path),
        manifest_(manifest),
        plan_(plan),
        index_(index),
        tag_(index & coll::kMaxTransferTag),
        pieces_(pieces) {}

  // Lays out the round's buffers and reads what feeds its sends (Prepare); not collective, so that it can run while
  // the round before exchanges. Any exception becomes the status: it may run off the calling thread.
  Status ReadAhead() {
    try {
      return Prepare();
    } catch (const std::exception& e) {
      return Internal(std::string("reading a load round's bytes to send: ") + e.what());
    }
  }

  // After every rank agreed that its ReadAhead succeeded: the exchange, with the reads that only this rank keeps on
  // a thread of their own while the exchange moves the others' bytes (issue #14: a round read everything, then
  // exchanged). Not agreed yet: the caller agrees on the outcome.
  Status ExchangeAndKeep() {
    Status kept;
    std::thread keeping([&] { kept = FetchKept(); });
    const Status exchanged = ExchangeAndUnpack();
    keeping.join();
    return exchanged.ok() ? kept : exchanged;
  }

  // What the round did on this rank; complete once ExchangeAndKeep returned.
  const ExchangeCounters& counters() const { return counters_; }

 private:
  Status Fetch(const std::vector<ChunkFetch>& fetches) {
    if (fetches.empty()) return Status::Ok();
    const FetchEngine engine{ctx_.arena(), ctx_.workers(), ctx_.timeout(), {}, ctx_.direct_load_tuning()};
    ASSIGN_OR_RETURN(uint64_t read, FetchChunks(engine, path_, manifest_, fetches));
    counters_.bytes_read += read;
    return Status::Ok();
  }

  // The reads whose bytes stay on this rank alone, straight into its destinations; off the calling thread, so any
  // exception becomes the status.
  Status FetchKept() {
    try {
      return Fetch(kept_fetches_);
    } catch (const std::exception& e) {
      return Internal(std::string("reading this rank's own share of the load: ") + e.what());
    }
  }

  // Lays out the buffers, then reads the chunks that feed this rank's sends, into send buffers (packed per peer, or
  // one buffer per large region whatever the number of peers it goes to) and, where this rank needs them too, its
  // destinations; a large region this rank keeps whole in its own destination is sent from there (KeptSource).
  // The reads only this rank needs are kept for FetchKept.
  Status Prepare() {
    SlotLayout layout;
    std::vector<ChunkFetch> fetches;
    const std::multimap<size_t, const Box*> kept_regions = KeptRegions(plan_, ctx_.rank());
    std::map<size_t, size_t> fetch_of_read;
    auto fetch_for = [&](size_t read) -> ChunkFetch& {
      auto [it, added] = fetch_of_read.emplace(read, fetches.size());
      if (added) {
        const ChunkRead& r = plan_.reads[read];
        fetches.push_back(ChunkFetch{&manifest_.tensors[r.tensor], r.chunk, {}});
      }
      return fetches[it->second];
    };
    for (const Transfer& copy : plan_.local_copies) {
      if (plan_.reads[copy.read].reader != ctx_.rank()) continue;
      ForEachDestination(
          pieces_, plan_.reads[copy.read].tensor, copy.region, [&](const LocalPiece& piece, const Box& part) {
            fetch_for(copy.read).consumers.push_back(ChunkConsumer{part, piece.dst, piece.box, piece.device});
          });
    }
    std::vector<std::pair<size_t, uint64_t>> packed_fills;  // (transfer, offset of its bytes)
    std::set<size_t> feeds_sends;                           // the reads whose bytes this rank sends
    std::map<std::pair<size_t, Box>, SendSource> shared_sends;
    const bool share_small = SharesSmallSends(exchange_.device, Scatters(exchange_));
    std::map<std::pair<size_t, Box>, uint64_t> small_slots;  // shared small regions: offset in their area
    uint64_t small_area = 0;
    std::vector<std::pair<size_t, size_t>> small_fills;  // (transfer, its region's slot)
    const std::vector<PeerBatch> outgoing = OutgoingBatches(plan_, ctx_.rank());
    std::vector<std::pair<size_t, const PeerBatch*>> gathered;  // (send, its batch): runs made once memory is there
    for (const PeerBatch& batch : outgoing) {
      if (batch.packed_bytes > 0 && share_small && batch.packed.size() <= kMaxGatheredTransfers) {
        for (size_t index : batch.packed) {
          const Transfer& t = plan_.transfers[index];
          const auto [slot, added] = small_slots.emplace(std::make_pair(size_t{t.read}, t.region), small_area);
          if (added) {
            small_area += TransferBufferBytes(plan_, t);
            small_fills.emplace_back(index, slot->second);
          }
        }
        gathered.emplace_back(sends_.size(), &batch);
        AddSend(batch.peer, nullptr, 0, batch.packed_bytes);
      } else if (batch.packed_bytes > 0) {
        const uint64_t base = layout.Add(batch.packed_bytes);
        for (size_t j = 0; j < batch.packed.size(); ++j)
          packed_fills.emplace_back(batch.packed[j], base + batch.offsets[j]);
        AddSend(batch.peer, nullptr, base, batch.packed_bytes);
        ZeroGapsLater(batch, base);
      }
      for (size_t index : batch.separate) {
        const Transfer& t = plan_.transfers[index];
        auto [it, added] = shared_sends.emplace(std::make_pair(size_t{t.read}, t.region), SendSource{});
        if (added) {
          it->second = KeptSource(t, kept_regions);
          if (it->second.kept == nullptr) {
            it->second.offset = layout.Add(t.bytes);
            packed_fills.emplace_back(index, it->second.offset);
          } else {
            feeds_sends.insert(t.read);  // the reads of packed_fills are added below
          }
        }
        AddSend(batch.peer, it->second.kept, it->second.offset, t.bytes, it->second.runs);
      }
    }
    const uint64_t small_base = small_area > 0 ? layout.Add(small_area) : 0;
    for (const auto& [index, slot] : small_fills) packed_fills.emplace_back(index, small_base + slot);
    for (const PeerBatch& batch : IncomingBatches(plan_, ctx_.rank())) PlanReceives(batch, layout);

    ASSIGN_OR_RETURN(char* base, memory_.Reserve(layout.total()));
    for (const auto& [send, batch] : gathered) {
      sends_[send].runs = GatheredRuns(*batch, base + small_base, small_slots);
      sends_[send].data = sends_[send].runs.front().data;
    }
    for (size_t i = 0; i < sends_.size(); ++i) {
      if (sends_[i].data == nullptr) sends_[i].data = base + send_offsets_[i];
    }
    for (size_t i = 0; i < recvs_.size(); ++i) {
      if (recvs_[i].data == nullptr) recvs_[i].data = base + receive_offsets_[i];
    }
    for (const auto& [begin, end] : gaps_) std::memset(base + begin, 0, end - begin);
    for (const auto& [index, offset] : packed_fills) {
      const Transfer& t = plan_.transfers[index];
      fetch_for(t.read).consumers.push_back(ChunkConsumer{t.region, base + offset, t.region, exchange_.device});
      feeds_sends.insert(t.read);
    }
    std::vector<ChunkFetch> sending;
    for (const auto& [read, index] : fetch_of_read) {
      (feeds_sends.count(read) ? sending : kept_fetches_).push_back(std::move(fetches[index]));
    }
    return Fetch(sending);
  }

  // Sends and receives are laid out before the round's memory is reserved: their buffers are offsets until then.
  // `kept`: the bytes are sent from this rank's own destination, where its reads put them before the exchange (its
  // first run where `runs` scatter them).
  void AddSend(int peer, const char* kept, uint64_t offset, uint64_t bytes, std::vector<coll::MemoryRun> runs = {}) {
    sends_.push_back(coll::TransferSend{peer, kept, bytes, tag_, std::move(runs)});
    send_offsets_.push_back(offset);
    counters_.bytes_sent += bytes;
  }

  // A pair's packed message gathered from the shared small regions at `area` (their offsets in `slots`), its
  // alignment padding from zeros: the same bytes as the buffer packed by copy.
  std::vector<coll::MemoryRun> GatheredRuns(const PeerBatch& batch, char* area,
                                            const std::map<std::pair<size_t, Box>, uint64_t>& slots) const {
    static char zeros[kTransferAlignment] = {};
    std::vector<coll::MemoryRun> runs;
    uint64_t at = 0;
    auto pad_to = [&](uint64_t offset) {
      for (; at < offset; at += runs.back().size) {
        runs.push_back(coll::MemoryRun{zeros, std::min<uint64_t>(offset - at, sizeof zeros)});
      }
    };
    for (size_t j = 0; j < batch.packed.size(); ++j) {
      const Transfer& t = plan_.transfers[batch.packed[j]];
      pad_to(batch.offsets[j]);
      runs.push_back(coll::MemoryRun{area + slots.at(std::make_pair(size_t{t.read}, t.region)), t.bytes});
      at += t.bytes;
    }
    pad_to(batch.packed_bytes);
    return runs;
  }

  // The alignment gaps between packed pieces of host memory are zeroed so that no stale memory leaves the process.
  // In device memory they stay as they are: nothing of the host's is there, and the receiver never reads them.
  void ZeroGapsLater(const PeerBatch& batch, uint64_t base) {
    if (exchange_.device >= 0) return;
    for (size_t j = 0; j < batch.packed.size(); ++j) {
      const uint64_t end = batch.offsets[j] + plan_.transfers[batch.packed[j]].bytes;
      const uint64_t next = j + 1 < batch.packed.size() ? batch.offsets[j + 1] : batch.packed_bytes;
      if (next > end) gaps_.emplace_back(base + end, base + next);
    }
  }

  // The receives of one peer's messages: the packed one into the round's memory, each separate one straight into
  // its destination where it lands there whole and contiguously, else into the round's memory.
  void PlanReceives(const PeerBatch& batch, SlotLayout& layout) {
    if (batch.packed_bytes > 0) {
      Arrival arrival{recvs_.size(), {}};
      for (size_t j = 0; j < batch.packed.size(); ++j)
        arrival.transfers.emplace_back(batch.packed[j], batch.offsets[j]);
      arrivals_.push_back(std::move(arrival));
      AddReceive(batch.peer, nullptr, layout.Add(batch.packed_bytes), batch.packed_bytes);
    }
    for (size_t index : batch.separate) {
      const Transfer& t = plan_.transfers[index];
      char* in_place = InPlaceDestination(t);
      std::vector<coll::MemoryRun> runs = in_place ? std::vector<coll::MemoryRun>() : ScatteredDestination(t);
      if (!runs.empty()) in_place = static_cast<char*>(runs.front().data);
      if (in_place == nullptr) arrivals_.push_back(Arrival{recvs_.size(), {{index, 0}}});
      AddReceive(batch.peer, in_place, in_place ? 0 : layout.Add(t.bytes), t.bytes, std::move(runs));
    }
  }

  // `in_place`: the destination itself (its first run where `runs` scatter it); null: the round's memory at
  // `offset`.
  void AddReceive(int peer, char* in_place, uint64_t offset, uint64_t bytes, std::vector<coll::MemoryRun> runs = {}) {
    recvs_.push_back(coll::TransferRecv{peer, in_place, bytes, tag_, std::move(runs)});
    receive_offsets_.push_back(offset);
    counters_.bytes_received += bytes;
  }

  // Where a transfer this rank sends can be sent from: its own destination (SentFromKept), in one run or scattered.
  // The read then needs no send buffer, and with its destination as its only consumer it can be read straight there
  // (a replicated tensor's share: one copy less, and none through the staging arena). A null `kept`: from a buffer.
  struct SendSource {
    const char* kept = nullptr;  // this rank's own destination (its first run where `runs` scatter it), or null
    uint64_t offset = 0;         // where `kept` is null: the bytes' place in the round's memory
    std::vector<coll::MemoryRun> runs;
  };
  SendSource KeptSource(const Transfer& t, const std::multimap<size_t, const Box*>& kept_regions) const {
    if (!SentFromKept(plan_, manifest_, pieces_, exchange_.device, Scatters(exchange_), t, kept_regions)) {
      return {};
    }
    if (const char* run = InPlaceDestination(t)) return SendSource{run, 0, {}};
    std::vector<coll::MemoryRun> runs = ScatteredDestination(t);
    return SendSource{static_cast<const char*>(runs.front().data), 0, std::move(runs)};
  }

  // Where a transfer can be received in place (InPlaceRun), or null.
  char* InPlaceDestination(const Transfer& t) const {
    const auto run = InPlaceRun(plan_, manifest_, pieces_, exchange_.device, t);
    return run ? run->first->dst + run->second : nullptr;
  }

  // The runs of this rank's destination a transfer lands in or is sent from, scattered (ScatterPiece), in the order
  // of its bytes; empty where it cannot be.
  std::vector<coll::MemoryRun> ScatteredDestination(const Transfer& t) const {
    const LocalPiece* piece = ScatterPiece(plan_, manifest_, pieces_, exchange_.device, Scatters(exchange_), t);
    std::vector<coll::MemoryRun> runs;
    if (piece == nullptr) return runs;
    const size_t element_size = DTypeSize(manifest_.tensors[plan_.reads[t.read].tensor].dtype);
    ForEachRun(t.region, piece->box, t.region, element_size, [&](uint64_t, uint64_t dst_offset, uint64_t bytes) {
      runs.push_back(coll::MemoryRun{piece->dst + dst_offset, bytes});
    });
    return runs;
  }

  Status ExchangeAndUnpack() {
    // Tests make one rank die here, between the reads and the exchange, to check that its peers fail cleanly.
    if (fault::ExitBeforeExchange(ctx_.rank(), index_)) _exit(99);
    if (fault::StopBeforeExchange(ctx_.rank(), index_)) raise(SIGSTOP);
    const auto started = std::chrono::steady_clock::now();
    const Status exchanged = exchange_.transport->Exchange(sends_, recvs_, ctx_.timeout());
    counters_.exchange_ns +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started).count();
    RETURN_IF_ERROR(exchanged);
    gpu::DeviceCopier device_copies;
    Status status;
    for (const Arrival& arrival : arrivals_) {
      const char* message = static_cast<const char*>(recvs_[arrival.message].data);
      for (const auto& [index, offset] : arrival.transfers) {
        const Transfer& t = plan_.transfers[index];
        const uint32_t tensor = plan_.reads[t.read].tensor;
        const char* packed = message + offset;
        const size_t element_size = DTypeSize(manifest_.tensors[tensor].dtype);
        ForEachDestination(pieces_, tensor, t.region, [&](const LocalPiece& piece, const Box& part) {
          if (piece.device < 0) return CopyRegion(packed, t.region, piece.dst, piece.box, part, element_size);
          ForEachRun(t.region, piece.box, part, element_size, [&](uint64_t src_off, uint64_t dst_off, uint64_t n) {
            if (!status.ok()) return;
            status = exchange_.device < 0
                         ? device_copies.ToDevice(piece.device, piece.dst + dst_off, packed + src_off, n)
                         : device_copies.WithinDevice(piece.device, piece.dst + dst_off, packed + src_off, n);
          });
        });
      }
    }
    // The copies are waited for even after a failure: the next round reuses the memory they read.
    const Status waited = device_copies.Wait();
    RETURN_IF_ERROR(status);
    return waited;
  }

  Context& ctx_;
  const ExchangePlane& exchange_;
  RoundMemory& memory_;
  const std::string& path_;
  const Manifest& manifest_;
  const LoadPlan& plan_;
  const size_t index_;  // the round's place in the load, from 0
  const uint64_t tag_;
  const PiecesByTensor& pieces_;
  ExchangeCounters counters_;
  std::vector<std::pair<uint64_t, uint64_t>> gaps_;  // [begin, end) offsets to zero
  std::vector<coll::TransferSend> sends_;
  std::vector<uint64_t> send_offsets_;
  std::vector<coll::TransferRecv> recvs_;
  std::vector<uint64_t> receive_offsets_;
  std::vector<Arrival> arrivals_;
  std::vector<ChunkFetch> kept_fetches_;  // reads whose bytes go to this rank alone, run during the exchange
};

// The bytes of this rank's destinations that a round fills: the regions it keeps or receives, where they overlap
// its pieces.
uint64_t BytesFilledHere(const LoadPlan& round, int rank, const Manifest& manifest, const PiecesByTensor& pieces) {
  uint64_t bytes = 0;
  auto add = [&](const Transfer& t) {
    if (t.consumer != rank) return;
    const uint32_t tensor = round.reads[t.read].tensor;
    const uint64_t element_size = DTypeSize(manifest.tensors[tensor].dtype);
    ForEachDestination(pieces, tensor, t.region,
                       [&](const LocalPiece&, const Box& part) { bytes += part.volume() * element_size; });
  };
  for (const Transfer& t : round.local_copies) add(t);
  for (const Transfer& t : round.transfers) add(t);
  return bytes;
}

}  // namespace

LoadRequest MakeLoadRequest(int rank, const std::string& node, const std::vector<LocalPiece>& pieces) {
  LoadRequest request;
  request.rank = rank;
  request.node = node;
  for (const LocalPiece& piece : pieces) request.boxes.push_back(RequestedBox{piece.tensor, piece.wanted});
  return request;
}

Status DecodeChunksOfCachedPlan(int rank, const LoadPlanCache& cache, const Manifest& manifest,
                                const ChunkDecoder& decode_chunks) {
  if (!cache.rounds || cache.checkpoint_id != manifest.checkpoint_id) return Status::Ok();
  std::vector<ChunkIndex> chunks;
  for (const LoadPlan& round : *cache.rounds) {
    for (const ChunkRead& read : round.reads) {
      if (read.reader == rank) chunks.push_back(ChunkIndex{read.tensor, read.chunk});
    }
  }
  return decode_chunks.Records(chunks);
}

Bufferless BufferlessTransfers(const LoadPlan& view, int rank, const Manifest& manifest,
                               const std::vector<LocalPiece>& pieces, int device, bool scatter) {
  const PiecesByTensor by_tensor = ByTensor(pieces);
  const std::multimap<size_t, const Box*> kept_regions = KeptRegions(view, rank);
  Bufferless bufferless(view.transfers.size(), false);
  // Where small regions are shared, those of them already costed, and how many small transfers each pair packs (one
  // with too many to gather is packed by copy, as the round lays it out).
  const bool share_small = SharesSmallSends(device, scatter);
  std::set<std::pair<size_t, Box>> small_sent;
  std::map<int, size_t> small_to;
  for (const Transfer& t : view.transfers) {
    if (share_small && t.bytes < view.separate_bytes && view.reads[t.read].reader == rank) ++small_to[t.consumer];
  }
  for (size_t i = 0; i < view.transfers.size(); ++i) {
    const Transfer& t = view.transfers[i];
    if (t.bytes < view.separate_bytes) {
      // Packed with the pair's other small transfers: a region sent again costs nothing more where it is shared.
      if (share_small && view.reads[t.read].reader == rank && small_to[t.consumer] <= kMaxGatheredTransfers) {
        bufferless[i] = !small_sent.emplace(t.read, t.region).second;
      }
      continue;
    }
    if (t.consumer == rank) {
      bufferless[i] = InPlaceRun(view, manifest, by_tensor, device, t).has_value() ||
                      ScatterPiece(view, manifest, by_tensor, device, scatter, t) != nullptr;
    } else if (view.reads[t.read].reader == rank) {
      bufferless[i] = SentFromKept(view, manifest, by_tensor, device, scatter, t, kept_regions);
    }
  }
  return bufferless;
}

Result<ExchangeCounters> ExchangeLoad(Context& ctx, LoadPlanCache& plans, const ExchangePlane& plane,
                                      const std::string& path, const Manifest& manifest,
                                      const ChunkDecoder& decode_chunks, const LoadRequest& mine,
                                      const LoadVerdict& verdict, const FileHolders* holders,
                                      const std::vector<LocalPiece>& pieces,
                                      const std::function<void(uint64_t)>& filled) {
  // Reads go through the staging arena; the exchange buffers of a round take as much memory again (twice: two rounds
  // are in flight at once), reused round after round. Rounds are capped so that a load holds a bounded amount of
  // exchange memory, not one in proportion to the arena. Where the arena holds kArenaRoundBudgets budgets, the
  // buffers are regions of it while it has room: its pages were committed when the context began, and a host
  // buffer committed for the load costs about as much as copying into it (far more on a virtual machine whose host
  // took back memory freed a while ago: two thirds of a slow reshard restore's samples here went to zeroing such
  // pages).
  const uint64_t budget =
      fault::LoadRoundBytes(std::min(std::max<uint64_t>(ctx.arena().capacity(), kMinRoundBytes), kMaxRoundBytes));
  io::StagingArena* round_arena = ctx.arena().capacity() >= kArenaRoundBudgets * budget ? &ctx.arena() : nullptr;
  ASSIGN_OR_RETURN(std::shared_ptr<const std::vector<LoadPlan>> rounds,
                   RoundsFor(ctx, plans, manifest, decode_chunks, mine, verdict, holders, budget, pieces, plane));
  const PiecesByTensor by_tensor = ByTensor(pieces);
  // Rounds overlap: while round r exchanges, round r + 1 reads what it will send, into the other of two blocks of
  // round memory (round r + 2 reuses r's once r has ended). Every rank agrees after a round's reads and after its
  // exchange, so that a failure anywhere stops every rank at the same point and no rank waits on a peer that has
  // given up; the agreements keep their order (r's exchange, then r + 1's reads), only the reads move earlier.
  RoundMemory memory[2] = {RoundMemory(plane.device, round_arena), RoundMemory(plane.device, round_arena)};
  auto round_at = [&](size_t r) {
    return std::make_unique<Round>(ctx, plane, memory[r % 2], path, manifest, (*rounds)[r], r, by_tensor);
  };
  ExchangeCounters counters;
  counters.rounds = rounds->size();
  std::unique_ptr<Round> current = rounds->empty() ? nullptr : round_at(0);
  Status read_ahead = current ? current->ReadAhead() : Status::Ok();
  for (size_t r = 0; r < rounds->size(); ++r) {
    RETURN_IF_ERROR(Agree(ctx.control(), "load (exchange setup)", read_ahead));
    std::unique_ptr<Round> next = r + 1 < rounds->size() ? round_at(r + 1) : nullptr;
    std::thread reading;
    if (next) reading = std::thread([&] { read_ahead = next->ReadAhead(); });
    // The reading thread is joined however the exchange ends (a joinable thread's destructor ends the process).
    Status exchanged;
    try {
      exchanged = Agree(ctx.control(), "load (exchange)", current->ExchangeAndKeep());
    } catch (...) {
      if (reading.joinable()) reading.join();
      throw;
    }
    if (reading.joinable()) reading.join();
    RETURN_IF_ERROR(exchanged);
    counters.bytes_read += current->counters().bytes_read;
    counters.bytes_sent += current->counters().bytes_sent;
    counters.bytes_received += current->counters().bytes_received;
    counters.exchange_ns += current->counters().exchange_ns;
    filled(BytesFilledHere((*rounds)[r], ctx.rank(), manifest, by_tensor));
    current = std::move(next);
  }
  for (const RoundMemory& m : memory) {
    counters.arena_buffer_bytes += m.arena_bytes();
    counters.committed_buffer_bytes += m.committed_bytes();
  }
  return counters;
}

}  // namespace ckpt::runtime
