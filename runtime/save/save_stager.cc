#include "runtime/save/save_stager.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "common/fault_injection.h"
#include "gpu/device_copy.h"
#include "io/file_io.h"
#include "runtime/format/manifest.h"
#include "runtime/save/in_place_writer.h"
#include "runtime/save/save_units.h"

namespace ckpt::runtime {
namespace {

using staging::AlignUp;
using staging::CopyUnitRange;
using staging::kChunkAlignment;
using staging::Source;
using staging::Target;
using staging::Unit;
using staging::Window;

// A file's first write waits for its first window to be staged, and the last window's write follows every copy: at
// 64 MiB (as loads read) rather than 256, a 2 GiB save took 0.98-1.01 s instead of 1.13-1.22 on a virtio disk
// (0.51-0.54 instead of 0.54-0.56 on the RAM disk). On two cores the earlier writes slow the staging copy a little
// (ckpt_save blocked 198-265 ms instead of 157-239); with more cores they do not.
constexpr uint64_t kMaxWindowBytes = 64ull << 20;
// Windows at least this large are copied by kStagingCopyThreads threads (the training thread and helpers).
constexpr uint64_t kParallelCopyBytes = 8ull << 20;
constexpr size_t kStagingCopyThreads = 2;

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
// not checksummed where `sums` is null. Only a copy-on-write source can fail (its buffer went away): *status says.
void RunHostCopies(const std::vector<CopyTask>& tasks, uint64_t block_size, std::vector<std::vector<uint64_t>>* sums,
                   Status* status) {
  gpu::DeviceCopier unused;
  for (const CopyTask& t : tasks) {
    if (sums == nullptr) {
      *status = CopyUnitRange(*t.source, t.unit_offset, t.length, t.dst, unused);
    } else {
      io::BlockChecksummer checksummer(block_size);
      *status = CopyUnitRange(*t.source, t.unit_offset, t.length, t.dst, unused, &checksummer);
      sums->push_back(checksummer.Finish());
    }
    if (!status->ok()) return;
  }
}

// Copies a window's pieces into its arena region and zeroes the padding between and after them. The training
// thread is blocked until staging ends, so large windows from host memory are copied by several threads at once,
// and their sources cannot change: each piece is checksummed as it is copied, and *checksums gets every segment's
// block checksums. Pieces in device memory are copied device-to-host on a side stream, waited for before the window
// goes out; a window holding one is not checksummed here (*checksums is left empty): its worker hashes it.
Status FillWindow(Window& w, char* region, uint64_t block_size, std::vector<std::vector<uint64_t>>* checksums) {
  std::vector<CopyTask> host_tasks;
  gpu::DeviceCopier device_copies;
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
  std::vector<Status> part_status(parts.size());
  auto sums_of = [&](size_t p) { return from_device ? nullptr : &part_sums[p]; };
  std::vector<std::thread> helpers;
  for (size_t p = 1; p < parts.size(); ++p) {
    helpers.emplace_back(RunHostCopies, std::cref(parts[p]), block_size, sums_of(p), &part_status[p]);
  }
  RunHostCopies(parts[0], block_size, sums_of(0), &part_status[0]);
  for (std::thread& t : helpers) t.join();
  for (Status& status : part_status) RETURN_IF_ERROR(status);
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

// A staged window's write job before it is handed to its worker (and becomes a PendingWrite).
struct HeldWrite {
  int worker = 0;
  io::WriteJob job;
  io::ArenaRegion region;
  std::vector<StagedPiece> pieces;
  bool finishes_file = false;
  std::vector<std::vector<uint64_t>> checksums;  // per segment, from the staging copy; empty: the worker hashes
  bool compressed = false;
  uint32_t report_file = 0;
};

// The staged windows' writes not yet handed to their workers: every one until staging ends where
// settings.writes_after_staging, else each as soon as it is staged. A save that fails while staging hands nothing
// more out: what is held goes back to the arena.
class HeldWrites {
 public:
  HeldWrites(io::StagingArena& arena, io::WorkerPool& workers, SaveTicket& ticket)
      : arena_(arena), workers_(workers), ticket_(ticket) {}
  ~HeldWrites() {
    for (const HeldWrite& h : held_) arena_.Release(h.region);
  }

  void Hold(HeldWrite write) { held_.push_back(std::move(write)); }

  // Submits every held write to its worker, each becoming one of the ticket's pending writes.
  void HandOut() {
    for (HeldWrite& h : held_) {
      ticket_.pending.push_back(PendingWrite{workers_.SubmitWrite(h.worker, std::move(h.job)), h.region,
                                             std::move(h.pieces), h.finishes_file, std::move(h.checksums),
                                             h.compressed, h.report_file});
    }
    held_.clear();
  }

 private:
  io::StagingArena& arena_;
  io::WorkerPool& workers_;
  SaveTicket& ticket_;
  std::vector<HeldWrite> held_;
};

// This rank's data files: the windows of each (none: the file is not written) and its index in report.files.
// `compressed`: some units are, and every file is laid out as its worker writes it (io::WriteJob::codec).
struct FileLayout {
  std::vector<std::vector<Window>> windows;
  std::vector<uint32_t> report_index;
  bool compressed = false;
};

// Lays the units out over `file_count` files cut into windows of at most `cap` bytes, and records in the report each
// file and where each unit lies in it.
FileLayout LayOutSave(std::vector<Unit>& units, int file_count, uint64_t cap, const StagingSettings& settings,
                      SaveTicket& ticket) {
  const std::vector<std::vector<Unit*>> files = staging::LayOutFiles(units, file_count);
  FileLayout layout{std::vector<std::vector<Window>>(file_count), std::vector<uint32_t>(file_count)};
  layout.compressed = std::any_of(units.begin(), units.end(), [](const Unit& u) { return u.byte_groups != 0; });
  for (int f = 0; f < file_count; ++f) {
    if (files[f].empty()) continue;
    layout.windows[f] = staging::CutWindows(files[f], cap, settings.block_size);
    if (layout.windows[f].empty()) layout.windows[f].push_back(Window{});  // only empty units: the file still exists
    layout.report_index[f] = static_cast<uint32_t>(ticket.report.files.size());
    const Unit* last = files[f].back();
    ticket.report.files.push_back(DataFileRecord{
        settings.data_directory + "/" + std::to_string(settings.rank) + "-" + std::to_string(f) + ".bin",
        last->file_offset + last->bytes, /*checkpoint=*/{}});
  }
  for (Unit& u : units) {
    StoredBytes& stored = Target(ticket, u.target);
    stored.file_index = layout.report_index[u.file];
    // A compressed layout's offsets come from the workers (AbsorbOldest); an empty unit keeps 0.
    stored.file_offset = layout.compressed ? 0 : u.file_offset;
    stored.byte_length = u.bytes;
  }
  return layout;
}

// Asks settings.reserve, where set, for the room of the files laid out, before anything is written.
Status ReserveFiles(const StagingSettings& settings, const SaveTicket& ticket) {
  if (!settings.reserve) return Status::Ok();
  std::vector<std::string> names;
  std::vector<uint64_t> sizes;
  for (const DataFileRecord& file : ticket.report.files) {
    names.push_back(file.name.substr(file.name.rfind('/') + 1));
    sizes.push_back(file.size);
  }
  return settings.reserve(ticket.bytes_to_write, names, sizes);
}

// Writes the files laid out in place (settings.in_place), each at its path in the save's temporary directory.
Status WriteFilesInPlace(FileLayout& layout, const StagingSettings& settings, io::StagingArena& arena,
                         SaveTicket& ticket) {
  std::vector<std::string> paths;
  std::vector<uint64_t> sizes;
  for (size_t f = 0; f < layout.windows.size(); ++f) {
    const bool written = !layout.windows[f].empty();
    const DataFileRecord* record = written ? &ticket.report.files[layout.report_index[f]] : nullptr;
    paths.push_back(written ? io::JoinPath(ticket.commit.tmp_dir, record->name) : std::string());
    sizes.push_back(written ? record->size : 0);
  }
  return staging::WriteInPlace(layout.windows, paths, sizes, settings, arena, ticket);
}

// Copies window `w` into a region of the arena that it returns, with FillWindow's checksums in *checksums. Room
// comes only from written windows: while the arena is full, the held writes are handed out and the oldest in flight
// absorbed.
Result<io::ArenaRegion> StageWindow(Window& w, const StagingSettings& settings, io::StagingArena& arena,
                                    HeldWrites& held, SaveTicket& ticket,
                                    std::vector<std::vector<uint64_t>>* checksums) {
  const uint64_t span = AlignUp(w.file_end - w.file_begin, kChunkAlignment);
  ASSIGN_OR_RETURN(io::ArenaRegion region,
                   arena.AllocateOrFinish(std::max(span, kChunkAlignment), settings.timeout, [&] {
                     held.HandOut();
                     if (ticket.pending.empty()) return false;
                     AbsorbOldest(arena, ticket);
                     return true;
                   }));
  fault::PauseBeforeStaging();
  const Status filled = FillWindow(w, arena.data() + region.offset, settings.block_size, checksums);
  if (!filled.ok()) {
    arena.Release(region);
    return filled;
  }
  return region;
}

// The write job of window `index` of the `count` of file `record`, staged at `region`: the window's segments move
// into it.
io::WriteJob WindowJob(Window& w, size_t index, size_t count, const DataFileRecord& record,
                       const io::ArenaRegion& region, bool compute_checksums, bool compressed,
                       const StagingSettings& settings, const SaveTicket& ticket) {
  io::WriteJob job;
  job.path = io::JoinPath(ticket.commit.tmp_dir, record.name);
  job.create = index == 0;
  job.overwrite_existing = settings.overwrite_existing_files;
  job.finish = index + 1 == count;
  job.final_size = record.size;
  job.block_size = settings.block_size;
  job.compute_checksums = compute_checksums;
  if (compressed) {
    job.codec = io::Codec::kZstd;
    for (const Unit* unit : w.sources) job.byte_groups.push_back(unit->byte_groups);
  }
  job.segments = std::move(w.segments);
  for (io::FileSegment& seg : job.segments) seg.arena_offset += region.offset;
  return job;
}

// Stages the windows laid out and hands them to the workers, round-robin over the files so that every worker has
// work from the start (unless held back until staging ends: settings.writes_after_staging).
Status StageThroughWorkers(FileLayout& layout, const StagingSettings& settings, io::StagingArena& arena,
                           io::WorkerPool& workers, SaveTicket& ticket) {
  HeldWrites held(arena, workers, ticket);
  size_t most = 0;
  for (const auto& w : layout.windows) most = std::max(most, w.size());
  for (size_t i = 0; i < most; ++i) {
    for (size_t f = 0; f < layout.windows.size(); ++f) {
      std::vector<Window>& windows = layout.windows[f];
      if (i >= windows.size()) continue;
      std::vector<std::vector<uint64_t>> checksums;
      ASSIGN_OR_RETURN(const io::ArenaRegion region,
                       StageWindow(windows[i], settings, arena, held, ticket, &checksums));
      const DataFileRecord& record = ticket.report.files[layout.report_index[f]];
      io::WriteJob job = WindowJob(windows[i], i, windows.size(), record, region, checksums.empty(),
                                   layout.compressed, settings, ticket);
      for (const StagedPiece& piece : windows[i].pieces) ticket.bytes_staged += piece.length;
      held.Hold(HeldWrite{static_cast<int>(f), std::move(job), region, std::move(windows[i].pieces),
                          i + 1 == windows.size(), std::move(checksums), layout.compressed,
                          layout.report_index[f]});
      if (!settings.writes_after_staging) held.HandOut();
      // A copy-on-write save stages after its call returned, when only the save thread reports progress.
      if (!ticket.marks.stages_in_background) ticket.progress.Update(ticket.bytes_staged);
    }
  }
  held.HandOut();
  return Status::Ok();
}

// What a copy-on-write save's staging keeps from the call: its units (which the windows point into), laid out, and
// the snapshot of their buffers.
struct StagingJob {
  std::vector<Unit> units;
  std::vector<Unit> replicas;  // CKPT_SAVE_CHECK_REPLICAS: the copies this rank checksums (report.replicas)
  FileLayout layout;
  StagingSettings settings;
  std::deque<std::string> common_copies;  // rank 0's large common entries, owned by the state, copied at the call
  std::shared_ptr<cow::Snapshot> snapshot;
};

// The name a unit's messages give it: its tensor's or object's key.
std::string UnitName(const Unit& unit, const SaveTicket& ticket) {
  const size_t items = ticket.report.items.size();
  return unit.target < items ? ticket.report.items[unit.target].key
                             : ticket.report.stored_common[unit.target - items].key;
}

// Write-protects the buffers of `units` (named by `names`) through `handler`, as their snapshot at the call, and
// points the units at the snapshot.
void ProtectUnits(StagingJob& job, const std::vector<Unit*>& units, const std::vector<std::string>& names,
                  WriteFaultHandler& handler) {
  std::vector<cow::SpanRequest> spans;
  for (size_t i = 0; i < units.size(); ++i) spans.push_back(staging::SpanOf(*units[i], names[i]));
  std::string fallback;
  job.snapshot = handler.Protect(spans, &fallback);
  for (size_t i = 0; i < units.size(); ++i) {
    units[i]->source.snapshot = job.snapshot.get();
    units[i]->source.span = i;
  }
  if (!fallback.empty() && job.settings.note) {
    job.settings.note("a save copies some buffers at the call, their pages refused write protection: " + fallback);
  }
}

// The replica units and their names, to protect.
void AddReplicas(StagingJob& job, const SaveTicket& ticket, std::vector<Unit*>* units,
                 std::vector<std::string>* names) {
  for (Unit& u : job.replicas) {
    units->push_back(&u);
    names->push_back(ticket.report.replicas[u.target].key);
  }
}

// Write-protects the job's host buffers (their snapshot at the call), replicas included, and points the units at
// the snapshot. Common entries live in the state, which the caller may change or free once the call returns: they
// are copied now.
void ProtectForBackground(StagingJob& job, const SaveTicket& ticket) {
  const size_t items = ticket.report.items.size();
  std::vector<Unit*> units;
  std::vector<std::string> names;
  for (Unit& u : job.units) {
    if (u.target >= items) {
      job.common_copies.emplace_back(u.source.base, u.bytes);
      u.source.base = job.common_copies.back().data();
      continue;
    }
    units.push_back(&u);
    names.push_back(UnitName(u, ticket));
  }
  AddReplicas(job, ticket, &units, &names);
  ProtectUnits(job, units, names, *job.settings.copy_on_write);
}

// Fills the checksums of report.replicas from the replica units.
Status ChecksumReplicas(const std::vector<Unit>& replicas, SaveTicket& ticket) {
  for (const Unit& u : replicas) {
    fault::PauseBeforeStaging();
    StoredBytes& sums = ticket.report.replicas[u.target].bytes;
    ASSIGN_OR_RETURN(sums.block_checksums, staging::ChecksumUnit(u.source, u.bytes, sums.block_size));
  }
  return Status::Ok();
}

// The body of a copy-on-write save's staging thread: the replicas checksummed first (their pages stay protected,
// and fault on the trainer's writes, until then) and the windows staged, all through the snapshot, which is lifted
// at the end whatever happens; a failure becomes the save's.
void StageInBackground(StagingJob& job, io::StagingArena& arena, io::WorkerPool& workers, SaveTicket& ticket) {
  Status staged;
  const std::optional<Status> thrown = ExceptionIn("while staging a copy-on-write save", [&] {
    staged = ChecksumReplicas(job.replicas, ticket);
    if (staged.ok()) staged = StageThroughWorkers(job.layout, job.settings, arena, workers, ticket);
  });
  job.settings.copy_on_write->Deactivate(*job.snapshot);
  if (thrown) staged = *thrown;
  if (!staged.ok() && ticket.failure.ok()) ticket.failure = staged;
  ticket.MarkStaged();
}

// Whether a copy-on-write save can stage after its call: only host memory can be protected.
bool StagesInBackground(const StagingJob& job, const StagingSettings& settings) {
  if (settings.copy_on_write == nullptr || settings.in_place != nullptr || job.units.empty()) return false;
  auto on_device = [](const Unit& u) { return u.source.device >= 0; };
  return std::none_of(job.units.begin(), job.units.end(), on_device) &&
         std::none_of(job.replicas.begin(), job.replicas.end(), on_device);
}

// StageSave's writes, the job's units collected.
Status StageWrites(const std::shared_ptr<StagingJob>& job, const StagingSettings& settings, io::StagingArena& arena,
                   io::WorkerPool& workers, SaveTicket& ticket) {
  std::vector<Unit>& units = job->units;
  for (const Unit& u : units) ticket.bytes_to_write += u.bytes;
  ticket.progress.Enter(Phase::kStaging, 0, ticket.bytes_to_write);
  if (units.empty()) return settings.reserve ? settings.reserve(0, {}, {}) : Status::Ok();
  RETURN_IF_ERROR(io::MakeDirectories(io::JoinPath(ticket.commit.tmp_dir, settings.data_directory)));

  const int file_count = std::max(1, workers.size());
  const uint64_t cap = WindowCap(arena, file_count, settings.block_size);
  job->layout = LayOutSave(units, file_count, cap, settings, ticket);
  RETURN_IF_ERROR(ReserveFiles(settings, ticket));
  if (settings.in_place != nullptr) return WriteFilesInPlace(job->layout, settings, arena, ticket);
  if (StagesInBackground(*job, settings)) {
    job->settings = settings;
    ProtectForBackground(*job, ticket);
    ticket.marks.stages_in_background = true;
    ticket.stage_later = [job, &arena, &workers, &ticket] { StageInBackground(*job, arena, workers, ticket); };
    return Status::Ok();
  }
  if (settings.copy_on_write != nullptr && settings.note) {
    settings.note("a copy-on-write save of device memory stages all of it at the call");
  }
  return StageThroughWorkers(job->layout, settings, arena, workers, ticket);
}

// Whether the replicas this rank checks are checksummed after the call, through write protection, in a save that
// stages at the call: only host memory can be protected.
bool ChecksReplicasInBackground(const StagingJob& job, const StagingSettings& settings) {
  if (settings.replica_protection == nullptr || job.replicas.empty()) return false;
  return std::none_of(job.replicas.begin(), job.replicas.end(), [](const Unit& u) { return u.source.device >= 0; });
}

// The body of the thread that checksums the replicas of a save staged at the call, through the snapshot, which is
// lifted at the end whatever happens; a failure becomes the save's.
void ChecksumReplicasInBackground(StagingJob& job, SaveTicket& ticket) {
  Status checked;
  const std::optional<Status> thrown =
      ExceptionIn("while checksumming replicas", [&] { checked = ChecksumReplicas(job.replicas, ticket); });
  job.settings.replica_protection->Deactivate(*job.snapshot);
  if (thrown) checked = *thrown;
  if (!checked.ok() && ticket.failure.ok()) ticket.failure = checked;
  ticket.MarkStaged();
}

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
  // A compressed layout: where the worker put each piece (a unit's pieces follow each other in its file).
  for (size_t i = 0; write.compressed && i < write.pieces.size() && i < result->stored_offsets.size(); ++i) {
    StoredBytes& stored = Target(ticket, write.pieces[i].item);
    if (write.pieces[i].item_offset == 0) stored.file_offset = result->stored_offsets[i];
    for (uint32_t size : result->stored_sizes[i]) ticket.bytes_stored += size;
    if (IsCompressed(stored)) {
      stored.stored_sizes.Append(result->stored_sizes[i].begin(), result->stored_sizes[i].end());
    }
  }
  if (write.finishes_file && write.compressed) ticket.report.files[write.report_file].size = result->file_end;
  if (write.finishes_file) ++ticket.files_written;
}

Status StageSave(const State& state, const SavePlan& plan, const StagingSettings& settings, io::StagingArena& arena,
                 io::WorkerPool& workers, SaveTicket& ticket) {
  auto job = std::make_shared<StagingJob>();
  ASSIGN_OR_RETURN(job->units, staging::CollectUnits(state, plan, settings, ticket));
  ASSIGN_OR_RETURN(job->replicas, staging::CollectReplicaUnits(state, plan, settings, ticket));
  if (job->replicas.empty() || StagesInBackground(*job, settings)) {
    return StageWrites(job, settings, arena, workers, ticket);
  }
  if (ChecksReplicasInBackground(*job, settings)) {
    job->settings = settings;
    std::vector<Unit*> units;
    std::vector<std::string> names;
    AddReplicas(*job, ticket, &units, &names);
    ProtectUnits(*job, units, names, *settings.replica_protection);
    const Status staged = StageWrites(job, settings, arena, workers, ticket);
    if (!staged.ok()) {
      settings.replica_protection->Deactivate(*job->snapshot);
      return staged;
    }
    ticket.stage_later = [job, &ticket] { ChecksumReplicasInBackground(*job, ticket); };
    return Status::Ok();
  }
  // The replicas are checksummed beside the staging, which reads other buffers, and both end before the call (the
  // future's destructor waits, should the staging throw).
  std::future<Status> checked = std::async(std::launch::async, [&] { return ChecksumReplicas(job->replicas, ticket); });
  const Status staged = StageWrites(job, settings, arena, workers, ticket);
  const Status replicas = checked.get();
  RETURN_IF_ERROR(staged);
  return replicas;
}

}  // namespace ckpt::runtime
