#include "bench/scale_load.h"

#include "io/file_io.h"
#include "runtime/load/exchange_load.h"
#include "runtime/load/load_partition.h"

namespace ckpt::bench {
namespace {

// What SimulateLoad hands the replay of one rank: the messages of each step that rank receives.
enum Step { kRequests, kParts, kReaderShares, kTransferRounds, kSteps };

constexpr uint64_t kRoundBytes = 128ull << 20;  // exchange_load.cc's bound at a large arena

struct RankWork {
  double seconds = 0;
  double steps[5] = {0, 0, 0, 0, 0};  // partitioning, owning, merging, placing, cutting
  runtime::LoadPlan view;
  std::vector<uint32_t> placed;
};

// The simulator holds the whole manifest decoded.
Status AllDecoded(const std::vector<uint32_t>&) { return Status::Ok(); }

// The rank's destinations as it registers them for its request: host memory holding each box asked for.
std::vector<runtime::LocalPiece> PiecesOf(const runtime::LoadRequest& request) {
  std::vector<runtime::LocalPiece> pieces;
  for (const runtime::RequestedBox& asked : request.boxes) {
    pieces.push_back(runtime::LocalPiece{asked.tensor, asked.box, asked.box, nullptr, -1});
  }
  return pieces;
}

// The transfers that take no round memory on `rank`, as its exchange lays them out (host memory, no GPU).
runtime::Bufferless BufferlessOf(const ParallelLayout& target, int rank, const runtime::LoadPlan& view,
                                 const runtime::Manifest& manifest) {
  return runtime::BufferlessTransfers(view, rank, manifest, PiecesOf(RequestOf(target, rank, manifest)), -1);
}

uint32_t RoundsNeeded(const runtime::LoadPlan& view, int rank, const std::vector<uint32_t>& placed) {
  uint32_t needed = 0;
  for (size_t i = 0; i < view.reads.size(); ++i) {
    if (view.reads[i].reader == rank) needed = std::max(needed, placed[i] + 1);
  }
  return needed;
}

}  // namespace

LoadFigures SimulateLoad(const ParallelLayout& target, const runtime::Manifest& manifest, ControlBytes* bytes,
                         const std::string& inputs_path) {
  const int ranks = target.world();
  std::vector<RankWork> work(ranks);
  std::vector<runtime::Bufferless> bufferless(ranks);
  std::vector<Messages> inbox(ranks);
  LoadFigures figures;
  for (int r = 0; r < ranks; ++r) {
    const runtime::LoadRequest request = RequestOf(target, r, manifest);
    figures.requests_bytes += runtime::EncodeLoadRequest(request).size();
    const Clock::time_point start = Clock::now();
    std::vector<std::string> parts = runtime::PartitionLoadRequest(request, manifest, ranks);
    work[r].steps[0] = Since(start);
    for (int owner = 0; owner < ranks; ++owner) {
      if (parts[owner].empty()) continue;
      bytes->Message(r, owner, parts[owner].size());
      inbox[owner].emplace_back(r, std::move(parts[owner]));
    }
  }
  bytes->AllToAll();
  // The requests step (runtime/load/load_agreement.h): a bit per manifest entry, a digest, the plan held.
  bytes->Agreement((manifest.tensors.size() + manifest.objects.size() + 7) / 8 + 64, kVerdictBytes);

  std::vector<std::vector<Messages>> kept(kSteps);  // the busiest rank's, once known: every rank's until then
  std::vector<Messages> parts_in(ranks);
  for (int owner = 0; owner < ranks; ++owner) {
    const Clock::time_point start = Clock::now();
    Result<std::vector<std::string>> planned =
        runtime::PlanOwnedTensors(ToIncoming(inbox[owner], ranks), manifest, owner, AllDecoded);
    Check(planned.status(), "planning owned tensors");
    std::vector<std::string> routed = std::move(planned).value();
    work[owner].steps[1] = Since(start);
    for (int to = 0; to < ranks; ++to) {
      if (routed[to].empty()) continue;
      bytes->Message(owner, to, routed[to].size());
      parts_in[to].emplace_back(owner, std::move(routed[to]));
    }
  }
  bytes->AllToAll();
  bytes->Agreement(0, kAgreementBytes);  // load (plan)
  std::vector<Messages> shares_in(ranks);
  for (int r = 0; r < ranks; ++r) {
    const Clock::time_point start = Clock::now();
    Result<runtime::LoadPlan> view = runtime::MergeLoadPlan(ToIncoming(parts_in[r], ranks), r, manifest, AllDecoded);
    Check(view.status(), "merging");
    work[r].view = std::move(view).value();
    bufferless[r] = BufferlessOf(target, r, work[r].view, manifest);
    std::vector<std::string> shares = runtime::ReaderShares(work[r].view, r, kRoundBytes, bufferless[r]);
    work[r].steps[2] = Since(start);
    for (int to = 0; to < ranks; ++to) {
      if (shares[to].empty()) continue;
      bytes->Message(r, to, shares[to].size());
      shares_in[to].emplace_back(r, std::move(shares[to]));
    }
  }
  bytes->AllToAll();
  bytes->Agreement(0, kAgreementBytes);  // load (plan parts)
  std::vector<Messages> rounds_in(ranks);
  uint32_t round_count = 0;
  for (int r = 0; r < ranks; ++r) {
    const Clock::time_point start = Clock::now();
    Result<std::vector<uint32_t>> placed =
        runtime::PlaceOwnReads(work[r].view, r, ToIncoming(shares_in[r], ranks), kRoundBytes, bufferless[r]);
    bufferless[r] = {};
    Check(placed.status(), "placing reads");
    std::vector<std::string> transfer_rounds = runtime::TransferRounds(work[r].view, r, *placed);
    work[r].steps[3] = Since(start);
    round_count = std::max(round_count, RoundsNeeded(work[r].view, r, *placed));
    work[r].placed = std::move(placed).value();
    for (int to = 0; to < ranks; ++to) {
      if (transfer_rounds[to].empty()) continue;
      bytes->Message(r, to, transfer_rounds[to].size());
      rounds_in[to].emplace_back(r, std::move(transfer_rounds[to]));
    }
  }
  bytes->AllToAll();
  bytes->Agreement(sizeof(uint32_t), kAgreementBytes);  // load (rounds)
  for (int r = 0; r < ranks; ++r) {
    const Clock::time_point start = Clock::now();
    Result<std::vector<runtime::LoadPlan>> rounds = runtime::CutIntoRounds(
        work[r].view, r, std::move(work[r].placed), ToIncoming(rounds_in[r], ranks), round_count);
    Check(rounds.status(), "cutting rounds");
    work[r].steps[4] = Since(start);
    work[r].view = runtime::LoadPlan();
  }
  bytes->Agreement(0, kAgreementBytes);  // load (rounds cut)
  bytes->Agreement(0, kAgreementBytes);  // load (outcome)

  for (int r = 0; r < ranks; ++r) {
    for (double step : work[r].steps) work[r].seconds += step;
    if (work[r].seconds > figures.busiest_plan_s) {
      figures.busiest_plan_s = work[r].seconds;
      figures.busiest = r;
    }
  }
  figures.round_count = round_count;
  const int b = figures.busiest;
  const double* steps = work[b].steps;
  std::printf(
      "# %d ranks: the busiest rank's load planning is rank %d's: %.3f s partitioning its request, %.3f s "
      "planning the tensors it owns, %.3f s merging its part, %.3f s placing its reads, %.3f s cutting rounds\n",
      ranks, b, steps[0], steps[1], steps[2], steps[3], steps[4]);
  WriteMessages(inputs_path, {inbox[b], parts_in[b], shares_in[b], rounds_in[b]});
  return figures;
}

int ReplayLoad(const ParallelLayout& target, int rank, uint32_t round_count, const std::string& manifest_path,
               const std::string& inputs_path) {
  const int ranks = target.world();
  std::vector<Messages> inputs = ReadMessages(inputs_path);
  if (inputs.size() != kSteps) Check(Corrupt("the replay's inputs have the wrong number of steps"), "replaying");
  const Clock::time_point start = Clock::now();
  // As the library reads it: the header and first message now, the sections of the tensors it decodes later.
  Result<runtime::ManifestWithoutChunks> read = runtime::ReadManifestWithoutChunks(io::ParentDirectory(manifest_path));
  Check(read.status(), "decoding the manifest");
  runtime::Manifest& manifest = read->manifest;
  const Clock::time_point planning = Clock::now();
  // The chunks this rank decodes as it plans and merges count as decoding, not planning.
  double chunks_s = 0;
  const runtime::ChunkDecoder decode_chunks(
      [&](const std::vector<uint32_t>& tensors) {
        const Clock::time_point begin = Clock::now();
        const Status decoded = read->chunks->DecodeInto(manifest, tensors);
        chunks_s += Since(begin);
        return decoded;
      },
      [&](const std::vector<runtime::ChunkIndex>& chunks) {
        const Clock::time_point begin = Clock::now();
        const Status decoded = read->chunks->DecodeRecordsInto(manifest, chunks);
        chunks_s += Since(begin);
        return decoded;
      });
  const runtime::LoadRequest mine = RequestOf(target, rank, manifest);
  (void)runtime::PartitionLoadRequest(mine, manifest, ranks);
  Check(runtime::PlanOwnedTensors(ToIncoming(std::move(inputs[kRequests]), ranks), manifest, rank, decode_chunks)
            .status(),
        "planning");
  Result<runtime::LoadPlan> view =
      runtime::MergeLoadPlan(ToIncoming(std::move(inputs[kParts]), ranks), rank, manifest, decode_chunks);
  Check(view.status(), "merging");
  const runtime::Bufferless bufferless = runtime::BufferlessTransfers(*view, rank, manifest, PiecesOf(mine), -1);
  (void)runtime::ReaderShares(*view, rank, kRoundBytes, bufferless);
  Result<std::vector<uint32_t>> placed =
      runtime::PlaceOwnReads(*view, rank, ToIncoming(std::move(inputs[kReaderShares]), ranks), kRoundBytes, bufferless);
  Check(placed.status(), "placing");
  (void)runtime::TransferRounds(*view, rank, *placed);
  Result<std::vector<runtime::LoadPlan>> cut = runtime::CutIntoRounds(
      *view, rank, std::move(placed).value(), ToIncoming(std::move(inputs[kTransferRounds]), ranks), round_count);
  Check(cut.status(), "cutting");
  const double decode_s = std::chrono::duration<double>(planning - start).count() + chunks_s;
  std::printf("%.3f %.3f %llu %zu %zu %llu\n", decode_s, Since(planning) - chunks_s,
              static_cast<unsigned long long>(PeakRssKib()), read->chunks->decoded_count(), manifest.tensors.size(),
              static_cast<unsigned long long>(read->chunks->file_bytes_read()));
  return 0;
}

}  // namespace ckpt::bench
