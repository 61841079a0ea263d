#include "runtime/save/incremental_units.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>

#include "common/usable_cores.h"
#include "io/block_digests.h"
#include "io/io_backend.h"
#include "runtime/core/dtype.h"
#include "runtime/save/incremental_base.h"

namespace ckpt::runtime::staging {
namespace {

constexpr unsigned kMaxDigestThreads = 8;

// The digests of a unit's row-major bytes, read as ReadUnit reads them; host memory in one run on several threads.
Result<std::string> DigestSource(const Source& s, uint64_t bytes, uint64_t block_size) {
  if (s.device < 0 && s.snapshot == nullptr && s.contiguous) {
    const unsigned threads = std::clamp(UsableCores(), 1u, kMaxDigestThreads);
    return io::DigestBlocks(s.base, bytes, block_size, threads);
  }
  io::BlockDigester digester(block_size);
  RETURN_IF_ERROR(ReadUnit(s, bytes, [&](const char* data, uint64_t n) { digester.Update(data, n); }));
  return digester.Finish();
}

// A box's rows: the slabs along its first dimension longer than 1 (the last dimension where none is), each a run
// of the box's row-major bytes, since the dimensions before it have extent 1.
struct Rows {
  size_t dim = 0;
  uint64_t count = 1;
  uint64_t bytes = 0;  // of one row
};

Rows RowsOf(const Box& box, size_t element_size) {
  Rows rows;
  rows.bytes = element_size;
  if (box.ndim() == 0) return rows;
  rows.dim = box.ndim() - 1;
  for (size_t d = 0; d < box.ndim(); ++d) {
    if (box.shape[d] > 1) {
      rows.dim = d;
      break;
    }
  }
  rows.count = box.shape[rows.dim];
  for (size_t d = rows.dim + 1; d < box.ndim(); ++d) rows.bytes *= box.shape[d];
  return rows;
}

Box Slab(const Box& box, const Rows& rows, uint64_t first, uint64_t last) {
  Box slab = box;
  if (box.ndim() == 0) return slab;
  slab.offset[rows.dim] += first;
  slab.shape[rows.dim] = last - first;
  return slab;
}

// Whether `chunk` is a slab of `box` along rows.dim: inside it, and whole in every other dimension.
bool IsSlabOf(const Box& chunk, const Box& box, const Rows& rows) {
  if (chunk.ndim() != box.ndim() || !Contains(box, chunk)) return false;
  for (size_t d = 0; d < box.ndim(); ++d) {
    if (d != rows.dim && chunk.shape[d] != box.shape[d]) return false;
  }
  return true;
}

using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;  // half-open, increasing, disjoint

// The rows that some block whose digest differs from the base's touches.
Ranges ChangedRows(const std::string& now, const std::string& before, uint64_t block_size, uint64_t length,
                   const Rows& rows) {
  Ranges changed;
  const uint64_t blocks = now.size() / io::kBlockDigestBytes;
  for (uint64_t b = 0; b < blocks; ++b) {
    const size_t at = b * io::kBlockDigestBytes;
    if (std::memcmp(now.data() + at, before.data() + at, io::kBlockDigestBytes) == 0) continue;
    const uint64_t begin = b * block_size, end = std::min(length, begin + block_size);
    const uint64_t first = begin / rows.bytes, last = (end + rows.bytes - 1) / rows.bytes;
    if (!changed.empty() && changed.back().second >= first) {
      changed.back().second = std::max(changed.back().second, last);
    } else {
      changed.emplace_back(first, last);
    }
  }
  return changed;
}

Ranges Complement(const Ranges& ranges, uint64_t count) {
  Ranges out;
  uint64_t at = 0;
  for (const auto& [first, last] : ranges) {
    if (first > at) out.emplace_back(at, first);
    at = last;
  }
  if (at < count) out.emplace_back(at, count);
  return out;
}

// Rows [first, last) of the box, to be referred to in `chunk` of the base.
struct Reference {
  uint64_t first = 0;
  uint64_t last = 0;
  const ChunkRecord* chunk = nullptr;
  uint64_t chunk_first = 0;  // the chunk's first row, counted in the box
};

// The base's digests of `box`, hashed by blocks of `block_size`; null where it has none.
const BoxDigests* DigestsOf(const TensorRecord& tensor, const Box& box, uint64_t block_size) {
  const auto it = std::lower_bound(tensor.digests.begin(), tensor.digests.end(), box,
                                   [](const BoxDigests& d, const Box& b) { return d.box < b; });
  if (it == tensor.digests.end() || it->box != box || it->block_size != block_size) return nullptr;
  return &*it;
}

// The rows of the box that may be referred to: unchanged, in base chunks that are slabs of the box in files the
// save may refer to, from a 4 KiB boundary of the file on; a compressed chunk only whole, since its blocks' stored
// forms lie wherever they shrank to. Empty where the base's chunks cut the box otherwise.
std::vector<Reference> FindReferences(IncrementalBase& base, const TensorRecord& tensor, const Box& box,
                                      const Rows& rows, const Ranges& unchanged) {
  std::vector<Reference> refs;
  const uint64_t period = io::kDirectAlignment / std::gcd(rows.bytes, io::kDirectAlignment);
  for (const ChunkRecord& chunk : tensor.chunks) {
    if (!Intersect(chunk.box, box)) continue;
    if (!IsSlabOf(chunk.box, box, rows)) return {};
    if (!base.CanReferTo(chunk.bytes.file_index)) continue;
    const uint64_t c0 = box.ndim() == 0 ? 0 : chunk.box.offset[rows.dim] - box.offset[rows.dim];
    const uint64_t c1 = box.ndim() == 0 ? 1 : c0 + chunk.box.shape[rows.dim];
    if (IsCompressed(chunk.bytes)) {
      const auto whole = [&](const std::pair<uint64_t, uint64_t>& r) { return r.first <= c0 && c1 <= r.second; };
      if (std::any_of(unchanged.begin(), unchanged.end(), whole)) refs.push_back(Reference{c0, c1, &chunk, c0});
      continue;
    }
    if (chunk.bytes.file_offset % io::kDirectAlignment != 0) continue;
    for (const auto& [a, b] : unchanged) {
      uint64_t first = std::max(a, c0);
      const uint64_t last = std::min(b, c1);
      if (first >= last) continue;
      first = c0 + (first - c0 + period - 1) / period * period;
      if (first < last) refs.push_back(Reference{first, last, &chunk, c0});
    }
  }
  std::sort(refs.begin(), refs.end(), [](const Reference& x, const Reference& y) { return x.first < y.first; });
  return refs;
}

uint32_t ReferencedFileIndex(WriterReport& report, const DataFileRecord& file) {
  for (size_t i = 0; i < report.referenced_files.size(); ++i) {
    const DataFileRecord& f = report.referenced_files[i];
    if (f.checkpoint == file.checkpoint && f.name == file.name) return static_cast<uint32_t>(i);
  }
  report.referenced_files.push_back(file);
  return static_cast<uint32_t>(report.referenced_files.size() - 1);
}

// The base's record of the item's tensor where it has the same dtype and shape as the state's; null otherwise.
Result<const TensorRecord*> BaseTensor(const State& state, IncrementalBase& base, const std::string& key) {
  ASSIGN_OR_RETURN(const TensorRecord* tensor, base.Tensor(key));
  if (tensor == nullptr) return nullptr;
  const TensorShard& shard = state.tensors()[state.TensorsWithKey(key).front()];
  if (tensor->dtype != shard.dtype || tensor->shape != shard.global_shape) return nullptr;
  return tensor;
}

}  // namespace

Status AddIncrementalUnits(const State& state, const WriteItem& item, const StagingSettings& settings,
                           SaveTicket& ticket, std::vector<Unit>& units) {
  ASSIGN_OR_RETURN(const Source source, ItemSource(state, item));
  ASSIGN_OR_RETURN(std::string digests, DigestSource(source, item.bytes, settings.block_size));
  const Box box = item.box;
  std::vector<Reference> refs;
  const Rows rows = RowsOf(box, source.element_size);
  if (settings.base != nullptr && item.bytes > 0) {
    ASSIGN_OR_RETURN(const TensorRecord* tensor, BaseTensor(state, *settings.base, item.key));
    const BoxDigests* before = tensor == nullptr ? nullptr : DigestsOf(*tensor, box, settings.block_size);
    if (before != nullptr && before->sha256.size() == digests.size()) {
      const Ranges unchanged =
          Complement(ChangedRows(digests, before->sha256, settings.block_size, item.bytes, rows), rows.count);
      refs = FindReferences(*settings.base, *tensor, box, rows, unchanged);
    }
  }
  ticket.report.digests.push_back(TensorDigests{item.key, BoxDigests{box, settings.block_size, std::move(digests)}});
  if (refs.empty()) return AddItemUnit(state, item, ticket, units);
  if (settings.replica_checks) {
    // Its replicas hash the whole box, which no chunk of this save holds: the writer's copy is hashed whole too.
    WrittenItem whole{false, item.key, box, {}, {}};
    whole.bytes.byte_length = item.bytes;
    whole.bytes.block_size = settings.block_size;
    ASSIGN_OR_RETURN(whole.bytes.block_checksums, ChecksumUnit(source, item.bytes, settings.block_size));
    ticket.report.split_items.push_back(std::move(whole));
  }
  uint64_t written_to = 0;
  auto write_rows = [&](uint64_t first, uint64_t last) -> Status {
    if (first >= last) return Status::Ok();
    WriteItem slab = item;
    slab.box = Slab(box, rows, first, last);
    slab.bytes = (last - first) * rows.bytes;
    return AddItemUnit(state, slab, ticket, units);
  };
  for (const Reference& ref : refs) {
    RETURN_IF_ERROR(write_rows(written_to, ref.first));
    written_to = ref.last;
    WrittenItem referred{false, item.key, Slab(box, rows, ref.first, ref.last), {}, {}};
    StoredBytes& stored = referred.bytes;
    const uint32_t file_index = ReferencedFileIndex(ticket.report, settings.base->ReferTo(ref.chunk->bytes.file_index));
    if (IsCompressed(ref.chunk->bytes)) {
      // The whole chunk, as the base stored it: the same bytes (their digests say so), so the same checksums.
      stored = ref.chunk->bytes;
      stored.file_index = file_index;
      ticket.report.references.push_back(std::move(referred));
      continue;
    }
    stored.file_index = file_index;
    stored.file_offset = ref.chunk->bytes.file_offset + (ref.first - ref.chunk_first) * rows.bytes;
    stored.byte_length = (ref.last - ref.first) * rows.bytes;
    stored.block_size = settings.block_size;
    WriteItem slab = item;
    slab.box = referred.box;
    ASSIGN_OR_RETURN(const Source slab_source, ItemSource(state, slab));
    ASSIGN_OR_RETURN(stored.block_checksums, ChecksumUnit(slab_source, stored.byte_length, settings.block_size));
    ticket.report.references.push_back(std::move(referred));
  }
  return write_rows(written_to, rows.count);
}

}  // namespace ckpt::runtime::staging
