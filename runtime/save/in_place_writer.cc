#include "runtime/save/in_place_writer.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <system_error>
#include <thread>
#include <utility>

#include "gpu/device_copy.h"
#include "io/file_jobs.h"

namespace ckpt::runtime::staging {
namespace {

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

// Writes a save's files from the state's buffers on the tuning's caller_memory_threads (at most one per file), each
// with an executor of its own in this process, taking the files in turn; the calling thread takes the first and
// reports progress.
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
    const size_t writers = std::min<size_t>(used.size(), std::max(1u, settings_.in_place->caller_memory_threads));
    std::vector<std::unique_ptr<io::FileJobExecutor>> executors;
    for (size_t w = 0; w < writers; ++w) {
      ASSIGN_OR_RETURN(std::unique_ptr<io::FileJobExecutor> executor,
                       io::FileJobExecutor::CreateForCallerMemory(*settings_.in_place));
      executors.push_back(std::move(executor));
    }
    std::vector<Status> results(used.size());
    // Writer w writes files w, w + writers, ... of `used`, each after the one before.
    auto write_files = [&](size_t w) {
      for (size_t i = w; i < used.size() && !failed_; i += writers) {
        try {
          results[i] = WriteFile(*executors[w], files[used[i]], paths[used[i]], sizes[used[i]], w == 0);
        } catch (const std::exception& e) {
          results[i] = Internal(std::string("writing a data file in place: ") + e.what());
        }
        if (!results[i].ok()) failed_ = true;
      }
    };
    std::vector<std::thread> threads;
    std::vector<size_t> unthreaded;  // writers whose thread the system refused: the calling thread runs them after
    for (size_t w = 1; w < writers; ++w) {
      try {
        threads.emplace_back(write_files, w);
      } catch (const std::system_error&) {
        unthreaded.push_back(w);
      }
    }
    write_files(0);
    for (size_t w : unthreaded) write_files(w);
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
    gpu::DeviceCopier device_copies;
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

}  // namespace

Status WriteInPlace(std::vector<std::vector<Window>>& files, const std::vector<std::string>& paths,
                    const std::vector<uint64_t>& sizes, const StagingSettings& settings, io::StagingArena& arena,
                    SaveTicket& ticket) {
  return InPlaceWriter(settings, arena, ticket).Write(files, paths, sizes);
}

}  // namespace ckpt::runtime::staging
