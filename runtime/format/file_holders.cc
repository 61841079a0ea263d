#include "runtime/format/file_holders.h"

#include <algorithm>

#include "common/bytes.h"
#include "io/checksum.h"

namespace ckpt::runtime {
namespace {

// Sorted, distinct values as runs of consecutive ones: (first, count) pairs.
template <typename T>
void PutRuns(ByteWriter& out, const std::vector<T>& values) {
  std::vector<std::pair<uint32_t, uint32_t>> runs;
  for (T value : values) {
    const uint32_t v = static_cast<uint32_t>(value);
    if (!runs.empty() && runs.back().first + runs.back().second == v) {
      ++runs.back().second;
    } else {
      runs.emplace_back(v, 1);
    }
  }
  out.U32(static_cast<uint32_t>(runs.size()));
  for (const auto& [first, count] : runs) {
    out.U32(first);
    out.U32(count);
  }
}

// At most `limit` values in all, each below `limit`.
template <typename T>
Status GetRuns(ByteReader& in, uint32_t limit, std::vector<T>* values) {
  uint32_t runs = 0;
  RETURN_IF_ERROR(in.Count(&runs, limit, 2 * sizeof(uint32_t)));
  for (uint32_t r = 0; r < runs; ++r) {
    uint32_t first = 0, count = 0;
    RETURN_IF_ERROR(in.U32(&first));
    RETURN_IF_ERROR(in.U32(&count));
    if (first >= limit || count > limit - first || values->size() + count > limit) {
      return Corrupt("a table of file holders has a run of " + std::to_string(count) + " from " +
                     std::to_string(first) + ", beyond " + std::to_string(limit));
    }
    for (uint32_t i = 0; i < count; ++i) values->push_back(static_cast<T>(first + i));
  }
  return Status::Ok();
}

}  // namespace

Result<FileHolders> FileHolders::Make(std::vector<Node> nodes, int world_size, uint32_t file_count) {
  FileHolders holders;
  holders.node_of_rank_.assign(static_cast<size_t>(std::max(world_size, 0)), -1);
  holders.holders_of_file_.resize(file_count);
  for (size_t n = 0; n < nodes.size(); ++n) {
    Node& node = nodes[n];
    std::sort(node.ranks.begin(), node.ranks.end());
    node.ranks.erase(std::unique(node.ranks.begin(), node.ranks.end()), node.ranks.end());
    std::sort(node.files.begin(), node.files.end());
    node.files.erase(std::unique(node.files.begin(), node.files.end()), node.files.end());
    for (int rank : node.ranks) {
      if (rank < 0 || rank >= world_size) {
        return InvalidArgument("rank " + std::to_string(rank) + " of a file holder is outside the job's " +
                               std::to_string(world_size) + " ranks");
      }
      if (holders.node_of_rank_[static_cast<size_t>(rank)] >= 0) {
        return InvalidArgument("rank " + std::to_string(rank) + " is on two nodes of the file holders");
      }
      holders.node_of_rank_[static_cast<size_t>(rank)] = static_cast<int>(n);
    }
    for (uint32_t file : node.files) {
      if (file >= file_count) {
        return InvalidArgument("file " + std::to_string(file) + " of a file holder is not among the checkpoint's " +
                               std::to_string(file_count) + " data files");
      }
      holders.holders_of_file_[file].push_back(static_cast<uint32_t>(n));
    }
  }
  holders.nodes_ = std::move(nodes);
  const std::string encoded = holders.Encode();
  holders.digest_ = io::Checksum(encoded.data(), encoded.size());
  return holders;
}

std::string FileHolders::Encode() const {
  ByteWriter out;
  out.U32(static_cast<uint32_t>(nodes_.size()));
  for (const Node& node : nodes_) {
    PutRuns(out, node.ranks);
    PutRuns(out, node.files);
  }
  return out.Take();
}

Result<FileHolders> FileHolders::Decode(std::string_view bytes, int world_size, uint32_t file_count) {
  ByteReader in(bytes, "the table of file holders");
  uint32_t count = 0;
  RETURN_IF_ERROR(in.Count(&count, static_cast<uint32_t>(std::max(world_size, 0)), 4 * sizeof(uint32_t)));
  std::vector<Node> nodes(count);
  for (Node& node : nodes) {
    RETURN_IF_ERROR(GetRuns(in, static_cast<uint32_t>(world_size), &node.ranks));
    RETURN_IF_ERROR(GetRuns(in, file_count, &node.files));
  }
  RETURN_IF_ERROR(in.ExpectDone());
  Result<FileHolders> made = Make(std::move(nodes), world_size, file_count);
  if (!made.ok()) return Corrupt("the table of file holders: " + made.status().message());
  return made;
}

int FileHolders::NodeOf(int rank) const {
  return rank >= 0 && static_cast<size_t>(rank) < node_of_rank_.size() ? node_of_rank_[static_cast<size_t>(rank)] : -1;
}

bool FileHolders::Holds(int rank, uint32_t file) const {
  const int node = NodeOf(rank);
  if (node < 0 || file >= holders_of_file_.size()) return false;
  const std::vector<uint32_t>& files = nodes_[static_cast<size_t>(node)].files;
  return std::binary_search(files.begin(), files.end(), file);
}

const std::vector<uint32_t>& FileHolders::NodesHolding(uint32_t file) const {
  static const std::vector<uint32_t> kNone;
  return file < holders_of_file_.size() ? holders_of_file_[file] : kNone;
}

std::vector<uint32_t> FileHolders::Unheld() const {
  std::vector<uint32_t> unheld;
  for (uint32_t file = 0; file < holders_of_file_.size(); ++file) {
    if (holders_of_file_[file].empty()) unheld.push_back(file);
  }
  return unheld;
}

}  // namespace ckpt::runtime
