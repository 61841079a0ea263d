#include "runtime/save/save_units.h"

#include <algorithm>
#include <functional>
#include <string>
#include <utility>

#include "io/streaming_copy.h"
#include "runtime/core/dtype.h"
#include "runtime/save/incremental_units.h"

namespace ckpt::runtime::staging {
namespace {

// A tensor item's bytes: in the piece of this rank's shards that holds the item's whole box.
Result<Source> TensorSource(const State& state, const WriteItem& item) {
  for (size_t index : state.TensorsWithKey(item.key)) {
    const TensorShard& shard = state.tensors()[index];
    const size_t element_size = DTypeSize(shard.dtype);
    for (const FlatPiece& piece : shard.pieces) {
      if (!Contains(piece.box, item.box)) continue;
      Source s;
      s.base = static_cast<const char*>(shard.data) + piece.range_offset * element_size;
      s.src_box = piece.box;
      s.box = item.box;
      s.element_size = element_size;
      s.device = shard.device;
      s.dtype = shard.dtype;
      s.compress = shard.compress;
      uint64_t runs = 0, first = 0;
      ForEachRun(s.src_box, s.box, s.box, element_size, [&](uint64_t src_off, uint64_t, uint64_t) {
        if (runs++ == 0) first = src_off;
      });
      s.contiguous = runs <= 1;
      if (s.contiguous) s.base += first;
      return s;
    }
  }
  return Internal("the plan gives this rank tensor '" + item.key + "' box " + item.box.ToString() +
                  ", which it does not hold");
}

// An object item's bytes: this rank's object of the item's key and index.
Result<Source> ObjectSource(const State& state, const WriteItem& item) {
  for (const ObjectShard& object : state.objects()) {
    if (object.key == item.key && object.index == item.index) {
      Source s;
      s.base = static_cast<const char*>(object.data);
      return s;
    }
  }
  return Internal("the plan gives this rank object '" + item.key + "', which it does not hold");
}

// How a compressed unit groups its bytes: floating-point elements (complex ones as their two parts) by their width,
// so that exponent bytes code apart from mantissa bytes; anything else not at all.
uint32_t ByteGroupsOf(const Source& source) {
  if (source.element_size == 0) return 1;
  switch (static_cast<DType>(source.dtype)) {
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kF32:
    case DType::kC64:
      return 4;
    case DType::kF64:
    case DType::kC128:
      return 8;
    default:
      return 1;
  }
}

}  // namespace

Result<Source> ItemSource(const State& state, const WriteItem& item) {
  return item.is_object ? ObjectSource(state, item) : TensorSource(state, item);
}

StoredBytes& Target(SaveTicket& ticket, size_t target) {
  const size_t items = ticket.report.items.size();
  return target < items ? ticket.report.items[target].bytes : ticket.report.stored_common[target - items].stored;
}

Status AddItemUnit(const State& state, const WriteItem& item, SaveTicket& ticket, std::vector<Unit>& units) {
  Unit unit;
  ASSIGN_OR_RETURN(unit.source, ItemSource(state, item));
  unit.bytes = item.bytes;
  unit.target = ticket.report.items.size();
  ticket.report.items.push_back(WrittenItem{item.is_object, item.key, item.box, item.index, {}});
  units.push_back(std::move(unit));
  return Status::Ok();
}

Result<std::vector<Unit>> CollectUnits(const State& state, const SavePlan& plan, const StagingSettings& settings,
                                       SaveTicket& ticket) {
  std::vector<Unit> units;
  for (const WriteItem& item : plan.items) {
    if (item.writer != settings.rank) continue;
    if (settings.record_digests && !item.is_object) {
      RETURN_IF_ERROR(AddIncrementalUnits(state, item, settings, ticket, units));
      continue;
    }
    RETURN_IF_ERROR(AddItemUnit(state, item, ticket, units));
  }
  if (settings.rank == 0) {
    for (const auto& [key, bytes] : state.common()) {
      if (bytes.size() <= settings.inline_common_max) {
        ticket.commit.inline_common.push_back(CommonRecord{key, true, bytes, {}});
        continue;
      }
      Unit unit;
      unit.source.base = bytes.data();
      unit.bytes = bytes.size();
      unit.target = ticket.report.items.size() + ticket.report.stored_common.size();
      ticket.report.stored_common.push_back(CommonRecord{key, false, {}, {}});
      units.push_back(std::move(unit));
    }
  }
  for (Unit& unit : units) {
    StoredBytes& stored = Target(ticket, unit.target);
    stored.block_size = settings.block_size;
    using Compression = StagingSettings::Compression;
    if (settings.compression == Compression::kAll ||
        (settings.compression == Compression::kShardsAsking && unit.source.compress)) {
      unit.byte_groups = ByteGroupsOf(unit.source);
      stored.codec = static_cast<uint8_t>(io::Codec::kZstd);
      stored.byte_groups = static_cast<uint8_t>(unit.byte_groups);
    }
  }
  return units;
}

Result<std::vector<Unit>> CollectReplicaUnits(const State& state, const SavePlan& plan, const StagingSettings& settings,
                                              SaveTicket& ticket) {
  std::vector<Unit> units;
  for (const ReplicaCheck& check : plan.replicas) {
    if (check.holder != settings.rank) continue;
    const WriteItem& item = check.item;
    Unit unit;
    ASSIGN_OR_RETURN(unit.source, ItemSource(state, item));
    unit.bytes = item.bytes;
    unit.target = ticket.report.replicas.size();
    StoredBytes stored;
    stored.byte_length = item.bytes;
    stored.block_size = settings.block_size;
    ticket.report.replicas.push_back(WrittenItem{item.is_object, item.key, item.box, item.index, std::move(stored)});
    units.push_back(std::move(unit));
  }
  return units;
}

Status ReadUnit(const Source& s, uint64_t bytes, const std::function<void(const char*, uint64_t)>& consume) {
  if (s.device < 0 && s.snapshot == nullptr) {
    if (s.contiguous) {
      consume(s.base, bytes);
    } else {
      ForEachRun(s.src_box, s.box, s.box, s.element_size,
                 [&](uint64_t src_off, uint64_t, uint64_t n) { consume(s.base + src_off, n); });
    }
    return Status::Ok();
  }
  // Large enough for device copies and snapshot reads to run near their full speed, small enough to stay cached.
  constexpr uint64_t kBounceBytes = 4ull << 20;
  std::vector<char> bounce(std::min(bytes, kBounceBytes));
  gpu::DeviceCopier device_copies;
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t piece = std::min<uint64_t>(bounce.size(), bytes - done);
    RETURN_IF_ERROR(CopyUnitRange(s, done, piece, bounce.data(), device_copies));
    RETURN_IF_ERROR(device_copies.Wait());
    consume(bounce.data(), piece);
    done += piece;
  }
  return Status::Ok();
}

Result<std::vector<uint64_t>> ChecksumUnit(const Source& s, uint64_t bytes, uint64_t block_size) {
  io::BlockChecksummer checksummer(block_size);
  RETURN_IF_ERROR(ReadUnit(s, bytes, [&](const char* data, uint64_t n) { checksummer.Update(data, n); }));
  return checksummer.Finish();
}

std::vector<std::vector<Unit*>> LayOutFiles(std::vector<Unit>& units, int file_count) {
  std::vector<Unit*> by_size;
  for (Unit& u : units) by_size.push_back(&u);
  std::stable_sort(by_size.begin(), by_size.end(), [](const Unit* a, const Unit* b) { return a->bytes > b->bytes; });
  std::vector<uint64_t> load(file_count, 0);
  for (Unit* u : by_size) {
    u->file = static_cast<uint32_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[u->file] += u->bytes;
  }
  std::vector<std::vector<Unit*>> files(file_count);
  for (Unit& u : units) files[u.file].push_back(&u);
  for (auto& file : files) {
    uint64_t end = 0;
    for (Unit* u : file) {
      u->file_offset = AlignUp(end, kChunkAlignment);
      end = u->file_offset + u->bytes;
    }
  }
  return files;
}

std::vector<Window> CutWindows(const std::vector<Unit*>& file, uint64_t cap, uint64_t block_size) {
  std::vector<Window> windows;
  for (const Unit* u : file) {
    uint64_t pos = 0;
    while (pos < u->bytes) {
      const uint64_t at = u->file_offset + pos;
      const uint64_t room = windows.empty() ? 0 : cap - std::min(cap, at - windows.back().file_begin);
      uint64_t take = std::min(u->bytes - pos, room);
      if (take < u->bytes - pos) take = take / block_size * block_size;
      if (take == 0) {
        windows.push_back(Window{{}, {}, {}, at, at});
        take = std::min(u->bytes - pos, cap);
      }
      Window& w = windows.back();
      w.segments.push_back(io::FileSegment{at, at - w.file_begin, take});
      w.pieces.push_back(StagedPiece{u->target, pos, take});
      w.sources.push_back(u);
      w.file_end = at + take;
      pos += take;
    }
  }
  return windows;
}

cow::SpanRequest SpanOf(const Unit& unit, std::string name) {
  const Source& s = unit.source;
  cow::SpanRequest span;
  span.name = std::move(name);
  const uintptr_t base = reinterpret_cast<uintptr_t>(s.base);
  if (s.contiguous) {
    span.begin = base;
    span.end = base + unit.bytes;
    span.for_each_run = [b = span.begin, n = unit.bytes](const auto& run) { run(b, n); };
    return span;
  }
  span.begin = UINTPTR_MAX;
  ForEachRun(s.src_box, s.box, s.box, s.element_size, [&](uint64_t src_off, uint64_t, uint64_t n) {
    span.begin = std::min<uintptr_t>(span.begin, base + src_off);
    span.end = std::max<uintptr_t>(span.end, base + src_off + n);
  });
  if (span.begin > span.end) span.begin = span.end = base;  // an empty box
  span.for_each_run = [s, base](const auto& run) {
    ForEachRun(s.src_box, s.box, s.box, s.element_size,
               [&](uint64_t src_off, uint64_t, uint64_t n) { run(base + src_off, n); });
  };
  return span;
}

// Reads bytes of a copy-on-write source into `dst` in pieces small enough to be hashed while still in the cache, and
// large enough for process_vm_readv (cow::Snapshot's reads) to run near memcpy's speed: 1 GiB of huge pages read at
// 12 GiB/s by 256 KiB, 16 by 1 MiB, 17 by 4 MiB (memcpy: 19).
static Status ReadSnapshot(const Source& s, char* dst, const char* src, uint64_t n, io::BlockChecksummer* checksummer) {
  constexpr uint64_t kPiece = 1 << 20;
  for (uint64_t done = 0; done < n;) {
    const uint64_t piece = std::min(kPiece, n - done);
    RETURN_IF_ERROR(s.snapshot->Read(s.span, src + done, piece, dst + done));
    if (checksummer != nullptr) checksummer->Update(dst + done, piece);
    done += piece;
  }
  return Status::Ok();
}

Status CopyUnitRange(const Source& s, uint64_t begin, uint64_t length, char* out, gpu::DeviceCopier& device_copies,
                     io::BlockChecksummer* checksummer) {
  auto copy = [&](char* dst, const char* src, uint64_t n) -> Status {
    if (s.device >= 0) return device_copies.ToHost(s.device, dst, src, n);
    if (s.snapshot != nullptr) return ReadSnapshot(s, dst, src, n, checksummer);
    if (checksummer != nullptr) {
      io::StreamingCopyChecksummed(dst, src, n, *checksummer);
    } else {
      io::StreamingCopy(dst, src, n);
    }
    return Status::Ok();
  };
  if (s.contiguous) return copy(out, s.base + begin, length);
  // The runs come in the order of the unit's bytes, as the checksummer needs them.
  const uint64_t end = begin + length;
  Status status;
  ForEachRun(s.src_box, s.box, s.box, s.element_size, [&](uint64_t src_off, uint64_t dst_off, uint64_t n) {
    const uint64_t lo = std::max(dst_off, begin), hi = std::min(dst_off + n, end);
    if (lo < hi && status.ok()) status = copy(out + (lo - begin), s.base + src_off + (lo - dst_off), hi - lo);
  });
  return status;
}

}  // namespace ckpt::runtime::staging
