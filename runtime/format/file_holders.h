// Which ranks may read which data files of a checkpoint, for a load from the memory tier that no node holds whole: each
// node's agent holds some of the data files (its own ranks', its replicas of other nodes', what it fetched), each rank
// reads from its own node's copy only, and the load's exchange carries what it reads to the ranks of other nodes. Every
// rank holds the same table, which rank 0 builds from the nodes' leaders.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ckpt::runtime {

class FileHolders {
 public:
  struct Node {
    std::vector<int> ranks;       // sorted, distinct
    std::vector<uint32_t> files;  // manifest file indices the node holds, sorted, distinct
  };

  FileHolders() = default;
  // Nodes are numbered in the order given. kInvalidArgument when a rank is outside [0, world_size) or on two nodes,
  // or a file index is not below `file_count`.
  static Result<FileHolders> Make(std::vector<Node> nodes, int world_size, uint32_t file_count);

  // As ranges, so that a job of many ranks and files sends little.
  std::string Encode() const;
  // kCorrupt for a truncated or malformed table, or one Make refuses.
  static Result<FileHolders> Decode(std::string_view bytes, int world_size, uint32_t file_count);

  const std::vector<Node>& nodes() const { return nodes_; }
  // The node of `rank`, or -1 when the table has no node for it.
  int NodeOf(int rank) const;
  bool Holds(int rank, uint32_t file) const;
  // The nodes that hold `file`, in order (none for a file index past the table's).
  const std::vector<uint32_t>& NodesHolding(uint32_t file) const;
  // The file indices that no node holds.
  std::vector<uint32_t> Unheld() const;
  // Identifies the table: plans made for one table are not reused for another.
  uint64_t digest() const { return digest_; }

 private:
  std::vector<Node> nodes_;
  std::vector<int> node_of_rank_;                       // by rank
  std::vector<std::vector<uint32_t>> holders_of_file_;  // by file index
  uint64_t digest_ = 0;
};

}  // namespace ckpt::runtime
