#include "runtime/save/save_plan.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>
#include <tuple>
#include <utility>

#include "runtime/core/dtype.h"

namespace ckpt::runtime {
namespace {

constexpr size_t kMaxListedProblems = 5;

std::string ShapeToString(const Shape& shape) {
  std::string out = "[";
  for (size_t d = 0; d < shape.size(); ++d) out += (d > 0 ? ", " : "") + std::to_string(shape[d]);
  return out + "]";
}

std::string RanksToString(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i > 0 ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// ---- Coverage ----

// Collects problems, keeping the text of the first few and counting the rest.
class Problems {
 public:
  void Add(std::string message) {
    if (listed_.size() < kMaxListedProblems) listed_.push_back(std::move(message));
    ++count_;
  }
  size_t count() const { return count_; }
  Status ToStatus(int checker_rank) const {
    if (count_ == 0) return Status::Ok();
    std::string message = "coverage check on rank " + std::to_string(checker_rank) + " found " +
                          std::to_string(count_) + " problem" + (count_ > 1 ? "s" : "") + ": ";
    for (size_t i = 0; i < listed_.size(); ++i) message += (i > 0 ? "; " : "") + listed_[i];
    if (count_ > listed_.size()) message += "; and " + std::to_string(count_ - listed_.size()) + " more";
    return Mismatch(std::move(message));
  }

 private:
  std::vector<std::string> listed_;
  size_t count_ = 0;
};

template <typename Desc>
struct Holding {
  int rank;
  const Desc* desc;
};

template <typename Desc>
using KeyHoldings = std::map<std::string_view, std::vector<Holding<Desc>>>;

// A box and every rank that holds it.
struct UniqueBox {
  Box box;
  std::vector<int> holders;
};

// Groups identical boxes (replicas) of one key, sorted by box, each with its sorted, distinct holders.
std::vector<UniqueBox> UniqueBoxes(const std::vector<Holding<TensorShardDesc>>& holdings) {
  std::vector<std::pair<const Box*, int>> sorted;
  sorted.reserve(holdings.size());
  for (const auto& h : holdings) sorted.emplace_back(&h.desc->box, h.rank);
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    if (*a.first != *b.first) return *a.first < *b.first;
    return a.second < b.second;
  });
  std::vector<UniqueBox> unique;
  for (const auto& [box, rank] : sorted) {
    if (unique.empty() || unique.back().box != *box) unique.push_back(UniqueBox{*box, {}});
    if (unique.back().holders.empty() || unique.back().holders.back() != rank) unique.back().holders.push_back(rank);
  }
  return unique;
}

// The dimension along which the most boxes start at distinct offsets: sweeping along it keeps few boxes active at
// once whichever dimension the tensor is split on.
size_t SweepDimension(const std::vector<const UniqueBox*>& boxes, size_t ndim) {
  size_t best_dim = 0;
  size_t best_distinct = 0;
  std::vector<uint64_t> starts(boxes.size());
  for (size_t d = 0; d < ndim; ++d) {
    for (size_t i = 0; i < boxes.size(); ++i) starts[i] = boxes[i]->box.offset[d];
    std::sort(starts.begin(), starts.end());
    const size_t distinct = std::unique(starts.begin(), starts.end()) - starts.begin();
    if (distinct > best_distinct) {
      best_distinct = distinct;
      best_dim = d;
    }
  }
  return best_dim;
}

// Reports each pair of distinct non-empty boxes that overlap; returns whether any did. Boxes are swept in order of
// their start along one dimension, and each is compared only with those still open at that start.
bool ReportOverlaps(std::string_view key, const std::vector<UniqueBox>& unique, Problems* problems) {
  std::vector<const UniqueBox*> boxes;
  for (const auto& u : unique) {
    if (!u.box.empty()) boxes.push_back(&u);
  }
  if (boxes.size() < 2 || boxes.front()->box.ndim() == 0) return false;
  const size_t dim = SweepDimension(boxes, boxes.front()->box.ndim());
  std::stable_sort(boxes.begin(), boxes.end(),
                   [dim](const UniqueBox* a, const UniqueBox* b) { return a->box.offset[dim] < b->box.offset[dim]; });
  bool found = false;
  std::vector<const UniqueBox*> open;
  for (const UniqueBox* current : boxes) {
    const uint64_t start = current->box.offset[dim];
    open.erase(std::remove_if(open.begin(), open.end(),
                              [&](const UniqueBox* o) { return o->box.offset[dim] + o->box.shape[dim] <= start; }),
               open.end());
    for (const UniqueBox* other : open) {
      if (!Intersect(other->box, current->box)) continue;
      found = true;
      problems->Add("tensor '" + std::string(key) + "': box " + other->box.ToString() + " on " +
                    RanksToString(other->holders) + " overlaps box " + current->box.ToString() + " on " +
                    RanksToString(current->holders));
    }
    open.push_back(current);
  }
  return found;
}

// Every shard of a key has the same dtype and global shape as the first; reports each one that differs.
bool ReportTensorMismatches(std::string_view key, const std::vector<Holding<TensorShardDesc>>& holdings,
                            Problems* problems) {
  const Holding<TensorShardDesc>& first = holdings.front();
  bool found = false;
  for (const auto& h : holdings) {
    if (h.desc->dtype != first.desc->dtype) {
      found = true;
      problems->Add("tensor '" + std::string(key) + "': dtype " + DTypeName(first.desc->dtype) + " on rank " +
                    std::to_string(first.rank) + " but " + DTypeName(h.desc->dtype) + " on rank " +
                    std::to_string(h.rank));
    } else if (h.desc->global_shape != first.desc->global_shape) {
      found = true;
      problems->Add("tensor '" + std::string(key) + "': global shape " + ShapeToString(first.desc->global_shape) +
                    " on rank " + std::to_string(first.rank) + " but " + ShapeToString(h.desc->global_shape) +
                    " on rank " + std::to_string(h.rank));
    }
  }
  return found;
}

void CheckTensor(std::string_view key, const std::vector<Holding<TensorShardDesc>>& holdings, Problems* problems) {
  if (ReportTensorMismatches(key, holdings, problems)) return;
  const TensorShardDesc& first = *holdings.front().desc;
  const std::string name = "tensor '" + std::string(key) + "'";
  if (!VolumeFits(first.global_shape, DTypeSize(first.dtype))) {
    problems->Add(name + ": global shape " + ShapeToString(first.global_shape) + " is too large");
    return;
  }
  const Box whole = WholeBox(first.global_shape);
  const std::vector<UniqueBox> unique = UniqueBoxes(holdings);
  bool outside = false;
  for (const auto& u : unique) {
    if (Contains(whole, u.box)) continue;
    outside = true;
    problems->Add(name + ": box " + u.box.ToString() + " on " + RanksToString(u.holders) +
                  " lies outside the global shape " + ShapeToString(first.global_shape));
  }
  if (outside || ReportOverlaps(key, unique, problems)) return;
  uint64_t covered = 0;
  for (const auto& u : unique) covered += u.box.volume();
  const uint64_t total = whole.volume();
  if (covered < total) {
    problems->Add(name + ": " + std::to_string(total - covered) + " of " + std::to_string(total) +
                  " elements are held by no rank");
  }
}

// The first cell of `grid`, in row-major order, that is not in `present`; `present` lacks at least one.
// The cell of `grid` at row-major position `number`.
Shape CellAt(const Shape& grid, uint64_t number) {
  Shape cell(grid.size(), 0);
  for (size_t d = grid.size(); d-- > 0;) {
    cell[d] = number % grid[d];
    number /= grid[d];
  }
  return cell;
}

// Checks one object key; its cells are compared by row-major number, so that a key with a cell per rank (an RNG
// state) costs a sort of numbers, not a map of index vectors.
void CheckObject(std::string_view key, const std::vector<Holding<ObjectShardDesc>>& holdings, Problems* problems) {
  const std::string name = "object '" + std::string(key) + "'";
  const Holding<ObjectShardDesc>& first = holdings.front();
  const Shape& grid = first.desc->grid_shape;
  bool bad = false;
  for (const auto& h : holdings) {
    if (h.desc->grid_shape == grid) continue;
    bad = true;
    problems->Add(name + ": grid " + ShapeToString(grid) + " on rank " + std::to_string(first.rank) + " but " +
                  ShapeToString(h.desc->grid_shape) + " on rank " + std::to_string(h.rank));
  }
  if (bad) return;
  if (!VolumeFits(grid, 1)) {
    problems->Add(name + ": grid " + ShapeToString(grid) + " is too large");
    return;
  }
  std::vector<std::pair<uint64_t, const Holding<ObjectShardDesc>*>> cells;  // (row-major number, holding)
  for (const auto& h : holdings) {
    const Shape& index = h.desc->index;
    bool inside = index.size() == grid.size();
    uint64_t number = 0;
    for (size_t d = 0; inside && d < grid.size(); ++d) {
      inside = index[d] < grid[d];
      number = number * grid[d] + index[d];
    }
    if (!inside) {
      bad = true;
      problems->Add(name + ": cell " + ShapeToString(index) + " on rank " + std::to_string(h.rank) +
                    " lies outside the grid " + ShapeToString(grid));
      continue;
    }
    cells.emplace_back(number, &h);
  }
  if (bad) return;
  std::stable_sort(cells.begin(), cells.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  uint64_t distinct = 0;
  std::optional<uint64_t> first_missing;
  for (size_t i = 0; i < cells.size(); ++i) {
    const auto& [number, holding] = cells[i];
    if (i > 0 && cells[i - 1].first == number) {
      const Holding<ObjectShardDesc>& other = *cells[i - 1].second;
      if (other.desc->size != holding->desc->size) {
        problems->Add(name + ": cell " + ShapeToString(holding->desc->index) + " has " +
                      std::to_string(other.desc->size) + " bytes on rank " + std::to_string(other.rank) + " but " +
                      std::to_string(holding->desc->size) + " on rank " + std::to_string(holding->rank));
      }
      continue;
    }
    if (!first_missing && number != distinct) first_missing = distinct;
    ++distinct;
  }
  const uint64_t total = Volume(grid);
  if (distinct < total) {
    problems->Add(name + ": " + std::to_string(total - distinct) + " of " + std::to_string(total) +
                  " cells are held by no rank, the first " +
                  ShapeToString(CellAt(grid, first_missing.value_or(distinct))));
  }
}

// Each descriptor's rank is its position in the gathered list, so the plan can index ranks directly.
void CheckRanks(const std::vector<RankDescriptor>& all, Problems* problems) {
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].rank != static_cast<int>(i)) {
      problems->Add("descriptor " + std::to_string(i) + " of " + std::to_string(all.size()) + " claims rank " +
                    std::to_string(all[i].rank));
    }
  }
}

// ---- Planning ----

// One unit to write before its writer is chosen, with the ranks that could write it.
struct Candidate {
  WriteItem item;
  std::vector<int> holders;
};

// Deterministic order within a writer: tensors before objects, then key, then box or cell.
// The dimension to cut a box of `box` into `slabs` along: the first at least `slabs` long, else the longest.
size_t SlabDimension(const Box& box, uint64_t slabs) {
  for (size_t d = 0; d < box.ndim(); ++d) {
    if (box.shape[d] >= slabs) return d;
  }
  return std::max_element(box.shape.begin(), box.shape.end()) - box.shape.begin();
}

// One candidate for a unique box, or one per slab when a large replicated box is cut so that its holders share the
// writing.
void AddTensorCandidates(const std::string& key, UniqueBox unique, uint64_t element_size,
                         const SavePlanOptions& options, std::vector<Candidate>* out) {
  const uint64_t bytes = unique.box.volume() * element_size;
  uint64_t slabs = 1;
  if (unique.holders.size() > 1 && options.split_bytes > 0 && bytes / 2 >= options.split_bytes &&
      unique.box.ndim() > 0) {
    slabs = std::min<uint64_t>(unique.holders.size(), bytes / options.split_bytes);
  }
  const size_t dim = slabs > 1 ? SlabDimension(unique.box, slabs) : 0;
  if (slabs > 1) slabs = std::min(slabs, unique.box.shape[dim]);
  if (slabs <= 1) {
    out->push_back(Candidate{WriteItem{false, key, std::move(unique.box), {}, bytes, 0}, std::move(unique.holders)});
    return;
  }
  const uint64_t base = unique.box.shape[dim] / slabs;
  const uint64_t longer = unique.box.shape[dim] % slabs;
  uint64_t start = unique.box.offset[dim];
  for (uint64_t i = 0; i < slabs; ++i) {
    Box slab = unique.box;
    slab.offset[dim] = start;
    slab.shape[dim] = base + (i < longer ? 1 : 0);
    start += slab.shape[dim];
    const uint64_t slab_bytes = slab.volume() * element_size;
    out->push_back(Candidate{WriteItem{false, key, std::move(slab), {}, slab_bytes, 0}, unique.holders});
  }
}

// Tensors: unique non-empty boxes; a tensor with no element keeps one empty box so that it is still recorded.
void CollectTensorCandidates(const KeyHoldings<TensorShardDesc>& tensors, const SavePlanOptions& options,
                             std::vector<Candidate>* out) {
  for (const auto& [key, holdings] : tensors) {
    const uint64_t element_size = DTypeSize(holdings.front().desc->dtype);
    std::vector<UniqueBox> unique = UniqueBoxes(holdings);
    const bool no_elements =
        std::all_of(unique.begin(), unique.end(), [](const UniqueBox& u) { return u.box.empty(); });
    if (no_elements) unique.resize(1);
    for (auto& u : unique) {
      if (!u.box.empty() || no_elements) {
        AddTensorCandidates(std::string(key), std::move(u), element_size, options, out);
      }
    }
  }
}

void CollectObjectCandidates(const KeyHoldings<ObjectShardDesc>& objects, std::vector<Candidate>* out) {
  for (const auto& [key, holdings] : objects) {
    // The holdings by cell (then rank), so that each cell's holders are consecutive: one sort, no map of cells.
    std::vector<const Holding<ObjectShardDesc>*> by_cell;
    for (const auto& h : holdings) by_cell.push_back(&h);
    std::sort(by_cell.begin(), by_cell.end(), [](const auto* a, const auto* b) {
      return std::tie(a->desc->index, a->rank) < std::tie(b->desc->index, b->rank);
    });
    for (size_t i = 0; i < by_cell.size(); ++i) {
      const ObjectShardDesc& cell = *by_cell[i]->desc;
      if (i == 0 || by_cell[i - 1]->desc->index != cell.index) {
        out->emplace_back();
        out->back().item = WriteItem{true, std::string(key), Box{}, cell.index, cell.size, 0};
      }
      std::vector<int>& holders = out->back().holders;
      if (holders.empty() || holders.back() != by_cell[i]->rank) holders.push_back(by_cell[i]->rank);
    }
  }
}

// Greedy balancing, largest items first: the least loaded node among the holders', then its least loaded holder.
// Ties go to the node whose lowest rank, then to the rank, comes first in rank order starting at `rotation`.
void ChooseWriters(const std::vector<RankDescriptor>& all, const SavePlanOptions& options,
                   std::vector<Candidate>* candidates, SavePlan* plan) {
  const int rotation = options.rotation;
  const int world_size = static_cast<int>(all.size());
  std::vector<std::string_view> node_of(all.size());
  for (const auto& desc : all) {
    if (desc.rank >= 0 && desc.rank < world_size) node_of[desc.rank] = desc.node;
  }
  auto rotated = [&](int rank) { return ((rank - rotation) % world_size + world_size) % world_size; };
  // The rotated position of each holding node's lowest rank: built from the holders alone, since an owner's list has
  // every rank of the job, most of them holding none of its keys.
  std::map<std::string_view, int> node_order;
  for (const Candidate& candidate : *candidates) {
    for (int rank : candidate.holders) {
      auto [it, inserted] = node_order.try_emplace(node_of[rank], rotated(rank));
      if (!inserted) it->second = std::min(it->second, rotated(rank));
    }
  }
  std::sort(candidates->begin(), candidates->end(), [](const Candidate& a, const Candidate& b) {
    if (a.item.bytes != b.item.bytes) return a.item.bytes > b.item.bytes;
    return WriteItemLess(a.item, b.item);
  });
  std::map<std::string_view, uint64_t> node_bytes;
  auto load_of = [&](int rank) {
    const std::string_view node = node_of[rank];
    return std::make_tuple(node_bytes[node], node_order[node], plan->bytes_per_rank[rank], rotated(rank));
  };
  for (auto& candidate : *candidates) {
    int best = candidate.holders.front();
    auto best_load = load_of(best);
    for (int rank : candidate.holders) {
      const auto load = load_of(rank);
      if (load < best_load) {
        best = rank;
        best_load = load;
      }
    }
    candidate.item.writer = best;
    node_bytes[node_of[best]] += candidate.item.bytes;
    plan->bytes_per_rank[best] += candidate.item.bytes;
    if (options.replica_checks) {
      for (int holder : candidate.holders) {
        if (holder != best) plan->replicas.push_back(ReplicaCheck{candidate.item, holder});
      }
    }
    plan->items.push_back(std::move(candidate.item));
  }
  std::sort(plan->items.begin(), plan->items.end(), [](const WriteItem& a, const WriteItem& b) {
    if (a.writer != b.writer) return a.writer < b.writer;
    return WriteItemLess(a, b);
  });
  std::sort(plan->replicas.begin(), plan->replicas.end(), [](const ReplicaCheck& a, const ReplicaCheck& b) {
    if (a.holder != b.holder) return a.holder < b.holder;
    return WriteItemLess(a.item, b.item);
  });
}

// Gathers the shards of every key, each key's list in rank order; `owned` filters the keys.
template <typename Owned>
void GatherByKey(const std::vector<RankDescriptor>& all, Owned owned, KeyHoldings<TensorShardDesc>* tensors,
                 KeyHoldings<ObjectShardDesc>* objects) {
  std::vector<const RankDescriptor*> by_rank;
  for (const auto& desc : all) by_rank.push_back(&desc);
  std::stable_sort(by_rank.begin(), by_rank.end(),
                   [](const RankDescriptor* a, const RankDescriptor* b) { return a->rank < b->rank; });
  for (const RankDescriptor* desc : by_rank) {
    // A rank outside the world (refused by CheckRanks) must not index the per-rank tables of the plan.
    if (desc->rank < 0 || desc->rank >= static_cast<int>(all.size())) continue;
    for (const auto& t : desc->tensors) {
      if (owned(t.key)) (*tensors)[t.key].push_back({desc->rank, &t});
    }
    for (const auto& o : desc->objects) {
      if (owned(o.key)) (*objects)[o.key].push_back({desc->rank, &o});
    }
  }
}

}  // namespace

bool WriteItemLess(const WriteItem& a, const WriteItem& b) {
  return std::tie(a.is_object, a.key, a.box, a.index) < std::tie(b.is_object, b.key, b.box, b.index);
}

Status ValidateCoverage(const std::vector<RankDescriptor>& all, int checker_rank) {
  Problems problems;
  CheckRanks(all, &problems);
  const int world_size = static_cast<int>(all.size());
  KeyHoldings<TensorShardDesc> tensors;
  KeyHoldings<ObjectShardDesc> objects;
  GatherByKey(
      all, [&](std::string_view key) { return KeyChecker(key, world_size) == checker_rank; }, &tensors, &objects);
  for (const auto& [key, holdings] : tensors) {
    auto object = objects.find(key);
    if (object != objects.end()) {
      problems.Add("key '" + std::string(key) + "' is a tensor on rank " + std::to_string(holdings.front().rank) +
                   " and an object on rank " + std::to_string(object->second.front().rank));
      continue;
    }
    CheckTensor(key, holdings, &problems);
  }
  for (const auto& [key, holdings] : objects) {
    if (tensors.count(key) == 0) CheckObject(key, holdings, &problems);
  }
  return problems.ToStatus(checker_rank);
}

SavePlan PlanSave(const std::vector<RankDescriptor>& all, const SavePlanOptions& options) {
  SavePlan plan;
  plan.bytes_per_rank.assign(all.size(), 0);
  KeyHoldings<TensorShardDesc> tensors;
  KeyHoldings<ObjectShardDesc> objects;
  GatherByKey(
      all, [](std::string_view) { return true; }, &tensors, &objects);
  std::vector<Candidate> candidates;
  CollectTensorCandidates(tensors, options, &candidates);
  CollectObjectCandidates(objects, &candidates);
  ChooseWriters(all, options, &candidates, &plan);
  return plan;
}

}  // namespace ckpt::runtime
