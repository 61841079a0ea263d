#include "runtime/save/replica_check.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "runtime/core/state.h"

namespace ckpt::runtime {
namespace {

// At most this many items, and blocks per item, are named in the message; the rest are counted.
constexpr size_t kMaxItemsNamed = 4;
constexpr size_t kMaxBlocksNamed = 8;

using ItemId = std::tuple<bool, std::string, Box, Shape>;  // is_object, key, box, index

ItemId IdOf(const WrittenItem& item) { return {item.is_object, item.key, item.box, item.index}; }

std::string ItemName(const WrittenItem& item) {
  if (item.is_object) return "object '" + item.key + "' cell " + ShapeToString(item.index);
  return "tensor '" + item.key + "' box " + item.box.ToString();
}

// One copy of an item: the rank holding it and the checksums of its blocks.
struct Copy {
  int rank = 0;
  const StoredBytes* sums = nullptr;
};

bool SameBytes(const StoredBytes& a, const StoredBytes& b) {
  return a.byte_length == b.byte_length && a.block_size == b.block_size && a.block_checksums == b.block_checksums;
}

std::string RankList(const std::vector<int>& ranks, int writer) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) text += i + 1 == ranks.size() ? " and " : ", ";
    text += std::to_string(ranks[i]);
    if (ranks[i] == writer) text += " (written)";
  }
  return text;
}

// The blocks in which some copy differs from `reference`, with their verb; a copy of another length differs in every
// block.
std::string DifferingBlocks(const std::vector<Copy>& copies, const StoredBytes& reference) {
  const size_t count = reference.block_checksums.size();
  std::vector<size_t> blocks;
  for (size_t b = 0; b < count; ++b) {
    const bool differs = std::any_of(copies.begin(), copies.end(), [&](const Copy& c) {
      return c.sums->block_checksums.size() != count || c.sums->block_checksums[b] != reference.block_checksums[b];
    });
    if (differs) blocks.push_back(b);
  }
  std::string text = blocks.size() == 1 ? "block " : "blocks ";
  for (size_t i = 0; i < blocks.size() && i < kMaxBlocksNamed; ++i) {
    text += (i > 0 ? ", " : "") + std::to_string(blocks[i]);
  }
  if (blocks.size() > kMaxBlocksNamed) text += " and " + std::to_string(blocks.size() - kMaxBlocksNamed) + " more";
  return text + " of " + std::to_string(count) + " (" + std::to_string(reference.block_size) + " bytes each)" +
         (blocks.size() == 1 ? " differs" : " differ");
}

// What differs among the copies of one item, the written one first.
std::string Disagreement(const WrittenItem& item, const std::vector<Copy>& copies) {
  // Copies grouped by their checksums, the largest group first (ties: the written copy's group).
  std::vector<std::vector<Copy>> groups;
  for (const Copy& copy : copies) {
    auto same = std::find_if(groups.begin(), groups.end(),
                             [&](const std::vector<Copy>& g) { return SameBytes(*g.front().sums, *copy.sums); });
    if (same == groups.end()) {
      groups.push_back({copy});
    } else {
      same->push_back(copy);
    }
  }
  std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
  const int writer = copies.front().rank;
  auto ranks_of = [](const std::vector<Copy>& group) {
    std::vector<int> ranks;
    for (const Copy& c : group) ranks.push_back(c.rank);
    std::sort(ranks.begin(), ranks.end());
    return ranks;
  };
  std::vector<Copy> others;
  for (size_t g = 1; g < groups.size(); ++g) others.insert(others.end(), groups[g].begin(), groups[g].end());
  const std::string blocks = DifferingBlocks(others, *groups.front().front().sums);
  if (groups.front().size() == groups[1].size()) {
    std::string text = ItemName(item) + ": " + blocks + " between ";
    for (size_t g = 0; g < groups.size(); ++g) {
      if (g > 0) text += g + 1 == groups.size() ? " and " : ", ";
      text += RankList(ranks_of(groups[g]), writer) + (groups[g].size() > 1 ? " (agreeing)" : "");
    }
    return text + ", with no majority to tell which copy is right";
  }
  std::string text =
      ItemName(item) + ": " + blocks + ": " + RankList(ranks_of(groups.front()), writer) + " agree (the most copies)";
  for (size_t g = 1; g < groups.size(); ++g) {
    text +=
        "; " + RankList(ranks_of(groups[g]), writer) + (groups[g].size() > 1 ? " differ" : " differs") + " from them";
  }
  return text;
}

}  // namespace

Status CheckReplicas(const std::vector<WriterReport>& reports) {
  std::map<ItemId, std::vector<Copy>> checked;  // written copy first, then the replicas in rank order
  for (size_t r = 0; r < reports.size(); ++r) {
    for (const WrittenItem& replica : reports[r].replicas) checked[IdOf(replica)];
  }
  if (checked.empty()) return Status::Ok();
  std::map<ItemId, const WrittenItem*> written;
  for (size_t r = 0; r < reports.size(); ++r) {
    // An item an incremental save split into slabs (or referred to) is compared whole, as its replicas hash it.
    for (const std::vector<WrittenItem>* list : {&reports[r].items, &reports[r].split_items}) {
      for (const WrittenItem& item : *list) {
        auto it = checked.find(IdOf(item));
        if (it == checked.end()) continue;
        it->second.push_back(Copy{static_cast<int>(r), &item.bytes});
        written.emplace(it->first, &item);
      }
    }
  }
  for (size_t r = 0; r < reports.size(); ++r) {
    for (const WrittenItem& replica : reports[r].replicas) {
      std::vector<Copy>& copies = checked[IdOf(replica)];
      if (copies.empty()) {
        return Internal("rank " + std::to_string(r) + " checked its replica of " + ItemName(replica) +
                        ", which no rank wrote");
      }
      copies.push_back(Copy{static_cast<int>(r), &replica.bytes});
    }
  }
  std::vector<std::string> differences;
  for (const auto& entry : checked) {
    const std::vector<Copy>& copies = entry.second;
    const StoredBytes& first = *copies.front().sums;
    const bool all_same =
        std::all_of(copies.begin() + 1, copies.end(), [&](const Copy& c) { return SameBytes(*c.sums, first); });
    if (!all_same) differences.push_back(Disagreement(*written.at(entry.first), copies));
  }
  if (differences.empty()) return Status::Ok();
  std::string message = "replicas of the same data differ, so the save was not committed (CKPT_SAVE_CHECK_REPLICAS): ";
  for (size_t i = 0; i < differences.size() && i < kMaxItemsNamed; ++i) {
    message += (i > 0 ? "; " : "") + differences[i];
  }
  if (differences.size() > kMaxItemsNamed) {
    message += "; and " + std::to_string(differences.size() - kMaxItemsNamed) + " more items";
  }
  return Corrupt(message);
}

}  // namespace ckpt::runtime
