#include "runtime/exchange_load.h"

#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>

#include "common/settings.h"
#include "io/checksum.h"
#include "runtime/agreement.h"
#include "runtime/chunk_fetcher.h"
#include "runtime/device_copy.h"
#include "runtime/dtype.h"

namespace ckpt::runtime {
namespace {

using PiecesByTensor = std::map<uint32_t, std::vector<const LocalPiece*>>;

// Tests make one rank die here, between the reads and the exchange, to check that its peers fail cleanly.
void InjectedCrash(int rank) {
  const std::string victim = settings::StringFromEnv(settings::kFaultExitBeforeExchangeVar);
  if (!victim.empty() && victim == std::to_string(rank)) _exit(99);
}

// Where a region that reached this rank goes: every registered piece it overlaps.
template <typename Fn>
void ForEachDestination(const PiecesByTensor& pieces, uint32_t tensor, const Box& region, Fn&& fn) {
  auto it = pieces.find(tensor);
  if (it == pieces.end()) return;
  for (const LocalPiece* piece : it->second) {
    if (std::optional<Box> part = Intersect(region, piece->wanted)) fn(*piece, *part);
  }
}

// The same gathered requests against the same checkpoint give the same plan: it is computed once.
Result<std::shared_ptr<const LoadPlan>> PlanFor(Context& ctx, const Manifest& manifest,
                                                const std::vector<LoadRequest>& requests,
                                                const std::vector<std::string>& encoded_requests) {
  uint64_t key = io::Checksum(manifest.checkpoint_id.data(), manifest.checkpoint_id.size());
  for (const std::string& encoded : encoded_requests) key = key * 31 + io::Checksum(encoded.data(), encoded.size());
  key |= 1;
  LoadPlanCache& cache = ctx.load_plan_cache();
  if (cache.key == key && cache.plan) return cache.plan;
  ASSIGN_OR_RETURN(LoadPlan plan, PlanLoad(manifest, requests));
  cache.plan = std::make_shared<const LoadPlan>(std::move(plan));
  cache.key = key;
  return cache.plan;
}

class Round {
 public:
  Round(Context& ctx, const std::string& path, const Manifest& manifest, const LoadPlan& plan, uint64_t tag,
        const PiecesByTensor& pieces, ExchangeCounters& counters)
      : ctx_(ctx), path_(path), manifest_(manifest), plan_(plan), tag_(tag), pieces_(pieces), counters_(counters) {}

  // Every rank agrees after the reads and after the exchange, so that a failure anywhere stops every rank at the
  // same point and no rank waits on a peer that has given up.
  Status Run() {
    RETURN_IF_ERROR(Agree(ctx_.control(), ReadMine()));
    return Agree(ctx_.control(), ExchangeAndUnpack());
  }

 private:
  // Reads this rank's chunks: its own share straight into its buffers, the others' into per-peer send buffers.
  Status ReadMine() {
    std::vector<ChunkFetch> fetches;
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
    for (const PeerBatch& batch : OutgoingBatches(plan_, ctx_.rank())) {
      // Not value-initialised: the reads fill every piece, and only the alignment gaps between pieces are zeroed.
      send_buffers_.emplace_back(new char[batch.bytes]);
      char* base = send_buffers_.back().get();
      for (size_t j = 0; j < batch.transfers.size(); ++j) {
        const Transfer& t = plan_.transfers[batch.transfers[j]];
        fetch_for(t.read).consumers.push_back(ChunkConsumer{t.region, base + batch.offsets[j], t.region});
        const uint64_t end = batch.offsets[j] + t.bytes;
        const uint64_t next = j + 1 < batch.transfers.size() ? batch.offsets[j + 1] : batch.bytes;
        std::memset(base + end, 0, next - end);
      }
      sends_.push_back(coll::TransferSend{batch.peer, base, batch.bytes, tag_});
      counters_.bytes_sent += batch.bytes;
    }
    const FetchEngine engine{ctx_.arena(), ctx_.workers(), ctx_.timeout()};
    ASSIGN_OR_RETURN(uint64_t read, FetchChunks(engine, path_, manifest_, fetches));
    counters_.bytes_read += read;
    return Status::Ok();
  }

  Status ExchangeAndUnpack() {
    const std::vector<PeerBatch> incoming = IncomingBatches(plan_, ctx_.rank());
    std::vector<std::unique_ptr<char[]>> receive_buffers;  // filled whole by the transport
    std::vector<coll::TransferRecv> recvs;
    for (const PeerBatch& batch : incoming) {
      receive_buffers.emplace_back(new char[batch.bytes]);
      recvs.push_back(coll::TransferRecv{batch.peer, receive_buffers.back().get(), batch.bytes, tag_});
      counters_.bytes_received += batch.bytes;
    }
    InjectedCrash(ctx_.rank());
    RETURN_IF_ERROR(ctx_.transport()->Exchange(sends_, recvs, ctx_.timeout()));
    DeviceCopier device_copies;
    Status status;
    for (size_t b = 0; b < incoming.size(); ++b) {
      const PeerBatch& batch = incoming[b];
      for (size_t j = 0; j < batch.transfers.size(); ++j) {
        const Transfer& t = plan_.transfers[batch.transfers[j]];
        const uint32_t tensor = plan_.reads[t.read].tensor;
        const char* packed = receive_buffers[b].get() + batch.offsets[j];
        const size_t element_size = DTypeSize(manifest_.tensors[tensor].dtype);
        ForEachDestination(pieces_, tensor, t.region, [&](const LocalPiece& piece, const Box& part) {
          if (piece.device < 0) return CopyRegion(packed, t.region, piece.dst, piece.box, part, element_size);
          ForEachRun(t.region, piece.box, part, element_size, [&](uint64_t src_off, uint64_t dst_off, uint64_t n) {
            if (status.ok()) status = device_copies.ToDevice(piece.device, piece.dst + dst_off, packed + src_off, n);
          });
        });
      }
    }
    RETURN_IF_ERROR(status);
    return device_copies.Wait();
  }

  Context& ctx_;
  const std::string& path_;
  const Manifest& manifest_;
  const LoadPlan& plan_;
  const uint64_t tag_;
  const PiecesByTensor& pieces_;
  ExchangeCounters& counters_;
  std::vector<std::unique_ptr<char[]>> send_buffers_;
  std::vector<coll::TransferSend> sends_;
};

}  // namespace

LoadRequest MakeLoadRequest(int rank, const std::string& node, const std::vector<LocalPiece>& pieces) {
  LoadRequest request;
  request.rank = rank;
  request.node = node;
  for (const LocalPiece& piece : pieces) request.boxes.push_back(RequestedBox{piece.tensor, piece.wanted});
  return request;
}

Result<ExchangeCounters> ExchangeLoad(Context& ctx, const std::string& path, const Manifest& manifest,
                                      const std::vector<LoadRequest>& requests,
                                      const std::vector<std::string>& encoded_requests,
                                      const std::vector<LocalPiece>& pieces) {
  ASSIGN_OR_RETURN(std::shared_ptr<const LoadPlan> plan, PlanFor(ctx, manifest, requests, encoded_requests));
  PiecesByTensor by_tensor;
  for (const LocalPiece& piece : pieces) by_tensor[piece.tensor].push_back(&piece);
  // Each round's buffers stay within half the arena's size, whatever the checkpoint's.
  const uint64_t budget = std::max<uint64_t>(ctx.arena().capacity() / 2, 64ull << 20);
  const std::vector<LoadPlan> rounds = SplitIntoRounds(*plan, budget);
  ExchangeCounters counters;
  for (size_t r = 0; r < rounds.size(); ++r) {
    RETURN_IF_ERROR(Round(ctx, path, manifest, rounds[r], r & coll::kMaxTransferTag, by_tensor, counters).Run());
  }
  return counters;
}

}  // namespace ckpt::runtime
