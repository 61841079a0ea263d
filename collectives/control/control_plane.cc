#include "collectives/control/control_plane.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "common/bytes.h"

namespace ckpt::coll {

Status ControlPlane::Barrier() { return AllGather(std::string_view()).status(); }

Result<std::vector<std::string>> ControlPlane::AllToAllV(std::vector<std::string> outgoing,
                                                         std::chrono::milliseconds within) {
  if (outgoing.size() != static_cast<size_t>(world_size())) {
    return InvalidArgument("alltoall given " + std::to_string(outgoing.size()) + " messages for " +
                           std::to_string(world_size()) + " ranks");
  }
  ByteWriter mine;
  for (const std::string& message : outgoing) mine.Bytes(message);
  ASSIGN_OR_RETURN(std::vector<std::string> gathered, AllGatherWithin(mine.data(), within));
  std::vector<std::string> incoming(gathered.size());
  for (size_t from = 0; from < gathered.size(); ++from) {
    ByteReader reader(gathered[from], "alltoall messages of rank " + std::to_string(from));
    for (int to = 0; to <= rank(); ++to) RETURN_IF_ERROR(reader.Bytes(&incoming[from]));
  }
  return incoming;
}

Result<std::string> ControlPlane::Broadcast(std::string_view from_root, std::chrono::milliseconds within) {
  ASSIGN_OR_RETURN(std::vector<std::string> gathered,
                   AllGatherWithin(rank() == 0 ? from_root : std::string_view(), within));
  return std::move(gathered[0]);
}

namespace {

// The user's callback moves equal-sized blocks only, so every AllGather costs two calls: one for the sizes (a u64
// per rank), one for the contributions padded to the largest.
class CallbackControlPlane : public ControlPlane {
 public:
  CallbackControlPlane(int rank, int world_size, AllGatherCallback allgather)
      : rank_(rank), world_size_(world_size), allgather_(std::move(allgather)) {}

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }

  Result<std::vector<std::string>> AllGather(std::string_view mine) override {
    if (!allgather_) return InvalidArgument("no allgather callback was given");
    if (world_size_ < 1 || rank_ < 0 || rank_ >= world_size_) {
      return InvalidArgument("rank " + std::to_string(rank_) + " is out of range for world size " +
                             std::to_string(world_size_));
    }
    ASSIGN_OR_RETURN(std::vector<uint64_t> sizes, GatherSizes(mine.size()));
    const uint64_t block = *std::max_element(sizes.begin(), sizes.end());
    std::vector<std::string> gathered(world_size_);
    // Every rank sees the same sizes, so every rank skips the second call together.
    if (block == 0) return gathered;
    if (block > std::numeric_limits<size_t>::max() / static_cast<uint64_t>(world_size_)) {
      return InvalidArgument("allgather blocks of " + std::to_string(block) + " bytes from " +
                             std::to_string(world_size_) + " ranks do not fit in memory");
    }
    std::string padded(block, '\0');
    std::copy(mine.begin(), mine.end(), padded.begin());
    std::string received(block * world_size_, '\0');
    RETURN_IF_ERROR(Call(padded.data(), block, received.data()));
    for (int r = 0; r < world_size_; ++r) gathered[r] = received.substr(r * block, sizes[r]);
    return gathered;
  }

 private:
  Result<std::vector<uint64_t>> GatherSizes(uint64_t my_size) {
    ByteWriter mine;
    mine.U64(my_size);
    std::string received(sizeof(uint64_t) * world_size_, '\0');
    RETURN_IF_ERROR(Call(mine.data().data(), sizeof(uint64_t), received.data()));
    ByteReader reader(received, "allgather sizes");
    std::vector<uint64_t> sizes(world_size_);
    for (uint64_t& size : sizes) RETURN_IF_ERROR(reader.U64(&size));
    if (sizes[rank_] != my_size) {
      return Corrupt("user allgather callback returned size " + std::to_string(sizes[rank_]) + " for rank " +
                     std::to_string(rank_) + ", which sent " + std::to_string(my_size));
    }
    return sizes;
  }

  Status Call(const void* send, uint64_t size, void* recv) {
    const int32_t rc = allgather_(send, size, recv);
    if (rc != 0) return PeerFailed("user allgather callback failed with " + std::to_string(rc));
    return Status::Ok();
  }

  int rank_;
  int world_size_;
  AllGatherCallback allgather_;
};

}  // namespace

std::unique_ptr<ControlPlane> MakeCallbackControlPlane(int rank, int world_size, AllGatherCallback allgather) {
  return std::make_unique<CallbackControlPlane>(rank, world_size, std::move(allgather));
}

}  // namespace ckpt::coll
