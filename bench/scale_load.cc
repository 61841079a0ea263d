#include "bench/scale_load.h"

#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <numeric>

#include "bench/scale_spool.h"
#include "io/file_io.h"
#include "runtime/load/exchange_load.h"
#include "runtime/load/load_partition.h"

namespace ckpt::bench {
namespace {

// What SimulateLoad hands the replay of one rank: the messages of each step that rank receives.
enum Step { kRequests, kParts, kReaderShares, kTransferRounds, kSteps };

constexpr uint64_t kRoundBytes = 128ull << 20;  // exchange_load.cc's bound at a large arena

// A rank's load planning steps: partitioning its request, planning the tensors it owns, merging its part, placing
// its reads, cutting rounds.
constexpr int kRankSteps = 5;

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

// The transfers that take no round memory on `rank`, as its exchange lays them out (host memory, no GPU: UCX,
// which scatters receives).
runtime::Bufferless BufferlessOf(const ParallelLayout& target, int rank, const runtime::LoadPlan& view,
                                 const runtime::Manifest& manifest) {
  return runtime::BufferlessTransfers(view, rank, manifest, PiecesOf(RequestOf(target, rank, manifest)), -1,
                                      /*scatter=*/true);
}

// The ranks `rank` sends to or receives from in its view of the plan: those its transport connects to.
uint32_t ExchangePartners(const runtime::LoadPlan& view, int rank) {
  std::vector<int> partners;
  for (const runtime::Transfer& transfer : view.transfers) {
    const int reader = view.reads[transfer.read].reader;
    partners.push_back(transfer.consumer == rank ? reader : transfer.consumer);
  }
  std::sort(partners.begin(), partners.end());
  return static_cast<uint32_t>(std::unique(partners.begin(), partners.end()) - partners.begin());
}

uint32_t RoundsNeeded(const runtime::LoadPlan& view, int rank, const std::vector<uint32_t>& placed) {
  uint32_t needed = 0;
  for (size_t i = 0; i < view.reads.size(); ++i) {
    if (view.reads[i].reader == rank) needed = std::max(needed, placed[i] + 1);
  }
  return needed;
}

}  // namespace

LoadFigures SimulateLoad(const ParallelLayout& target, const runtime::Manifest& manifest, int workers,
                         ControlBytes* bytes, const std::string& inputs_path) {
  const int ranks = target.world();
  const std::string spool_path = inputs_path + ".spool-";
  Spool requests(spool_path + "requests", ranks), parts(spool_path + "parts", ranks),
      shares(spool_path + "shares", ranks), rounds_in(spool_path + "rounds", ranks), nothing(spool_path + "cut", ranks);
  uint32_t round_count = 0;

  // Each step of one rank: its timed work, its messages added to `out` (where not null).
  auto spool = [ranks](int from, const std::vector<std::string>& routed, Spool* out) {
    for (int to = 0; out != nullptr && to < ranks; ++to) {
      if (!routed[to].empty()) out->Add(from, to, routed[to]);
    }
  };
  auto partition = [&](int r, Spool* out) {
    const runtime::LoadRequest request = RequestOf(target, r, manifest);
    RankResult result;
    result.counts[0] = static_cast<double>(runtime::EncodeLoadRequest(request).size());
    const Clock::time_point start = Clock::now();
    const std::vector<std::string> routed = runtime::PartitionLoadRequest(request, manifest, ranks);
    result.seconds = Since(start);
    spool(r, routed, out);
    return result;
  };
  auto own = [&](int r, Spool* out) {
    const std::vector<std::string> incoming = ToIncoming(requests.Inbox(r), ranks);
    const Clock::time_point start = Clock::now();
    Result<std::vector<std::string>> planned = runtime::PlanOwnedTensors(incoming, manifest, r, AllDecoded);
    Check(planned.status(), "planning owned tensors");
    RankResult result;
    result.seconds = Since(start);
    spool(r, *planned, out);
    return result;
  };
  auto merge = [&](int r, Spool* out) {
    const std::vector<std::string> incoming = ToIncoming(parts.Inbox(r), ranks);
    const Clock::time_point start = Clock::now();
    Result<runtime::LoadPlan> view = runtime::MergeLoadPlan(incoming, r, manifest, AllDecoded);
    Check(view.status(), "merging");
    const runtime::Bufferless bufferless = BufferlessOf(target, r, *view, manifest);
    const std::vector<std::string> routed = runtime::ReaderShares(*view, r, kRoundBytes, bufferless);
    RankResult result;
    result.seconds = Since(start);
    result.counts[0] = ExchangePartners(*view, r);
    spool(r, routed, out);
    return result;
  };
  // A rank's view of the plan, and where its reads go, are made again (untimed) in each later step that needs them:
  // holding every rank's at once is what set the simulation's memory.
  auto view_of = [&](int r) {
    Result<runtime::LoadPlan> view = runtime::MergeLoadPlan(ToIncoming(parts.Inbox(r), ranks), r, manifest, AllDecoded);
    Check(view.status(), "merging");
    return std::move(view).value();
  };
  auto place = [&](int r, Spool* out) {
    const runtime::LoadPlan view = view_of(r);
    const runtime::Bufferless bufferless = BufferlessOf(target, r, view, manifest);
    const std::vector<std::string> incoming = ToIncoming(shares.Inbox(r), ranks);
    const Clock::time_point start = Clock::now();
    Result<std::vector<uint32_t>> rounds = runtime::PlaceOwnReads(view, r, incoming, kRoundBytes, bufferless);
    Check(rounds.status(), "placing reads");
    const std::vector<std::string> routed = runtime::TransferRounds(view, r, *rounds);
    RankResult result;
    result.seconds = Since(start);
    result.counts[0] = RoundsNeeded(view, r, *rounds);
    spool(r, routed, out);
    return result;
  };
  auto cut = [&](int r, Spool*) {
    const runtime::LoadPlan view = view_of(r);
    const runtime::Bufferless bufferless = BufferlessOf(target, r, view, manifest);
    Result<std::vector<uint32_t>> rounds =
        runtime::PlaceOwnReads(view, r, ToIncoming(shares.Inbox(r), ranks), kRoundBytes, bufferless);
    Check(rounds.status(), "placing reads");
    const std::vector<std::string> incoming = ToIncoming(rounds_in.Inbox(r), ranks);
    const Clock::time_point start = Clock::now();
    Check(runtime::CutIntoRounds(view, r, std::move(rounds).value(), incoming, round_count).status(), "cutting rounds");
    RankResult result;
    result.seconds = Since(start);
    return result;
  };
  const std::function<RankResult(int, Spool*)> steps[kRankSteps] = {partition, own, merge, place, cut};
  Spool* const outputs[kRankSteps] = {&requests, &parts, &shares, &rounds_in, &nothing};

  std::vector<std::array<double, kRankSteps>> seconds(ranks);
  LoadFigures figures;
  for (int step = 0; step < kRankSteps; ++step) {
    const std::vector<RankResult> results = RunStep(
        ranks, workers, [&](int r, Spool& out) { return steps[step](r, &out); }, *outputs[step]);
    for (int r = 0; r < ranks; ++r) {
      seconds[r][step] = results[r].seconds;
      if (step == 0) figures.requests_bytes += static_cast<uint64_t>(results[r].counts[0]);
      if (step == 2) figures.exchange_partners.push_back(static_cast<uint32_t>(results[r].counts[0]));
      if (step == 3) round_count = std::max(round_count, static_cast<uint32_t>(results[r].counts[0]));
    }
    if (step != 4) {  // cutting rounds sends nothing
      outputs[step]->CountInto(bytes);
      bytes->AllToAll();
    }
    // The agreement that ends each step (runtime/load/load_agreement.h, exchange_load.cc). The requests step's
    // carries a bit per manifest entry, a digest and whether the plan is held; the rounds step's the rounds needed.
    if (step == 0) bytes->Agreement((manifest.tensors.size() + manifest.objects.size() + 7) / 8 + 64, kVerdictBytes);
    if (step == 1 || step == 2 || step == 4) bytes->Agreement(0, kAgreementBytes);
    if (step == 3) bytes->Agreement(sizeof(uint32_t), kAgreementBytes);
  }
  bytes->Agreement(0, kAgreementBytes);  // load (outcome)

  // The slowest ranks' steps timed again (RetimedBusiest), each step's figure the faster of its two timings.
  auto total = [&](int r) { return std::accumulate(seconds[r].begin(), seconds[r].end(), 0.0); };
  figures.busiest = RetimedBusiest(ranks, total, [&](int r) {
    for (int step = 0; step < kRankSteps; ++step) {
      seconds[r][step] = std::min(seconds[r][step], steps[step](r, nullptr).seconds);
    }
  });
  figures.busiest_plan_s = total(figures.busiest);
  figures.round_count = round_count;
  const int b = figures.busiest;
  std::printf(
      "# %d ranks: the busiest rank's load planning is rank %d's: %.3f s partitioning its request, %.3f s "
      "planning the tensors it owns, %.3f s merging its part, %.3f s placing its reads, %.3f s cutting rounds\n",
      ranks, b, seconds[b][0], seconds[b][1], seconds[b][2], seconds[b][3], seconds[b][4]);
  WriteMessages(inputs_path, {requests.Inbox(b), parts.Inbox(b), shares.Inbox(b), rounds_in.Inbox(b)});
  return figures;
}

int ReplayLoad(const ParallelLayout& target, int rank, uint32_t round_count, const std::string& manifest_path,
               const std::string& inputs_path) {
  const int ranks = target.world();
  double best_decode_s = std::numeric_limits<double>::max(), best_plan_s = std::numeric_limits<double>::max();
  size_t tensors_decoded = 0, tensors = 0;
  uint64_t file_bytes_read = 0;
  for (int run = 0; run < kReplayRuns; ++run) {
    // Read anew each run rather than copied, so that the peak memory is one rank's.
    std::vector<Messages> inputs = ReadMessages(inputs_path);
    if (inputs.size() != kSteps) Check(Corrupt("the replay's inputs have the wrong number of steps"), "replaying");
    const Clock::time_point start = Clock::now();
    // As the library reads it: the header and first message now, the sections of the tensors it decodes later.
    Result<runtime::ManifestWithoutChunks> read =
        runtime::ReadManifestWithoutChunks(io::ParentDirectory(manifest_path));
    Check(read.status(), "decoding the manifest");
    runtime::Manifest& manifest = read->manifest;
    const Clock::time_point planning = Clock::now();
    // The chunks this rank decodes as it plans and merges count as decoding, not planning.
    double chunks_s = 0;
    const runtime::ChunkDecoder decode_chunks(
        [&](const std::vector<uint32_t>& wanted) {
          const Clock::time_point begin = Clock::now();
          const Status decoded = read->chunks->DecodeInto(manifest, wanted);
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
    const runtime::Bufferless bufferless =
        runtime::BufferlessTransfers(*view, rank, manifest, PiecesOf(mine), -1, /*scatter=*/true);
    (void)runtime::ReaderShares(*view, rank, kRoundBytes, bufferless);
    Result<std::vector<uint32_t>> placed = runtime::PlaceOwnReads(
        *view, rank, ToIncoming(std::move(inputs[kReaderShares]), ranks), kRoundBytes, bufferless);
    Check(placed.status(), "placing");
    (void)runtime::TransferRounds(*view, rank, *placed);
    Result<std::vector<runtime::LoadPlan>> cut = runtime::CutIntoRounds(
        *view, rank, std::move(placed).value(), ToIncoming(std::move(inputs[kTransferRounds]), ranks), round_count);
    Check(cut.status(), "cutting");
    best_plan_s = std::min(best_plan_s, Since(planning) - chunks_s);
    best_decode_s = std::min(best_decode_s, std::chrono::duration<double>(planning - start).count() + chunks_s);
    tensors_decoded = read->chunks->decoded_count();
    tensors = manifest.tensors.size();
    file_bytes_read = read->chunks->file_bytes_read();
  }
  std::printf("%.6f %.6f %llu %zu %zu %llu\n", best_decode_s, best_plan_s,
              static_cast<unsigned long long>(PeakRssKib()), tensors_decoded, tensors,
              static_cast<unsigned long long>(file_bytes_read));
  return 0;
}

}  // namespace ckpt::bench
