#include "collectives/control/table_control_plane.h"

#include <atomic>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace ckpt::coll {
namespace {

class TableControlPlane : public ControlPlane {
 public:
  TableControlPlane(int rank, int world_size, CollectiveTable table, std::shared_ptr<ControlPlane> peers)
      : rank_(rank), world_size_(world_size), table_(std::move(table)), peers_(std::move(peers)) {}

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }

  Result<std::vector<std::string>> AllGather(std::string_view mine) override {
    const std::vector<uint64_t> eight(world_size_, sizeof(uint64_t));
    std::vector<uint64_t> sizes(world_size_);
    const uint64_t my_size = mine.size();
    RETURN_IF_ERROR(Call(
        "allgatherv", table_.allgatherv(&my_size, sizeof my_size, sizes.data(), eight.data(), Offsets(eight).data())));
    if (sizes[rank_] != my_size) return Disagreed("allgatherv", my_size, sizes[rank_]);
    const std::vector<uint64_t> offsets = Offsets(sizes);
    std::string received(offsets.back() + sizes.back(), '\0');
    RETURN_IF_ERROR(
        Call("allgatherv", table_.allgatherv(mine.data(), my_size, received.data(), sizes.data(), offsets.data())));
    Count(sizeof my_size + my_size, sizeof(uint64_t) * world_size_ + received.size());
    return Split(received, sizes, offsets);
  }

  Result<std::vector<std::string>> AllToAllV(std::vector<std::string> outgoing, std::chrono::milliseconds) override {
    if (outgoing.size() != static_cast<size_t>(world_size_)) {
      return InvalidArgument("alltoall given " + std::to_string(outgoing.size()) + " messages for " +
                             std::to_string(world_size_) + " ranks");
    }
    const std::vector<uint64_t> eight(world_size_, sizeof(uint64_t));
    const std::vector<uint64_t> eight_offsets = Offsets(eight);
    std::vector<uint64_t> send_sizes(world_size_);
    for (int r = 0; r < world_size_; ++r) send_sizes[r] = outgoing[r].size();
    std::vector<uint64_t> recv_sizes(world_size_);
    RETURN_IF_ERROR(Call("alltoallv", table_.alltoallv(send_sizes.data(), eight.data(), eight_offsets.data(),
                                                       recv_sizes.data(), eight.data(), eight_offsets.data())));
    const std::vector<uint64_t> send_offsets = Offsets(send_sizes);
    std::string sent(send_offsets.back() + send_sizes.back(), '\0');
    for (int r = 0; r < world_size_; ++r) std::memcpy(sent.data() + send_offsets[r], outgoing[r].data(), send_sizes[r]);
    outgoing = {};
    const std::vector<uint64_t> recv_offsets = Offsets(recv_sizes);
    std::string received(recv_offsets.back() + recv_sizes.back(), '\0');
    RETURN_IF_ERROR(Call("alltoallv", table_.alltoallv(sent.data(), send_sizes.data(), send_offsets.data(),
                                                       received.data(), recv_sizes.data(), recv_offsets.data())));
    // What a rank sends itself never leaves it.
    Count(sent.size() - send_sizes[rank_] + sizeof(uint64_t) * (world_size_ - 1),
          received.size() - recv_sizes[rank_] + sizeof(uint64_t) * (world_size_ - 1));
    return Split(received, recv_sizes, recv_offsets);
  }

  Result<std::string> Broadcast(std::string_view from_root, std::chrono::milliseconds) override {
    uint64_t size = rank_ == 0 ? from_root.size() : 0;
    RETURN_IF_ERROR(Call("broadcast", table_.broadcast(&size, sizeof size, 0)));
    std::string message = rank_ == 0 ? std::string(from_root) : std::string(size, '\0');
    if (size > 0) RETURN_IF_ERROR(Call("broadcast", table_.broadcast(message.data(), size, 0)));
    if (rank_ == 0) {
      Count(sizeof size + size, 0);
    } else {
      Count(0, sizeof size + size);
    }
    return message;
  }

  Status Barrier() override {
    RETURN_IF_ERROR(Call("barrier", table_.barrier()));
    Count(0, 0);
    return Status::Ok();
  }

  Status CheckPeers() override { return peers_ ? peers_->CheckPeers() : Status::Ok(); }

  ControlPlaneCounters counters() const override { return {sent_.load(), received_.load(), collectives_.load()}; }

 private:
  static std::vector<uint64_t> Offsets(const std::vector<uint64_t>& sizes) {
    std::vector<uint64_t> offsets(sizes.size());
    uint64_t at = 0;
    for (size_t r = 0; r < sizes.size(); ++r) {
      offsets[r] = at;
      at += sizes[r];
    }
    return offsets;
  }

  static std::vector<std::string> Split(const std::string& received, const std::vector<uint64_t>& sizes,
                                        const std::vector<uint64_t>& offsets) {
    std::vector<std::string> parts(sizes.size());
    for (size_t r = 0; r < sizes.size(); ++r) parts[r] = received.substr(offsets[r], sizes[r]);
    return parts;
  }

  static Status Call(const char* name, int32_t rc) {
    if (rc == 0) return Status::Ok();
    return PeerFailed(std::string("the job's ") + name + " failed with " + std::to_string(rc));
  }

  Status Disagreed(const char* name, uint64_t sent, uint64_t returned) const {
    return Corrupt(std::string("the job's ") + name + " returned size " + std::to_string(returned) + " for rank " +
                   std::to_string(rank_) + ", which sent " + std::to_string(sent));
  }

  void Count(uint64_t sent, uint64_t received) {
    sent_ += sent;
    received_ += received;
    ++collectives_;
  }

  const int rank_;
  const int world_size_;
  const CollectiveTable table_;
  const std::shared_ptr<ControlPlane> peers_;
  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> received_{0};
  std::atomic<uint64_t> collectives_{0};
};

}  // namespace

std::unique_ptr<ControlPlane> MakeTableControlPlane(int rank, int world_size, CollectiveTable table,
                                                    std::shared_ptr<ControlPlane> peers) {
  return std::make_unique<TableControlPlane>(rank, world_size, std::move(table), std::move(peers));
}

}  // namespace ckpt::coll
