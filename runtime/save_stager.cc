#include "runtime/save_stager.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <system_error>
#include <thread>

#include "common/fault_injection.h"
#include "io/file_io.h"
#include "io/streaming_copy.h"
#include "runtime/device_copy.h"
#include "runtime/dtype.h"
#include "runtime/manifest.h"

namespace ckpt::runtime {
namespace {

constexpr uint64_t kChunkAlignment = 4096;
// A file's first write waits for its first window to be staged, and the last window's write follows every copy: at
// 64 MiB (as loads read) rather than 256, a 2 GiB save took 0.98-1.01 s instead of 1.13-1.22 on a virtio disk
// (0.51-0.54 instead of 0.54-0.56 on the RAM disk). On two cores the earlier writes slow the staging copy a little
// (ckpt_save blocked 198-265 ms instead of 157-239); with more cores they do not.
constexpr uint64_t kMaxWindowBytes = 64ull << 20;
// Windows at least this large are copied by kStagingCopyThreads threads (the training thread and helpers).
constexpr uint64_t kParallelCopyBytes = 8ull << 20;
constexpr size_t kStagingCopyThreads = 2;

uint64_t AlignUp(uint64_t value, uint64_t alignment) { return (value + alignment - 1) / alignment * alignment; }

// Where a unit's bytes come from: a box inside a row-major buffer (tensors), or plain bytes (objects, common).
struct Source {
  const char* base = nullptr;  // the buffer holding src_box, or the bytes
  Box src_box;
  Box box;                  // the unit's box inside src_box (tensors)
  size_t element_size = 0;  // 0: plain bytes
  bool contiguous = true;   // box's bytes are one run inside the buffer, starting at base
  int device = -1;          // the CUDA device holding the buffer; -1: host memory
};

// One thing to store: an item of the plan or a common entry; `target` is its index in the report (see Target).
struct Unit {
  Source source;
  uint64_t bytes = 0;
  size_t target = 0;
  uint32_t file = 0;
  uint64_t file_offset = 0;
};

StoredBytes& Target(SaveTicket& ticket, size_t target) {
  const size_t items = ticket.report.items.size();
  return target < items ? ticket.report.items[target].bytes : ticket.report.stored_common[target - items].stored;
}

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
      uint64_t runs = 0, first = 0;
      ForEachRun(s.src_box, s.box, s.box, element_size, [&](uint64_t src_off, uint64_t, uint64_t) {
        if (runs++ == 0) first = src_off;
      });
      s.contiguous = runs <= 1;
      if (s.contiguous) s.base += first;
      return s;
    }
  }
  return Internal("the plan asks this rank to write tensor '" + item.key + "' box " + item.box.ToString() +
                  ", which it does not hold");
}

Result<Source> ObjectSource(const State& state, const WriteItem& item) {
  for (const ObjectShard& object : state.objects()) {
    if (object.key == item.key && object.index == item.index) {
      Source s;
      s.base = static_cast<const char*>(object.data);
      return s;
    }
  }
  return Internal("the plan asks this rank to write object '" + item.key + "', which it does not hold");
}

// Copies bytes [begin, begin + length) of the unit's row-major bytes to `out`: from host memory past the cache
// (io::StreamingCopy; a worker reads the arena next, windows later), fed to `checksummer` as they are copied where
// one is given, or queued on `device_copies` from device memory (the caller waits for those; never checksummed).
Status CopyUnitRange(const Source& s, uint64_t begin, uint64_t length, char* out, DeviceCopier& device_copies,
                     io::BlockChecksummer* checksummer = nullptr) {
  auto copy = [&](char* dst, const char* src, uint64_t n) -> Status {
    if (s.device >= 0) return device_copies.ToHost(s.device, dst, src, n);
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

// The units this rank stores, with the report entries they fill.
Result<std::vector<Unit>> CollectUnits(const State& state, const SavePlan& plan, const StagingSettings& settings,
                                       SaveTicket& ticket) {
  std::vector<Unit> units;
  for (const WriteItem& item : plan.items) {
    if (item.writer != settings.rank) continue;
    Unit unit;
    if (item.is_object) {
      ASSIGN_OR_RETURN(unit.source, ObjectSource(state, item));
    } else {
      ASSIGN_OR_RETURN(unit.source, TensorSource(state, item));
    }
    unit.bytes = item.bytes;
    unit.target = ticket.report.items.size();
    ticket.report.items.push_back(WrittenItem{item.is_object, item.key, item.box, item.index, {}});
    units.push_back(std::move(unit));
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
  for (const Unit& unit : units) Target(ticket, unit.target).block_size = settings.block_size;
  return units;
}

// Spreads the units over one file per worker, largest first onto the lightest file, and gives each its offset.
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

struct Window {
  std::vector<io::FileSegment> segments;  // arena offsets relative to the window's start until staged
  std::vector<StagedPiece> pieces;
  std::vector<const Unit*> sources;
  uint64_t file_begin = 0;
  uint64_t file_end = 0;
};

// Cuts a file's units into windows of at most `cap` bytes; a unit larger than the room left is cut at a multiple
// of the block size, so the checksums of its pieces concatenate into the unit's.
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

// One copy of a window's fill: `length` bytes of a unit, from `unit_offset`, to `dst`; the start of a block of the
// window's segment `segment`.
struct CopyTask {
  const Source* source;
  size_t segment;
  uint64_t unit_offset;
  uint64_t length;
  char* dst;
};

// Cuts the tasks into `parts` runs of about equal bytes, splitting a task at a block boundary near where a cut
// falls inside it, so that every task checksums whole blocks of its segment (but for the segment's last).
std::vector<std::vector<CopyTask>> SplitTasks(const std::vector<CopyTask>& tasks, uint64_t total, size_t parts,
                                              uint64_t block_size) {
  std::vector<std::vector<CopyTask>> out(parts);
  const uint64_t share = (total + parts - 1) / parts;
  size_t part = 0;
  uint64_t room = share;
  for (CopyTask task : tasks) {
    while (task.length > 0) {
      const bool last_part = part + 1 == parts;
      const uint64_t take = last_part ? task.length : std::min(task.length, AlignUp(room, block_size));
      out[part].push_back(CopyTask{task.source, task.segment, task.unit_offset, take, task.dst});
      task.unit_offset += take, task.dst += take, task.length -= take, room -= std::min(room, take);
      if (room == 0 && !last_part) ++part, room = share;
    }
  }
  return out;
}

// Copies host sources, each task's bytes checksummed as they are copied (sums[k]: task k's block checksums), or
// not checksummed where `sums` is null.
void RunHostCopies(const std::vector<CopyTask>& tasks, uint64_t block_size, std::vector<std::vector<uint64_t>>* sums) {
  DeviceCopier unused;
  for (const CopyTask& t : tasks) {
    if (sums == nullptr) {
      (void)CopyUnitRange(*t.source, t.unit_offset, t.length, t.dst, unused);
      continue;
    }
    io::BlockChecksummer checksummer(block_size);
    (void)CopyUnitRange(*t.source, t.unit_offset, t.length, t.dst, unused, &checksummer);
    sums->push_back(checksummer.Finish());
  }
}

// Copies a window's pieces into its arena region and zeroes the padding between and after them. The training
// thread is blocked until staging ends, so large windows from host memory are copied by several threads at once,
// and their sources cannot change: each piece is checksummed as it is copied, and *checksums gets every segment's
// block checksums. Pieces in device memory are copied device-to-host on a side stream, waited for before the window
// goes out; a window holding one is not checksummed here (*checksums is left empty): its worker hashes it.
Status FillWindow(Window& w, char* region, uint64_t block_size, std::vector<std::vector<uint64_t>>* checksums) {
  std::vector<CopyTask> host_tasks;
  DeviceCopier device_copies;
  uint64_t filled = 0, host_total = 0;
  bool from_device = false;
  for (size_t i = 0; i < w.segments.size(); ++i) {
    const io::FileSegment& seg = w.segments[i];
    std::memset(region + filled, 0, seg.arena_offset - filled);
    const Source& source = w.sources[i]->source;
    if (source.device >= 0) {
      from_device = true;
      RETURN_IF_ERROR(
          CopyUnitRange(source, w.pieces[i].item_offset, seg.length, region + seg.arena_offset, device_copies));
    } else {
      host_tasks.push_back(CopyTask{&source, i, w.pieces[i].item_offset, seg.length, region + seg.arena_offset});
      host_total += seg.length;
    }
    filled = seg.arena_offset + seg.length;
  }
  std::memset(region + filled, 0, AlignUp(filled, kChunkAlignment) - filled);
  const size_t threads = host_total < kParallelCopyBytes ? 1 : kStagingCopyThreads;
  const std::vector<std::vector<CopyTask>> parts = SplitTasks(host_tasks, host_total, threads, block_size);
  std::vector<std::vector<std::vector<uint64_t>>> part_sums(parts.size());
  auto sums_of = [&](size_t p) { return from_device ? nullptr : &part_sums[p]; };
  std::vector<std::thread> helpers;
  for (size_t p = 1; p < parts.size(); ++p) {
    helpers.emplace_back(RunHostCopies, std::cref(parts[p]), block_size, sums_of(p));
  }
  RunHostCopies(parts[0], block_size, sums_of(0));
  for (std::thread& t : helpers) t.join();
  checksums->clear();
  if (!from_device) {
    checksums->resize(w.segments.size());
    for (size_t p = 0; p < parts.size(); ++p) {
      for (size_t k = 0; k < parts[p].size(); ++k) {
        std::vector<uint64_t>& sums = (*checksums)[parts[p][k].segment];
        sums.insert(sums.end(), part_sums[p][k].begin(), part_sums[p][k].end());
      }
    }
  }
  return device_copies.Wait();
}

uint64_t WindowCap(const io::StagingArena& arena, int files, uint64_t block_size) {
  const uint64_t share = arena.capacity() / (2 * static_cast<uint64_t>(files) + 2);
  return std::max(block_size, std::min(kMaxWindowBytes, share) / block_size * block_size);
}

// A piece of a window written in place: `piece.length` bytes of a unit at `segment.file_offset`, read where they lie
// or, when `bounce`, copied first to `segment.arena_offset` of the window's arena region.
struct InPlacePart {
  io::FileSegment segment;
  StagedPiece piece;
  const Source* source = nullptr;
  bool bounce = false;
};

// Cuts a window's pieces into those written from where they lie (host memory, one run, aligned as the file's
// `rules` say and, for direct I/O, whole pages) and those copied through the arena. A piece that could go in place
// but for its end (a tensor's last bytes, short of a page) is cut after its last whole checksum block, so that the
// checksums of the two parts concatenate into the piece's. Sets *bounce_bytes to the arena room the copies need.
std::vector<InPlacePart> PlanInPlace(const Window& w, uint64_t block_size, const io::SourceRules& rules,
                                     uint64_t* bounce_bytes) {
  std::vector<InPlacePart> parts;
  *bounce_bytes = 0;
  auto add = [&](uint64_t file_offset, StagedPiece piece, const Source* source, bool bounce) {
    io::FileSegment segment{file_offset, 0, piece.length};
    if (bounce) {
      segment.arena_offset = *bounce_bytes;
      *bounce_bytes += AlignUp(piece.length, kChunkAlignment);
    }
    parts.push_back(InPlacePart{segment, piece, source, bounce});
  };
  for (size_t k = 0; k < w.segments.size(); ++k) {
    const Source& source = w.sources[k]->source;
    const StagedPiece& piece = w.pieces[k];
    const uint64_t at = w.segments[k].file_offset;
    uint64_t in_place = 0;
    if (source.device < 0 && source.contiguous &&
        reinterpret_cast<uintptr_t>(source.base + piece.item_offset) % rules.alignment == 0) {
      const bool whole_pages = !rules.whole_pages || piece.length % kChunkAlignment == 0;
      const bool whole_page_blocks = block_size % kChunkAlignment == 0;
      in_place = whole_pages ? piece.length : whole_page_blocks ? piece.length / block_size * block_size : 0;
    }
    if (in_place > 0) add(at, StagedPiece{piece.item, piece.item_offset, in_place}, &source, false);
    if (in_place < piece.length) {
      add(at + in_place, StagedPiece{piece.item, piece.item_offset + in_place, piece.length - in_place}, &source, true);
    }
  }
  return parts;
}

// Writes a save's files from the state's buffers, one file per thread (the calling thread takes the first and
// reports progress), each with an executor of its own in this process.
class InPlaceWriter {
 public:
  InPlaceWriter(const StagingSettings& settings, io::StagingArena& arena, SaveTicket& ticket)
      : settings_(settings), arena_(arena), ticket_(ticket) {}

  // files[f]: the windows of data file f, written to paths[f] and cut to sizes[f]; a file without windows is
  // not written.
  Status Write(std::vector<std::vector<Window>>& files, const std::vector<std::string>& paths,
               const std::vector<uint64_t>& sizes) {
    std::vector<size_t> used;
    for (size_t f = 0; f < files.size(); ++f) {
      if (!files[f].empty()) used.push_back(f);
    }
    std::vector<std::unique_ptr<io::FileJobExecutor>> executors;
    for (size_t i = 0; i < used.size(); ++i) {
      ASSIGN_OR_RETURN(std::unique_ptr<io::FileJobExecutor> executor,
                       io::FileJobExecutor::CreateForCallerMemory(*settings_.in_place));
      executors.push_back(std::move(executor));
    }
    std::vector<Status> results(used.size());
    auto write_file = [&](size_t i) {
      try {
        results[i] = WriteFile(*executors[i], files[used[i]], paths[used[i]], sizes[used[i]], i == 0);
      } catch (const std::exception& e) {
        results[i] = Internal(std::string("writing a data file in place: ") + e.what());
      }
      if (!results[i].ok()) failed_ = true;
    };
    std::vector<std::thread> threads;
    std::vector<size_t> unthreaded;  // files whose thread the system refused: the calling thread writes them after
    for (size_t i = 1; i < used.size(); ++i) {
      try {
        threads.emplace_back(write_file, i);
      } catch (const std::system_error&) {
        unthreaded.push_back(i);
      }
    }
    write_file(0);
    for (size_t i : unthreaded) write_file(i);
    for (std::thread& t : threads) t.join();
    for (const Status& status : results) RETURN_IF_ERROR(status);
    return Status::Ok();
  }

 private:
  // Creates the file first, to learn how its memory must be aligned (the device's alignment for direct I/O, none
  // for buffered files: a tensor's unaligned start, or its last bytes, then go in place too).
  Status WriteFile(io::FileJobExecutor& executor, std::vector<Window>& windows, const std::string& path,
                   uint64_t final_size, bool reports_progress) {
    io::WriteJob create;
    create.path = path;
    create.create = true;
    create.overwrite_existing = settings_.overwrite_existing_files;
    create.final_size = final_size;
    create.block_size = settings_.block_size;
    ASSIGN_OR_RETURN(const io::SourceRules rules, executor.PrepareWrite(create));
    for (size_t i = 0; i < windows.size() && !failed_; ++i) {
      io::WriteJob job;
      job.path = path;
      job.finish = i + 1 == windows.size();
      job.final_size = final_size;
      job.block_size = settings_.block_size;
      RETURN_IF_ERROR(WriteWindow(executor, windows[i], rules, job));
      if (job.finish) ++ticket_.files_written;
      if (reports_progress) ticket_.progress.Update(ticket_.bytes_written);
    }
    return Status::Ok();
  }

  Status WriteWindow(io::FileJobExecutor& executor, const Window& w, const io::SourceRules& rules, io::WriteJob& job) {
    uint64_t bounce_bytes = 0;
    const std::vector<InPlacePart> parts = PlanInPlace(w, settings_.block_size, rules, &bounce_bytes);
    io::ArenaRegion region;
    if (bounce_bytes > 0) {
      ASSIGN_OR_RETURN(region, arena_.Allocate(bounce_bytes, settings_.timeout));
    }
    const ReleaseAtExit release{arena_, region};
    char* const bounce = arena_.data() + region.offset;
    DeviceCopier device_copies;
    std::vector<const char*> sources;
    for (const InPlacePart& part : parts) {
      job.segments.push_back(part.segment);
      if (!part.bounce) {
        sources.push_back(part.source->base + part.piece.item_offset);
        continue;
      }
      char* const copy = bounce + part.segment.arena_offset;
      RETURN_IF_ERROR(CopyUnitRange(*part.source, part.piece.item_offset, part.piece.length, copy, device_copies));
      std::memset(copy + part.piece.length, 0, AlignUp(part.piece.length, kChunkAlignment) - part.piece.length);
      sources.push_back(copy);
    }
    RETURN_IF_ERROR(device_copies.Wait());
    ASSIGN_OR_RETURN(io::WriteResult written, executor.WriteFrom(job, sources));
    for (size_t k = 0; k < parts.size() && k < written.checksums.size(); ++k) {
      auto& sums = Target(ticket_, parts[k].piece.item).block_checksums;
      sums.insert(sums.end(), written.checksums[k].begin(), written.checksums[k].end());
      if (parts[k].bounce) ticket_.bytes_staged += parts[k].piece.length;
      ticket_.bytes_written += parts[k].piece.length;
    }
    return Status::Ok();
  }

  struct ReleaseAtExit {
    io::StagingArena& arena;
    io::ArenaRegion region;
    ~ReleaseAtExit() {
      if (region.size > 0) arena.Release(region);
    }
  };

  const StagingSettings& settings_;
  io::StagingArena& arena_;
  SaveTicket& ticket_;
  std::atomic<bool> failed_{false};  // a file's writer failed: the others stop at their next window
};

// A staged window's write job before it is handed to its worker (and becomes a PendingWrite).
struct HeldWrite {
  int worker = 0;
  io::WriteJob job;
  io::ArenaRegion region;
  std::vector<StagedPiece> pieces;
  bool finishes_file = false;
  std::vector<std::vector<uint64_t>> checksums;  // per segment, from the staging copy; empty: the worker hashes
};

struct ReleaseHeldAtExit {
  io::StagingArena& arena;
  const std::vector<HeldWrite>& held;
  ~ReleaseHeldAtExit() {
    for (const HeldWrite& h : held) arena.Release(h.region);
  }
};

}  // namespace

void AbsorbOldest(io::StagingArena& arena, SaveTicket& ticket) {
  PendingWrite write = std::move(ticket.pending.front());
  ticket.pending.pop_front();
  Result<io::WriteResult> result = write.result.get();
  arena.Release(write.region);
  if (!result.ok()) {
    if (ticket.failure.ok()) ticket.failure = result.status();
    return;
  }
  const std::vector<std::vector<uint64_t>>& checksums =
      write.staged_checksums.empty() ? result->checksums : write.staged_checksums;
  for (size_t i = 0; i < write.pieces.size() && i < checksums.size(); ++i) {
    auto& sums = Target(ticket, write.pieces[i].item).block_checksums;
    sums.insert(sums.end(), checksums[i].begin(), checksums[i].end());
    ticket.bytes_written += write.pieces[i].length;
  }
  if (write.finishes_file) ++ticket.files_written;
}

Status StageSave(const State& state, const SavePlan& plan, const StagingSettings& settings, io::StagingArena& arena,
                 io::WorkerPool& workers, SaveTicket& ticket) {
  ASSIGN_OR_RETURN(std::vector<Unit> units, CollectUnits(state, plan, settings, ticket));
  for (const Unit& u : units) ticket.bytes_to_write += u.bytes;
  ticket.progress.Enter(Phase::kStaging, 0, ticket.bytes_to_write);
  if (units.empty()) return settings.reserve ? settings.reserve(0, {}, {}) : Status::Ok();
  RETURN_IF_ERROR(io::MakeDirectories(io::JoinPath(ticket.commit.tmp_dir, kDataDirName)));

  const int file_count = std::max(1, workers.size());
  std::vector<std::vector<Unit*>> files = LayOutFiles(units, file_count);
  const uint64_t cap = WindowCap(arena, file_count, settings.block_size);
  std::vector<std::vector<Window>> windows(file_count);
  std::vector<uint32_t> report_index(file_count);
  for (int f = 0; f < file_count; ++f) {
    if (files[f].empty()) continue;
    windows[f] = CutWindows(files[f], cap, settings.block_size);
    if (windows[f].empty()) windows[f].push_back(Window{});  // only empty units: the file still exists
    report_index[f] = static_cast<uint32_t>(ticket.report.files.size());
    const Unit* last = files[f].back();
    ticket.report.files.push_back(DataFileRecord{
        std::string(kDataDirName) + "/" + std::to_string(settings.rank) + "-" + std::to_string(f) + ".bin",
        last->file_offset + last->bytes});
  }
  for (Unit& u : units) {
    StoredBytes& stored = Target(ticket, u.target);
    stored.file_index = report_index[u.file];
    stored.file_offset = u.file_offset;
    stored.byte_length = u.bytes;
  }
  if (settings.reserve) {
    std::vector<std::string> names;
    std::vector<uint64_t> sizes;
    for (const DataFileRecord& file : ticket.report.files) {
      names.push_back(file.name.substr(file.name.rfind('/') + 1));
      sizes.push_back(file.size);
    }
    RETURN_IF_ERROR(settings.reserve(ticket.bytes_to_write, names, sizes));
  }

  if (settings.in_place != nullptr) {
    std::vector<std::string> paths;
    std::vector<uint64_t> sizes;
    for (int f = 0; f < file_count; ++f) {
      const bool written = !windows[f].empty();
      const DataFileRecord* record = written ? &ticket.report.files[report_index[f]] : nullptr;
      paths.push_back(written ? io::JoinPath(ticket.commit.tmp_dir, record->name) : std::string());
      sizes.push_back(written ? record->size : 0);
    }
    return InPlaceWriter(settings, arena, ticket).Write(windows, paths, sizes);
  }
  // Windows go out round-robin over the files, so every worker has work from the start (unless held back until
  // staging ends: settings.writes_after_staging).
  std::vector<HeldWrite> held;
  // A save that fails while staging hands nothing more out: what it held goes back to the arena.
  const ReleaseHeldAtExit release_held{arena, held};
  auto hand_out_held = [&] {
    for (HeldWrite& h : held) {
      ticket.pending.push_back(PendingWrite{workers.SubmitWrite(h.worker, std::move(h.job)), h.region,
                                            std::move(h.pieces), h.finishes_file, std::move(h.checksums)});
    }
    held.clear();
  };
  size_t most = 0;
  for (const auto& w : windows) most = std::max(most, w.size());
  for (size_t i = 0; i < most; ++i) {
    for (int f = 0; f < file_count; ++f) {
      if (i >= windows[f].size()) continue;
      Window& w = windows[f][i];
      const uint64_t span = AlignUp(w.file_end - w.file_begin, kChunkAlignment);
      ASSIGN_OR_RETURN(io::ArenaRegion region,
                       arena.AllocateOrFinish(std::max(span, kChunkAlignment), settings.timeout, [&] {
                         hand_out_held();  // room comes only from written windows
                         if (ticket.pending.empty()) return false;
                         AbsorbOldest(arena, ticket);
                         return true;
                       }));
      fault::PauseBeforeStagingWindow();
      std::vector<std::vector<uint64_t>> checksums;
      const Status filled = FillWindow(w, arena.data() + region.offset, settings.block_size, &checksums);
      if (!filled.ok()) {
        arena.Release(region);
        return filled;
      }
      io::WriteJob job;
      job.path = io::JoinPath(ticket.commit.tmp_dir, ticket.report.files[report_index[f]].name);
      job.create = i == 0;
      job.overwrite_existing = settings.overwrite_existing_files;
      job.finish = i + 1 == windows[f].size();
      job.final_size = ticket.report.files[report_index[f]].size;
      job.block_size = settings.block_size;
      job.compute_checksums = checksums.empty();
      job.segments = std::move(w.segments);
      for (io::FileSegment& seg : job.segments) seg.arena_offset += region.offset;
      for (const StagedPiece& piece : w.pieces) ticket.bytes_staged += piece.length;
      const bool finishes_file = job.finish;
      held.push_back(HeldWrite{f, std::move(job), region, std::move(w.pieces), finishes_file, std::move(checksums)});
      if (!settings.writes_after_staging) hand_out_held();
      ticket.progress.Update(ticket.bytes_staged);
    }
  }
  hand_out_held();
  return Status::Ok();
}

}  // namespace ckpt::runtime
