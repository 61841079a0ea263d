// The load's partitioned planning (runtime/load/load_partition.h), run for every rank of random jobs in one process:
// the ranks' views hold every read and every piece the whole job's plan holds, the two ranks of every pair see
// their transfers alike in every round, every round keeps each reader within its bounds, and malformed
// messages are refused naming their sender.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <tuple>

#include "common/bytes.h"
#include "runtime/load/load_partition.h"
#include "runtime/save/save_plan.h"
#include "tests/unit/load/load_plan_testing.h"

namespace ckpt::runtime {
namespace {

using Rng = std::mt19937_64;

uint64_t Uniform(Rng& rng, uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng); }

// The boxes of `shape` cut into parts x parts (the last part of each dimension takes the rest).
std::vector<Box> Grid(const Shape& shape, uint64_t rows, uint64_t cols) {
  std::vector<Box> boxes;
  const uint64_t r_step = (shape[0] + rows - 1) / rows, c_step = (shape[1] + cols - 1) / cols;
  for (uint64_t r = 0; r < shape[0]; r += r_step) {
    for (uint64_t c = 0; c < shape[1]; c += c_step) {
      boxes.push_back(Box{{r, c}, {std::min(r_step, shape[0] - r), std::min(c_step, shape[1] - c)}});
    }
  }
  return boxes;
}

struct Job {
  Manifest manifest;
  std::vector<LoadRequest> requests;
};

// Tensors saved in one grid and asked for in another, some boxes by several ranks (replicas), ranks two a node.
Job RandomJob(Rng& rng, int world) {
  Job job;
  std::vector<TensorRecord> tensors;
  const uint64_t count = Uniform(rng, 1, 6);
  for (uint64_t t = 0; t < count; ++t) {
    const Shape shape{Uniform(rng, 1, 40), Uniform(rng, 1, 40)};
    tensors.push_back(Stored("t" + std::to_string(t), shape, Grid(shape, Uniform(rng, 1, 4), Uniform(rng, 1, 4)),
                             Uniform(rng, 1, 3) * 64));
  }
  job.manifest = WithTensors(std::move(tensors));
  job.requests = World(world, 2);
  for (uint32_t t = 0; t < job.manifest.tensors.size(); ++t) {
    const std::vector<Box> wanted = Grid(job.manifest.tensors[t].shape, Uniform(rng, 1, 5), Uniform(rng, 1, 5));
    for (size_t i = 0; i < wanted.size(); ++i) {
      const uint64_t replicas = Uniform(rng, 1, 3);
      for (uint64_t k = 0; k < replicas; ++k) {
        job.requests[(i * 7 + k * 3 + t) % world].boxes.push_back(RequestedBox{t, wanted[i]});
      }
    }
  }
  return job;
}

// What the ranks of a job plan, each from its own manifest opened as a load opens it (chunks decoded on demand).
struct Planned {
  std::vector<LoadPlan> views;
  std::vector<std::set<uint32_t>> decoded;  // by rank: the tensors whose chunks it decoded
};

// Every rank's view, planned as the ranks plan it: requests to owners, owners' plans routed back, parts merged;
// readers limited to `holders` where set.
Planned PlanAsTheRanksDo(const Job& job, const FileHolders* holders = nullptr) {
  const int world = static_cast<int>(job.requests.size());
  Manifest stored = job.manifest;
  stored.world_size = static_cast<uint32_t>(world);
  Result<std::string> file = EncodeManifest(stored);
  EXPECT_TRUE(file.ok()) << file.status().message();
  std::vector<ManifestWithoutChunks> manifests;
  for (int r = 0; r < world; ++r) {
    Result<ManifestWithoutChunks> read = DecodeManifestWithoutChunks(*file, "MANIFEST of rank " + std::to_string(r));
    EXPECT_TRUE(read.ok()) << read.status().message();
    manifests.push_back(std::move(read).value());
  }
  Planned planned;
  planned.decoded.resize(world);
  auto decoder_of = [&](int r) -> ChunkDecoder {
    return [&, r](const std::vector<uint32_t>& tensors) {
      planned.decoded[r].insert(tensors.begin(), tensors.end());
      return manifests[r].chunks->DecodeInto(manifests[r].manifest, tensors);
    };
  };
  std::vector<std::vector<std::string>> to_owner(world, std::vector<std::string>(world));
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> parts = PartitionLoadRequest(job.requests[r], manifests[r].manifest, world);
    for (int owner = 0; owner < world; ++owner) to_owner[owner][r] = std::move(parts[owner]);
  }
  std::vector<std::vector<std::string>> to_rank(world, std::vector<std::string>(world));
  for (int owner = 0; owner < world; ++owner) {
    Result<std::vector<std::string>> routed =
        PlanOwnedTensors(to_owner[owner], manifests[owner].manifest, owner, decoder_of(owner), holders);
    EXPECT_TRUE(routed.ok()) << routed.status().message();
    for (int r = 0; r < world; ++r) to_rank[r][owner] = std::move((*routed)[r]);
  }
  for (int r = 0; r < world; ++r) {
    Result<LoadPlan> view = MergeLoadPlan(to_rank[r], r, manifests[r].manifest, decoder_of(r));
    EXPECT_TRUE(view.ok()) << view.status().message();
    planned.views.push_back(std::move(view).value());
    EXPECT_EQ(manifests[r].chunks->decoded_count(), planned.decoded[r].size());
  }
  return planned;
}

std::vector<LoadPlan> Views(const Job& job) { return PlanAsTheRanksDo(job).views; }

// A piece of a plan with what identifies it whoever reads it: the read's blocks, the consumer, the region.
using Piece = std::tuple<uint32_t, uint32_t, uint64_t, uint64_t, int, Box, uint64_t>;

std::multiset<Piece> PiecesOf(const LoadPlan& plan, int consumer) {
  std::multiset<Piece> pieces;
  for (const auto* list : {&plan.transfers, &plan.local_copies}) {
    for (const Transfer& t : *list) {
      if (consumer >= 0 && t.consumer != consumer) continue;
      const ChunkRead& r = plan.reads[t.read];
      pieces.emplace(r.tensor, r.chunk, r.first_block, r.block_count, t.consumer, t.region, t.bytes);
    }
  }
  return pieces;
}

TEST(LoadPartitionTest, TheViewsHoldEveryReadAndPieceOfTheWholePlanOnce) {
  Rng rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int world = static_cast<int>(Uniform(rng, 1, 7));
    const Job job = RandomJob(rng, world);
    Result<LoadPlan> whole = PlanLoad(job.manifest, job.requests);
    ASSERT_TRUE(whole.ok()) << whole.status().message();
    const std::vector<LoadPlan> views = Views(job);
    std::multiset<std::tuple<uint32_t, uint32_t, uint64_t, uint64_t>> whole_reads, view_reads;
    for (const ChunkRead& r : whole->reads) whole_reads.emplace(r.tensor, r.chunk, r.first_block, r.block_count);
    for (int rank = 0; rank < world; ++rank) {
      for (const ChunkRead& r : views[rank].reads) {
        if (r.reader == rank) view_reads.emplace(r.tensor, r.chunk, r.first_block, r.block_count);
      }
      EXPECT_EQ(PiecesOf(views[rank], rank), PiecesOf(*whole, rank)) << "trial " << trial << ", rank " << rank;
    }
    EXPECT_EQ(view_reads, whole_reads) << "trial " << trial;
  }
}

// A memory copy held by the last node only: every read falls to its ranks, whether or not they asked for anything
// of that tensor, and every rank still gets exactly the pieces the whole plan gives it.
TEST(LoadPartitionTest, WithFileHoldersOnlyRanksOfHoldingNodesReadAndEveryPieceArrives) {
  Rng rng(11);
  bool read_unasked = false;
  for (int trial = 0; trial < 30; ++trial) {
    const int world = static_cast<int>(Uniform(rng, 2, 7));
    const Job job = RandomJob(rng, world);
    const int holding_node = (world - 1) / 2;  // World(world, 2): two ranks a node
    FileHolders::Node holding{{}, {0}}, empty;
    for (int r = 0; r < world; ++r) (r / 2 == holding_node ? holding : empty).ranks.push_back(r);
    Result<FileHolders> holders = FileHolders::Make({empty, holding}, world, 1);
    ASSERT_TRUE(holders.ok()) << holders.status().message();
    LoadPlanOptions options;
    options.holders = &*holders;
    Result<LoadPlan> whole = PlanLoad(job.manifest, job.requests, options);
    ASSERT_TRUE(whole.ok()) << whole.status().message();
    const std::vector<LoadPlan> views = PlanAsTheRanksDo(job, &*holders).views;
    for (int rank = 0; rank < world; ++rank) {
      std::set<uint32_t> asked;
      for (const RequestedBox& box : job.requests[rank].boxes) asked.insert(box.tensor);
      for (const ChunkRead& r : views[rank].reads) {
        if (r.reader != rank) continue;
        EXPECT_EQ(rank / 2, holding_node) << "trial " << trial << ": rank " << rank << " reads";
        read_unasked |= asked.count(r.tensor) == 0;
      }
      EXPECT_EQ(PiecesOf(views[rank], rank), PiecesOf(*whole, rank)) << "trial " << trial << ", rank " << rank;
    }
  }
  EXPECT_TRUE(read_unasked) << "no trial had a holding rank read a tensor it did not ask for";
}

TEST(LoadPartitionTest, EveryPairSeesItsTransfersAlikeInEveryRoundWithinItsShares) {
  Rng rng(11);
  int trials_of_several_rounds = 0;
  int trials_granting_more_than_two_thirds = 0;
  int trials_sending_more_than_a_third = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int world = static_cast<int>(Uniform(rng, 2, 7));
    const Job job = RandomJob(rng, world);
    const std::vector<LoadPlan> views = Views(job);
    const uint64_t bound = Uniform(rng, 1, 12) * 512;
    std::vector<std::vector<std::string>> shares_to(world, std::vector<std::string>(world));
    std::vector<uint64_t> granted_by(world, 0);
    for (int c = 0; c < world; ++c) {
      std::vector<std::string> shares = ReaderShares(views[c], c, bound);
      // A consumer's shares never add up to more than the bound; one that sends less than a third of it may be
      // granted more than two thirds.
      uint64_t granted = 0;
      for (const std::string& message : shares) {
        ByteReader in(message, "share");
        uint64_t share = 0;
        if (in.U64(&share).ok()) granted += share;
      }
      EXPECT_LE(granted, bound) << "trial " << trial << ", rank " << c;
      trials_granting_more_than_two_thirds += 3 * granted > 2 * bound ? 1 : 0;
      granted_by[c] = granted;
      for (int p = 0; p < world; ++p) shares_to[p][c] = std::move(shares[p]);
    }
    std::vector<std::vector<uint32_t>> placed(world);
    uint32_t round_count = 0;
    for (int p = 0; p < world; ++p) {
      Result<std::vector<uint32_t>> own = PlaceOwnReads(views[p], p, shares_to[p], bound);
      ASSERT_TRUE(own.ok()) << own.status().message();
      placed[p] = std::move(own).value();
      for (size_t i = 0; i < views[p].reads.size(); ++i) {
        if (views[p].reads[i].reader == p) round_count = std::max(round_count, placed[p][i] + 1);
      }
    }
    trials_of_several_rounds += round_count > 1 ? 1 : 0;
    std::vector<std::vector<std::string>> rounds_to(world, std::vector<std::string>(world));
    for (int p = 0; p < world; ++p) {
      std::vector<std::string> rounds = TransferRounds(views[p], p, placed[p]);
      for (int c = 0; c < world; ++c) rounds_to[c][p] = std::move(rounds[c]);
    }
    std::vector<std::vector<LoadPlan>> cut(world);
    for (int r = 0; r < world; ++r) {
      Result<std::vector<LoadPlan>> rounds = CutIntoRounds(views[r], r, placed[r], rounds_to[r], round_count);
      ASSERT_TRUE(rounds.ok()) << rounds.status().message();
      cut[r] = std::move(rounds).value();
    }
    for (uint32_t k = 0; k < round_count; ++k) {
      for (int r = 0; r < world; ++r) {
        const LoadPlan& round = cut[r][k];
        // The placement's rule, as the header states it: in a round, a reader's send buffers stay within the bound
        // less the shares it granted, and what it sends a consumer within that consumer's share, except where one
        // read alone brings them there.
        uint64_t send = 0;
        std::map<int, uint64_t> to;
        std::set<uint32_t> sending_reads;
        std::map<int, std::set<uint32_t>> reads_to;
        std::set<std::pair<uint32_t, Box>> held_once;  // a region sent alone is held once, whoever it goes to
        for (const PeerBatch& out : OutgoingBatches(round, r)) {
          send += out.packed_bytes;
          to[out.peer] += out.packed_bytes;
          for (size_t i : out.packed) {
            sending_reads.insert(round.transfers[i].read);
            reads_to[out.peer].insert(round.transfers[i].read);
          }
          for (size_t i : out.separate) {
            const Transfer& t = round.transfers[i];
            if (held_once.emplace(t.read, t.region).second) send += t.bytes;
            to[out.peer] += t.bytes;
            sending_reads.insert(round.transfers[i].read);
            reads_to[out.peer].insert(round.transfers[i].read);
          }
        }
        EXPECT_TRUE(send + granted_by[r] <= bound || sending_reads.size() == 1)
            << "trial " << trial << ", round " << k << ", rank " << r << " sends " << send << " bytes, granted "
            << granted_by[r];
        trials_sending_more_than_a_third += sending_reads.size() > 1 && 3 * send > bound ? 1 : 0;
        for (const auto& [consumer, bytes] : to) {
          ByteReader in(shares_to[r][consumer], "share");
          uint64_t share = 0;
          ASSERT_TRUE(in.U64(&share).ok());
          EXPECT_TRUE(bytes <= share || reads_to[consumer].size() == 1)
              << "trial " << trial << ", round " << k << ": rank " << r << " sends rank " << consumer << " " << bytes
              << " bytes, its share is " << share;
        }
        for (const PeerBatch& out : OutgoingBatches(round, r)) {
          const std::vector<PeerBatch> in = IncomingBatches(cut[out.peer][k], out.peer);
          auto match = std::find_if(in.begin(), in.end(), [&](const PeerBatch& b) { return b.peer == r; });
          ASSERT_NE(match, in.end()) << "trial " << trial << ": rank " << out.peer << " expects nothing from " << r;
          EXPECT_EQ(out.offsets, match->offsets);
          EXPECT_EQ(out.packed_bytes, match->packed_bytes);
          ASSERT_EQ(out.separate.size(), match->separate.size());
          for (size_t i = 0; i < out.separate.size(); ++i) {
            EXPECT_EQ(round.transfers[out.separate[i]].region, cut[out.peer][k].transfers[match->separate[i]].region);
          }
        }
      }
    }
  }
  EXPECT_GT(trials_of_several_rounds, 10) << "the bounds are small enough to need several rounds in most jobs";
  EXPECT_GT(trials_granting_more_than_two_thirds, 0) << "no consumer was granted what it does not send";
  EXPECT_GT(trials_sending_more_than_a_third, 0) << "no reader sent into the room its own receives left";
}

// Steps 4a and 4b for every rank of a job: the rounds the readers need, with `bufferless[r]` on rank r.
uint32_t RoundsNeeded(const std::vector<LoadPlan>& views, uint64_t bound, const std::vector<Bufferless>& bufferless) {
  const int world = static_cast<int>(views.size());
  std::vector<std::vector<std::string>> shares_to(world, std::vector<std::string>(world));
  for (int c = 0; c < world; ++c) {
    std::vector<std::string> shares = ReaderShares(views[c], c, bound, bufferless[c]);
    for (int p = 0; p < world; ++p) shares_to[p][c] = std::move(shares[p]);
  }
  uint32_t rounds = 0;
  for (int p = 0; p < world; ++p) {
    Result<std::vector<uint32_t>> own = PlaceOwnReads(views[p], p, shares_to[p], bound, bufferless[p]);
    EXPECT_TRUE(own.ok()) << own.status().message();
    if (!own.ok()) return 0;
    for (size_t i = 0; i < views[p].reads.size(); ++i) {
      if (views[p].reads[i].reader == p) rounds = std::max(rounds, (*own)[i] + 1);
    }
  }
  return rounds;
}

// Where every rank receives each transfer in place and sends each from its own copy, no transfer takes round
// memory and every read fits the first round, though the same jobs with buffers need several.
TEST(LoadPartitionTest, TransfersThatTakeNoBufferTakeNoShareOfARound) {
  Rng rng(13);
  int trials_of_several_rounds = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int world = static_cast<int>(Uniform(rng, 2, 7));
    std::vector<LoadPlan> views = Views(RandomJob(rng, world));
    for (LoadPlan& view : views) view.separate_bytes = 1;  // every transfer a message of its own, as large ones are
    const uint64_t bound = Uniform(rng, 1, 12) * 512;
    const uint32_t buffered = RoundsNeeded(views, bound, std::vector<Bufferless>(world));
    trials_of_several_rounds += buffered > 1 ? 1 : 0;
    std::vector<Bufferless> none_buffered(world);
    for (int r = 0; r < world; ++r) none_buffered[r].assign(views[r].transfers.size(), true);
    EXPECT_LE(RoundsNeeded(views, bound, none_buffered), 1u)
        << "trial " << trial << " (" << buffered << " rounds with buffers)";
    // Received in place only: the readers' send buffers still bound their rounds, the consumers' shares no more.
    std::vector<Bufferless> received_in_place(world);
    for (int r = 0; r < world; ++r) {
      for (const Transfer& t : views[r].transfers) received_in_place[r].push_back(t.consumer == r);
    }
    EXPECT_LE(RoundsNeeded(views, bound, received_in_place), buffered) << "trial " << trial;
  }
  EXPECT_GT(trials_of_several_rounds, 10) << "the bounds are small enough to need several rounds in most jobs";
}

// A share whose in-place flags do not cover the transfers the reader sends that consumer is refused, naming it.
TEST(LoadPartitionTest, AShareWithTheWrongNumberOfInPlaceFlagsIsRefusedNamingItsConsumer) {
  Rng rng(17);
  for (int trial = 0; trial < 40; ++trial) {
    const int world = static_cast<int>(Uniform(rng, 2, 7));
    const std::vector<LoadPlan> views = Views(RandomJob(rng, world));
    for (int c = 0; c < world; ++c) {
      std::vector<std::string> shares = ReaderShares(views[c], c, 4096);
      for (int p = 0; p < world; ++p) {
        if (p == c || shares[p].empty()) continue;
        std::vector<std::string> to_reader(world);
        for (int other = 0; other < world; ++other) {
          if (other != p) to_reader[other] = ReaderShares(views[other], other, 4096)[p];
        }
        ByteReader in(shares[p], "share");
        uint64_t share = 0;
        std::string flags;
        ASSERT_TRUE(in.U64(&share).ok());
        ASSERT_TRUE(in.Bytes(&flags).ok());
        ByteWriter wrong;
        wrong.U64(share);
        wrong.Bytes(flags + '\0');
        to_reader[c] = wrong.Take();
        Result<std::vector<uint32_t>> placed = PlaceOwnReads(views[p], p, to_reader, 4096);
        EXPECT_EQ(placed.status().code(), Code::kCorrupt) << "trial " << trial;
        EXPECT_NE(placed.status().message().find("from rank " + std::to_string(c)), std::string::npos)
            << placed.status().message();
        return;
      }
    }
  }
  ADD_FAILURE() << "no trial had a consumer receive from another rank";
}

TEST(LoadPartitionTest, EachRankDecodesTheChunksOfTheTensorsItPlansOrReadsAndNoOthers) {
  Rng rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const int world = static_cast<int>(Uniform(rng, 2, 7));
    const Job job = RandomJob(rng, world);
    const Planned planned = PlanAsTheRanksDo(job);
    for (int rank = 0; rank < world; ++rank) {
      std::set<uint32_t> needed;  // what it owns and someone asked for, and what it reads
      for (const LoadRequest& request : job.requests) {
        for (const RequestedBox& box : request.boxes) {
          if (KeyChecker(job.manifest.tensors[box.tensor].key, world) == rank) needed.insert(box.tensor);
        }
      }
      for (const ChunkRead& read : planned.views[rank].reads) {
        if (read.reader == rank) needed.insert(read.tensor);
      }
      EXPECT_EQ(planned.decoded[rank], needed) << "trial " << trial << ", rank " << rank;
    }
  }
}

TEST(LoadPartitionTest, MalformedMessagesAreRefusedNamingTheirSender) {
  const Manifest manifest =
      WithTensors({Stored("a", {4, 4}, {Box{{0, 0}, {4, 4}}}), Stored("b", {4}, {Box{{0}, {4}}})});
  const int world = 2;
  // A request for a tensor sent to the rank that does not own it.
  LoadRequest request{0, "n", {RequestedBox{0, Box{{0, 0}, {4, 4}}}}};
  const int owner = KeyChecker("a", world);
  std::vector<std::string> misrouted(world);
  misrouted[0] = EncodeLoadRequest(request);
  Result<std::vector<LoadRequest>> refused = DecodeOwnedRequests(misrouted, manifest, 1 - owner);
  EXPECT_EQ(refused.status().code(), Code::kCorrupt);
  EXPECT_NE(refused.status().message().find("does not own it"), std::string::npos) << refused.status().message();

  // A plan part that gives its reader a chunk the manifest lacks, then blocks past the end of one it has.
  auto decoded = [](const std::vector<uint32_t>&) { return Status::Ok(); };
  for (const ChunkRead& read : {ChunkRead{0, 5, 0, 0, 1, 64}, ChunkRead{0, 0, 0, 1, 1, 64}}) {
    LoadPlan plan;
    plan.reads.push_back(read);
    plan.read_bytes_per_rank.assign(world, 0);
    std::vector<std::string> parts = RouteLoadPlan(plan, world);
    std::vector<std::string> incoming(world);
    incoming[1] = parts[0];
    Result<LoadPlan> merged = MergeLoadPlan(incoming, 0, manifest, decoded);
    EXPECT_EQ(merged.status().code(), Code::kCorrupt);
    EXPECT_NE(merged.status().message().find("rank 1"), std::string::npos) << merged.status().message();
    incoming[1] = parts[0].substr(0, parts[0].size() - 1);
    EXPECT_EQ(MergeLoadPlan(incoming, 0, manifest, decoded).status().code(), Code::kCorrupt) << "a truncated part";
  }

  // Rounds from a reader that sends this rank nothing.
  LoadPlan empty;
  empty.read_bytes_per_rank.assign(world, 0);
  ByteWriter rounds;
  rounds.U32(1);
  rounds.U32(0);
  std::vector<std::string> from_readers(world);
  from_readers[1] = rounds.Take();
  Result<std::vector<LoadPlan>> cut = CutIntoRounds(empty, 0, {}, from_readers, 1);
  EXPECT_EQ(cut.status().code(), Code::kCorrupt);
  EXPECT_NE(cut.status().message().find("rank 1"), std::string::npos) << cut.status().message();
}

}  // namespace
}  // namespace ckpt::runtime
