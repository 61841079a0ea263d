// The read-once load's planning, partitioned by tensor so that no rank handles every rank's request (issue #12):
//   1. each rank sends the boxes it wants of each tensor only to the tensor's owner (KeyChecker of its key);
//   2. each owner plans its tensors (PlanLoad over the requests it received) and sends each rank its part of the
//      plan: the reads it performs, and every transfer it sends or receives, with the read it comes from;
//   3. each rank merges those parts into its own view of the plan (LoadPlan, holding only what involves it);
//   4. rounds: each reader places its reads in rounds so that, in any round, its send buffers stay within the memory
//      bound less the shares it gave its own senders, and what it sends any one consumer within the share that
//      consumer gave it (the shares of one consumer add up to at most the bound less what its own sends may take in a
//      round: two thirds of it where it sends a third or more, all of it where it sends nothing; a rank that receives
//      everything in place gives none, and sends up to the whole bound a round); the readers then tell each consumer
//      the round of every transfer it receives. Every rank runs the largest number of rounds any reader needs.
// What a rank sends and receives grows with its own requests and reads, not with the job.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/format/manifest.h"
#include "runtime/load/load_plan.h"

namespace ckpt::runtime {

// Step 1, sender: `mine` split by the owner of each box's tensor, one message per rank (empty where none).
std::vector<std::string> PartitionLoadRequest(const LoadRequest& mine, const Manifest& manifest, int world_size);

// Step 1, owner: every rank's request for the tensors `owner` owns (an empty request where a rank sent nothing).
// kCorrupt naming the sender for a malformed message, a box outside its tensor, or a tensor `owner` does not own.
Result<std::vector<LoadRequest>> DecodeOwnedRequests(const std::vector<std::string>& incoming, const Manifest& manifest,
                                                     int owner);

// Step 2, owner: each rank's part of `plan` (empty where it is in none of it).
std::vector<std::string> RouteLoadPlan(const LoadPlan& plan, int world_size);

// Steps 1 and 2, owner: DecodeOwnedRequests, the chunks of the tensors asked for decoded, PlanLoad with ties rotated
// to start at `owner` (so that owners do not all favour the same readers) and readers limited to `holders` where
// set (LoadPlanOptions::holders: every owner holds the same table), RouteLoadPlan.
Result<std::vector<std::string>> PlanOwnedTensors(const std::vector<std::string>& incoming, const Manifest& manifest,
                                                  int owner, const ChunkDecoder& decode_chunks,
                                                  const FileHolders* holders = nullptr);

// Step 3: this rank's view of the plan, in the orders LoadPlan documents (transfers of a pair in the order of their
// reads, then regions, the same on both sides), with the records of the chunks it reads decoded
// (ChunkDecoder::Records). kCorrupt naming the owner for a malformed part, one that gives this rank a read of blocks
// its chunk lacks, or a transfer that does not involve `rank`.
Result<LoadPlan> MergeLoadPlan(const std::vector<std::string>& incoming, int rank, const Manifest& manifest,
                               const ChunkDecoder& decode_chunks);

// Which transfers of a view take no round memory on this rank, by index into view.transfers: true where the
// exchange receives the transfer straight into this rank's destination, sends it from where this rank's own copy of
// the region already lies, or sends a small region this rank already sends another consumer from the one copy of it
// (runtime/load/exchange_load.h: BufferlessTransfers). Rounds bound only what takes
// memory, so that a replicated tensor received in place by every data-parallel rank does not multiply the rounds.
// Empty: every transfer takes a buffer.
using Bufferless = std::vector<bool>;

// Step 4a, consumer: to each rank that sends it anything, the bytes that rank may send it in one round, counting
// only the transfers `bufferless` does not name, and which of that rank's transfers to it (in the pair's order) it
// receives in place; `max_bytes` is the memory bound of a round.
std::vector<std::string> ReaderShares(const LoadPlan& view, int rank, uint64_t max_bytes,
                                      const Bufferless& bufferless = {});

// Step 4b, reader: the round of each of this rank's reads (indexed as view.reads; other readers' reads get 0),
// given what each consumer sent in step 4a, its send buffers within `max_bytes` less the shares this rank gave in
// step 4a (ReaderShares with the same `max_bytes` and `bufferless`); transfers its consumer receives in place, or that
// `bufferless` says this rank sends from its own destination, cost no round memory. A read that alone exceeds a bound
// gets a round where it adds to nothing else of what that bound limits. kCorrupt naming the consumer for a share that
// does not match the view.
Result<std::vector<uint32_t>> PlaceOwnReads(const LoadPlan& view, int rank,
                                            const std::vector<std::string>& reader_shares, uint64_t max_bytes,
                                            const Bufferless& bufferless = {});

// Step 4c, reader: to each consumer, the rounds of the transfers it sends it, in the pair's order.
std::vector<std::string> TransferRounds(const LoadPlan& view, int rank, const std::vector<uint32_t>& round_of_read);

// Step 4d: the rounds of every read of the view (own ones from `round_of_read`, the others from their readers'
// messages), and the view cut into `round_count` rounds, each a plan of its own, re-indexed within the round.
// kCorrupt naming the reader for a message that does not match the view, or a round not below `round_count`.
Result<std::vector<LoadPlan>> CutIntoRounds(const LoadPlan& view, int rank, std::vector<uint32_t> round_of_read,
                                            const std::vector<std::string>& transfer_rounds, uint32_t round_count);

}  // namespace ckpt::runtime
