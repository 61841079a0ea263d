#include "runtime/load/load_partition.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "common/bytes.h"
#include "io/checksum.h"
#include "runtime/core/descriptor.h"

namespace ckpt::runtime {
namespace {

constexpr uint32_t kMaxEntries = 1u << 26;
// Smallest encodings, which bound each count by what is left of the message.
constexpr size_t kMinReadBytes = 4 + 4 + 4 + 4 + 3 * 8;
constexpr size_t kMinTransferBytes = 4 + 4 + 2 * 4 + 8;

// One rank's part of an owner's plan: reads (its own, and those its incoming transfers come from), each with its
// index in the owner's plan (what tells apart two reads of one block by groups of regions that share it, and orders
// them alike on every rank), and transfers and local copies indexing them.
struct PlanPart {
  std::vector<ChunkRead> reads;
  std::vector<uint32_t> ordinals;
  std::vector<Transfer> transfers;
  std::vector<Transfer> local_copies;
};

void EncodeTransfer(const Transfer& t, ByteWriter* w) {
  w->U32(t.read);
  w->I32(t.consumer);
  w->U64s(t.region.offset);
  w->U64s(t.region.shape);
  w->U64(t.bytes);
}

std::string EncodePart(const PlanPart& part) {
  ByteWriter w;
  w.U32(static_cast<uint32_t>(part.reads.size()));
  for (size_t i = 0; i < part.reads.size(); ++i) {
    const ChunkRead& r = part.reads[i];
    w.U32(part.ordinals[i]);
    w.U32(r.tensor);
    w.U32(r.chunk);
    w.I32(r.reader);
    w.U64(r.first_block);
    w.U64(r.block_count);
    w.U64(r.bytes);
  }
  for (const std::vector<Transfer>* list : {&part.transfers, &part.local_copies}) {
    w.U32(static_cast<uint32_t>(list->size()));
    for (const Transfer& t : *list) EncodeTransfer(t, &w);
  }
  return w.Take();
}

// Checks what the planner's arithmetic and the exchange rely on: regions of the tensor's dimensions, ranks inside the
// world. Reads are checked against their chunks by their readers alone (CheckOwnRead), who decode those chunks.
Result<PlanPart> DecodePart(std::string_view bytes, int owner, int world_size, const Manifest& manifest) {
  const std::string source = "load plan from rank " + std::to_string(owner);
  ByteReader r(bytes, source);
  PlanPart part;
  uint32_t count = 0;
  RETURN_IF_ERROR(r.Count(&count, kMaxEntries, kMinReadBytes));
  part.reads.resize(count);
  part.ordinals.resize(count);
  for (size_t i = 0; i < count; ++i) {
    ChunkRead& read = part.reads[i];
    RETURN_IF_ERROR(r.U32(&part.ordinals[i]));
    RETURN_IF_ERROR(r.U32(&read.tensor));
    RETURN_IF_ERROR(r.U32(&read.chunk));
    RETURN_IF_ERROR(r.I32(&read.reader));
    RETURN_IF_ERROR(r.U64(&read.first_block));
    RETURN_IF_ERROR(r.U64(&read.block_count));
    RETURN_IF_ERROR(r.U64(&read.bytes));
    if (read.tensor >= manifest.tensors.size() || read.reader < 0 || read.reader >= world_size) {
      return Corrupt(source + ": a read names a tensor or a reader that does not exist");
    }
  }
  for (std::vector<Transfer>* list : {&part.transfers, &part.local_copies}) {
    RETURN_IF_ERROR(r.Count(&count, kMaxEntries, kMinTransferBytes));
    list->resize(count);
    for (Transfer& t : *list) {
      RETURN_IF_ERROR(r.U32(&t.read));
      RETURN_IF_ERROR(r.I32(&t.consumer));
      RETURN_IF_ERROR(r.U64s(&t.region.offset, kMaxDims));
      RETURN_IF_ERROR(r.U64s(&t.region.shape, kMaxDims));
      RETURN_IF_ERROR(r.U64(&t.bytes));
      if (t.read >= part.reads.size() || t.consumer < 0 || t.consumer >= world_size) {
        return Corrupt(source + ": a transfer names a read or a rank that does not exist");
      }
      const TensorRecord& tensor = manifest.tensors[part.reads[t.read].tensor];
      if (t.region.offset.size() != tensor.shape.size() || t.region.shape.size() != tensor.shape.size() ||
          !Contains(WholeBox(tensor.shape), t.region)) {
        return Corrupt(source + ": a transfer's region lies outside tensor '" + tensor.key + "'");
      }
    }
  }
  RETURN_IF_ERROR(r.ExpectDone());
  return part;
}

// The blocks a reader is told to read lie inside the chunk, which exists.
Status CheckOwnRead(const ChunkRead& read, int owner, const Manifest& manifest) {
  const TensorRecord& tensor = manifest.tensors[read.tensor];
  const std::string source = "load plan from rank " + std::to_string(owner);
  if (read.chunk >= tensor.chunks.size()) {
    return Corrupt(source + ": a read names chunk " + std::to_string(read.chunk) + " of tensor '" + tensor.key +
                   "', which has " + std::to_string(tensor.chunks.size()));
  }
  const StoredBytes& stored = tensor.chunks[read.chunk].bytes;
  const uint64_t blocks = stored.block_size == 0 ? 0 : io::BlockCount(stored.byte_length, stored.block_size);
  if (read.block_count == 0 || read.first_block >= blocks || read.block_count > blocks - read.first_block) {
    return Corrupt(source + ": a read of tensor '" + tensor.key + "' lies outside its chunk");
  }
  return Status::Ok();
}

// The tensors of the boxes asked for.
std::vector<uint32_t> RequestedTensors(const std::vector<LoadRequest>& requests) {
  std::vector<uint32_t> tensors;
  for (const LoadRequest& request : requests) {
    for (const RequestedBox& box : request.boxes) tensors.push_back(box.tensor);
  }
  return tensors;
}

bool IsBufferless(const Bufferless& bufferless, size_t transfer) { return !bufferless.empty() && bufferless[transfer]; }

// The pair's in-place flags as a share message carries them: one bit per transfer, in the pair's order.
std::string PackFlags(const std::vector<bool>& flags) {
  std::string bits((flags.size() + 7) / 8, '\0');
  for (size_t i = 0; i < flags.size(); ++i) {
    if (flags[i]) bits[i / 8] = static_cast<char>(bits[i / 8] | (1 << (i % 8)));
  }
  return bits;
}

// What each read of `rank` takes in its send buffers (by index into view.reads; 0 for other readers' reads): its
// small transfers each, and each large region once whatever the number of its consumers, unless `bufferless` says it
// is sent from this rank's own copy.
std::vector<uint64_t> SendCosts(const LoadPlan& view, int rank, const Bufferless& bufferless) {
  std::vector<uint64_t> send(view.reads.size(), 0);
  std::vector<std::vector<Box>> sent_alone(view.reads.size());
  for (size_t i = 0; i < view.transfers.size(); ++i) {
    const Transfer& t = view.transfers[i];
    if (view.reads[t.read].reader != rank || IsBufferless(bufferless, i)) continue;
    std::vector<Box>& sent = sent_alone[t.read];
    if (t.bytes < view.separate_bytes) {
      send[t.read] += TransferBufferBytes(view, t);
    } else if (std::find(sent.begin(), sent.end(), t.region) == sent.end()) {
      sent.push_back(t.region);
      send[t.read] += TransferBufferBytes(view, t);
    }
  }
  return send;
}

// What a consumer offers the ranks that send it something: each one's share of a round's receive buffers, and
// which of its transfers (in the pair's order) it receives in place; and what the shares add up to.
struct OfferedShares {
  std::map<int, uint64_t> share;
  std::map<int, std::vector<bool>> in_place;
  uint64_t total = 0;
};

OfferedShares OfferShares(const LoadPlan& view, int rank, uint64_t max_bytes, const Bufferless& bufferless) {
  // The bound less what this rank's own sends need in a round, up to a third of it, in two halves (PlaceOwnReads then
  // lets the sends take whatever the shares leave).
  uint64_t sending = 0;
  for (uint64_t bytes : SendCosts(view, rank, bufferless)) sending += bytes;
  const uint64_t pool = (max_bytes - std::min(sending, max_bytes / 3)) / 2;
  std::map<int, uint64_t> from;
  OfferedShares offered;
  uint64_t total = 0;
  for (size_t i = 0; i < view.transfers.size(); ++i) {
    const Transfer& t = view.transfers[i];
    if (t.consumer != rank) continue;
    const int reader = view.reads[t.read].reader;
    const bool bufferless_here = IsBufferless(bufferless, i);
    offered.in_place[reader].push_back(bufferless_here);
    if (bufferless_here) continue;
    from[reader] += TransferBufferBytes(view, t);
    total += TransferBufferBytes(view, t);
  }
  for (const auto& [reader, flags] : offered.in_place) {
    // What fits in the pool's two halves comes at once. Otherwise each reader gets the larger of an equal part of one
    // half and a part of the other in proportion to what it sends: a reader sending much needs no more rounds than
    // the others, one sending many small pieces is not held to one a round. The shares add up to at most the bound
    // less this rank's sends: two thirds of it where this rank sends much, all of it where it sends nothing.
    // A reader whose every transfer lands in place needs no share.
    const uint64_t bytes = from.count(reader) ? from.at(reader) : 0;
    const uint64_t proportional = total == 0 ? 0 : static_cast<uint64_t>(static_cast<double>(pool) * bytes / total);
    const uint64_t share =
        total <= 2 * pool || bytes == 0 ? bytes : std::max<uint64_t>({1, proportional, pool / from.size()});
    offered.share[reader] = share;
    offered.total += share;
  }
  return offered;
}

}  // namespace

std::vector<std::string> PartitionLoadRequest(const LoadRequest& mine, const Manifest& manifest, int world_size) {
  std::vector<LoadRequest> parts(world_size);
  for (const RequestedBox& box : mine.boxes) {
    parts[KeyChecker(manifest.tensors[box.tensor].key, world_size)].boxes.push_back(box);
  }
  std::vector<std::string> messages(world_size);
  for (int owner = 0; owner < world_size; ++owner) {
    if (parts[owner].boxes.empty()) continue;
    parts[owner].rank = mine.rank;
    parts[owner].node = mine.node;
    messages[owner] = EncodeLoadRequest(parts[owner]);
  }
  return messages;
}

Result<std::vector<LoadRequest>> DecodeOwnedRequests(const std::vector<std::string>& incoming, const Manifest& manifest,
                                                     int owner) {
  const int world_size = static_cast<int>(incoming.size());
  std::vector<LoadRequest> requests(world_size);
  for (int from = 0; from < world_size; ++from) {
    requests[from].rank = from;
    if (incoming[from].empty()) continue;
    ASSIGN_OR_RETURN(requests[from], DecodeLoadRequest(incoming[from], from, manifest));
    for (const RequestedBox& box : requests[from].boxes) {
      const std::string& key = manifest.tensors[box.tensor].key;
      if (KeyChecker(key, world_size) != owner) {
        return Corrupt("load request from rank " + std::to_string(from) + " gives tensor '" + key + "' to rank " +
                       std::to_string(owner) + ", which does not own it");
      }
    }
  }
  return requests;
}

std::vector<std::string> RouteLoadPlan(const LoadPlan& plan, int world_size) {
  std::vector<PlanPart> parts(world_size);
  // Each rank's own index of a read of the plan, added the first time the rank needs it.
  std::vector<std::map<uint32_t, uint32_t>> index(world_size);
  auto read_for = [&](int rank, uint32_t read) {
    auto [it, added] = index[rank].emplace(read, static_cast<uint32_t>(parts[rank].reads.size()));
    if (added) {
      parts[rank].reads.push_back(plan.reads[read]);
      parts[rank].ordinals.push_back(read);
    }
    return it->second;
  };
  for (uint32_t i = 0; i < plan.reads.size(); ++i) read_for(plan.reads[i].reader, i);
  for (const Transfer& t : plan.transfers) {
    for (int rank : {plan.reads[t.read].reader, t.consumer}) {
      Transfer copy = t;
      copy.read = read_for(rank, t.read);
      parts[rank].transfers.push_back(std::move(copy));
    }
  }
  for (const Transfer& t : plan.local_copies) {
    const int reader = plan.reads[t.read].reader;
    Transfer copy = t;
    copy.read = read_for(reader, t.read);
    parts[reader].local_copies.push_back(std::move(copy));
  }
  std::vector<std::string> messages(world_size);
  for (int rank = 0; rank < world_size; ++rank) {
    if (!parts[rank].reads.empty()) messages[rank] = EncodePart(parts[rank]);
  }
  return messages;
}

Result<std::vector<std::string>> PlanOwnedTensors(const std::vector<std::string>& incoming, const Manifest& manifest,
                                                  int owner, const ChunkDecoder& decode_chunks,
                                                  const FileHolders* holders) {
  ASSIGN_OR_RETURN(const std::vector<LoadRequest> owned, DecodeOwnedRequests(incoming, manifest, owner));
  RETURN_IF_ERROR(decode_chunks(RequestedTensors(owned)));
  LoadPlanOptions options;
  options.rotation = owner;
  options.holders = holders;
  ASSIGN_OR_RETURN(const LoadPlan plan, PlanLoad(manifest, owned, options));
  return RouteLoadPlan(plan, static_cast<int>(incoming.size()));
}

Result<LoadPlan> MergeLoadPlan(const std::vector<std::string>& incoming, int rank, const Manifest& manifest,
                               const ChunkDecoder& decode_chunks) {
  const int world_size = static_cast<int>(incoming.size());
  std::vector<PlanPart> parts(world_size);
  std::vector<ChunkIndex> read_here;  // the chunks this rank reads: only their records are decoded
  for (int owner = 0; owner < world_size; ++owner) {
    if (incoming[owner].empty()) continue;
    ASSIGN_OR_RETURN(parts[owner], DecodePart(incoming[owner], owner, world_size, manifest));
    for (const ChunkRead& read : parts[owner].reads) {
      if (read.reader == rank) read_here.push_back(ChunkIndex{read.tensor, read.chunk});
    }
  }
  RETURN_IF_ERROR(decode_chunks.Records(read_here));
  std::vector<ChunkRead> reads;
  std::vector<uint32_t> ordinals;
  std::vector<std::pair<size_t, Transfer>> transfers, copies;  // (index into `reads`, the transfer)
  for (int owner = 0; owner < world_size; ++owner) {
    const PlanPart& part = parts[owner];
    for (const ChunkRead& read : part.reads) {
      if (read.reader == rank) RETURN_IF_ERROR(CheckOwnRead(read, owner, manifest));
    }
    const size_t base = reads.size();
    reads.insert(reads.end(), part.reads.begin(), part.reads.end());
    ordinals.insert(ordinals.end(), part.ordinals.begin(), part.ordinals.end());
    for (const Transfer& t : part.transfers) {
      if (part.reads[t.read].reader != rank && t.consumer != rank) {
        return Corrupt("load plan from rank " + std::to_string(owner) + " gives rank " + std::to_string(rank) +
                       " a transfer between other ranks");
      }
      transfers.emplace_back(base + t.read, t);
    }
    for (const Transfer& t : part.local_copies) {
      if (part.reads[t.read].reader != rank || t.consumer != rank) {
        return Corrupt("load plan from rank " + std::to_string(owner) + " gives rank " + std::to_string(rank) +
                       " another rank's local copy");
      }
      copies.emplace_back(base + t.read, t);
    }
  }
  // Reads in (tensor, chunk, block) order, then their owner's; transfers of a pair in the order of their reads, then
  // regions.
  auto identity = [&](size_t i) { return std::make_tuple(ReadOrder(reads[i]), ordinals[i]); };
  std::vector<size_t> order(reads.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return identity(a) < identity(b); });
  std::vector<uint32_t> position(reads.size());
  LoadPlan view;
  view.read_bytes_per_rank.assign(world_size, 0);
  view.separate_bytes = LoadPlanOptions{}.separate_bytes;
  for (size_t i = 0; i < order.size(); ++i) {
    const ChunkRead& read = reads[order[i]];
    if (i > 0 && identity(order[i - 1]) == identity(order[i])) {
      return Corrupt("load plan gives rank " + std::to_string(rank) + " the same read of tensor '" +
                     manifest.tensors[read.tensor].key + "' twice");
    }
    position[order[i]] = static_cast<uint32_t>(i);
    view.reads.push_back(read);
    if (read.reader == rank) view.read_bytes_per_rank[rank] += read.bytes;
  }
  for (auto& [read, t] : transfers) t.read = position[read];
  for (auto& [read, t] : copies) t.read = position[read];
  // By reference: a tuple of copies would copy each region's two vectors on every comparison.
  auto pair_order = [&](const std::pair<size_t, Transfer>& a, const std::pair<size_t, Transfer>& b) {
    return std::tie(view.reads[a.second.read].reader, a.second.consumer, a.second.read, a.second.region) <
           std::tie(view.reads[b.second.read].reader, b.second.consumer, b.second.read, b.second.region);
  };
  std::sort(transfers.begin(), transfers.end(), pair_order);
  std::sort(copies.begin(), copies.end(), pair_order);
  for (auto& [read, t] : transfers) view.transfers.push_back(std::move(t));
  for (auto& [read, t] : copies) view.local_copies.push_back(std::move(t));
  return view;
}

std::vector<std::string> ReaderShares(const LoadPlan& view, int rank, uint64_t max_bytes,
                                      const Bufferless& bufferless) {
  const OfferedShares offered = OfferShares(view, rank, max_bytes, bufferless);
  std::vector<std::string> messages(view.read_bytes_per_rank.size());
  for (const auto& [reader, flags] : offered.in_place) {
    ByteWriter w;
    w.U64(offered.share.at(reader));
    w.Bytes(PackFlags(flags));
    messages[reader] = w.Take();
  }
  return messages;
}

Result<std::vector<uint32_t>> PlaceOwnReads(const LoadPlan& view, int rank,
                                            const std::vector<std::string>& reader_shares, uint64_t max_bytes,
                                            const Bufferless& bufferless) {
  // The bound less the receive buffers this rank offered its senders (ReaderShares): at least a third of it where it
  // sends that much, all of it where it receives everything in place.
  const uint64_t offered = OfferShares(view, rank, max_bytes, bufferless).total;
  const uint64_t send_bound = max_bytes - std::min(offered, max_bytes);
  // Each consumer's share and in-place bits, and how many of this rank's transfers to it have been taken.
  struct ConsumerTerms {
    uint64_t share = 0;
    std::string in_place;
    size_t taken = 0;
  };
  std::map<int, ConsumerTerms> terms;
  std::map<int, size_t> transfers_to;
  for (const Transfer& t : view.transfers) {
    if (view.reads[t.read].reader == rank) ++transfers_to[t.consumer];
  }
  for (const auto& [consumer, count] : transfers_to) {
    const std::string source = "receive share from rank " + std::to_string(consumer);
    ByteReader in(reader_shares[consumer], source);
    ConsumerTerms& c = terms[consumer];
    RETURN_IF_ERROR(in.U64(&c.share));
    RETURN_IF_ERROR(in.Bytes(&c.in_place));
    RETURN_IF_ERROR(in.ExpectDone());
    if (c.in_place.size() != (count + 7) / 8) {
      return Corrupt(source + " names " + std::to_string(c.in_place.size()) + " bytes of in-place flags for the " +
                     std::to_string(count) + " transfers this rank sends it");
    }
  }
  // What each of this rank's reads costs it (send buffers: a separate region once whatever its consumers) and each
  // consumer (receive buffers).
  struct Cost {
    uint64_t send = 0;
    std::map<int, uint64_t> to;
  };
  std::vector<Cost> costs(view.reads.size());
  const std::vector<uint64_t> send_costs = SendCosts(view, rank, bufferless);
  for (size_t i = 0; i < view.reads.size(); ++i) costs[i].send = send_costs[i];
  for (size_t i = 0; i < view.transfers.size(); ++i) {
    const Transfer& t = view.transfers[i];
    if (view.reads[t.read].reader != rank) continue;
    ConsumerTerms& c = terms[t.consumer];
    const size_t bit = c.taken++;
    const bool received_in_place = (c.in_place[bit / 8] >> (bit % 8)) & 1;
    if (!received_in_place) costs[t.read].to[t.consumer] += TransferBufferBytes(view, t);
  }
  std::vector<size_t> order;
  for (size_t i = 0; i < view.reads.size(); ++i) {
    if (view.reads[i].reader == rank) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (costs[a].send != costs[b].send) return costs[a].send > costs[b].send;
    return a < b;  // the view's order: by chunk and block
  });
  struct Usage {
    uint64_t send = 0;
    std::map<int, uint64_t> to;
  };
  std::vector<Usage> rounds;
  std::vector<uint32_t> round_of(view.reads.size(), 0);
  // A read fits a round where what it adds stays within the bounds, or where the round holds nothing it adds to.
  auto fits = [&](const Cost& cost, const Usage& used) {
    if (used.send > 0 && used.send + cost.send > send_bound) return false;
    for (const auto& [consumer, bytes] : cost.to) {
      auto it = used.to.find(consumer);
      if (it != used.to.end() && it->second + bytes > terms[consumer].share) return false;
    }
    return true;
  };
  for (size_t i : order) {
    size_t round = 0;
    while (round < rounds.size() && !fits(costs[i], rounds[round])) ++round;
    if (round == rounds.size()) rounds.emplace_back();
    rounds[round].send += costs[i].send;
    for (const auto& [consumer, bytes] : costs[i].to) rounds[round].to[consumer] += bytes;
    round_of[i] = static_cast<uint32_t>(round);
  }
  return round_of;
}

std::vector<std::string> TransferRounds(const LoadPlan& view, int rank, const std::vector<uint32_t>& round_of_read) {
  std::map<int, std::vector<uint32_t>> rounds;  // by consumer, in the pair's order
  for (const Transfer& t : view.transfers) {
    if (view.reads[t.read].reader == rank) rounds[t.consumer].push_back(round_of_read[t.read]);
  }
  std::vector<std::string> messages(view.read_bytes_per_rank.size());
  for (const auto& [consumer, list] : rounds) {
    ByteWriter w;
    w.U32s(list);
    messages[consumer] = w.Take();
  }
  return messages;
}

Result<std::vector<LoadPlan>> CutIntoRounds(const LoadPlan& view, int rank, std::vector<uint32_t> round_of_read,
                                            const std::vector<std::string>& transfer_rounds, uint32_t round_count) {
  const int world_size = static_cast<int>(view.read_bytes_per_rank.size());
  for (size_t i = 0; i < view.reads.size(); ++i) {
    if (view.reads[i].reader == rank && round_of_read[i] >= round_count) {
      return Internal("a read was placed past the agreed " + std::to_string(round_count) + " rounds");
    }
  }
  // Each reader's rounds, in the pair's order, taken in turn as the view's transfers from that reader come.
  std::vector<std::vector<uint32_t>> from(world_size);
  for (int reader = 0; reader < world_size; ++reader) {
    if (reader == rank || transfer_rounds[reader].empty()) continue;
    ByteReader in(transfer_rounds[reader], "transfer rounds from rank " + std::to_string(reader));
    RETURN_IF_ERROR(in.U32s(&from[reader], kMaxEntries));
    RETURN_IF_ERROR(in.ExpectDone());
  }
  std::vector<size_t> taken(world_size, 0);
  for (const Transfer& t : view.transfers) {
    const int reader = view.reads[t.read].reader;
    if (t.consumer != rank || reader == rank) continue;
    const std::string source = "transfer rounds from rank " + std::to_string(reader);
    if (taken[reader] == from[reader].size()) return Corrupt(source + " do not match the transfers it sends");
    const uint32_t round = from[reader][taken[reader]++];
    if (round >= round_count) {
      return Corrupt(source + " name round " + std::to_string(round) + " of " + std::to_string(round_count));
    }
    round_of_read[t.read] = round;
  }
  for (int reader = 0; reader < world_size; ++reader) {
    if (taken[reader] != from[reader].size()) {
      return Corrupt("transfer rounds from rank " + std::to_string(reader) + " do not match the transfers it sends");
    }
  }
  std::vector<LoadPlan> rounds(round_count);
  for (LoadPlan& round : rounds) {
    round.read_bytes_per_rank.assign(world_size, 0);
    round.separate_bytes = view.separate_bytes;
  }
  std::vector<uint32_t> index_in_round(view.reads.size());
  for (size_t i = 0; i < view.reads.size(); ++i) {
    LoadPlan& round = rounds[round_of_read[i]];
    index_in_round[i] = static_cast<uint32_t>(round.reads.size());
    round.reads.push_back(view.reads[i]);
    if (view.reads[i].reader == rank) round.read_bytes_per_rank[rank] += view.reads[i].bytes;
  }
  auto move_into_round = [&](const Transfer& t, std::vector<Transfer> LoadPlan::*list) {
    Transfer moved = t;
    moved.read = index_in_round[t.read];
    (rounds[round_of_read[t.read]].*list).push_back(std::move(moved));
  };
  for (const Transfer& t : view.transfers) move_into_round(t, &LoadPlan::transfers);
  for (const Transfer& t : view.local_copies) move_into_round(t, &LoadPlan::local_copies);
  return rounds;
}

}  // namespace ckpt::runtime
