#include "runtime/export/export_writer.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "io/committed_memory.h"
#include "io/file_io.h"
#include "io/io_backend.h"
#include "io/object_storage.h"
#include "runtime/core/box.h"
#include "runtime/core/dtype.h"
#include "runtime/core/dtype_cast.h"
#include "runtime/load/chunk_fetcher.h"

namespace ckpt::runtime {

uint64_t ExportedTensor::bytes() const { return Volume(record->shape) * DTypeSize(dtype); }

namespace {

// A window's last element may end past the window, by less than one element: that many bytes spill into the next.
constexpr uint64_t kSpillBytes = io::kDirectAlignment;
// Windows in memory at once: one being filled, the others queued or being written.
constexpr size_t kWindows = 4;

uint64_t RoundUp(uint64_t value, uint64_t granule) { return (value + granule - 1) / granule * granule; }

struct FreeAligned {
  void operator()(char* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<char, FreeAligned>;

// Page-aligned memory of at least `size` bytes, a whole number of pages; null when there is none.
AlignedBytes AllocateAligned(uint64_t size) {
  return AlignedBytes(
      static_cast<char*>(std::aligned_alloc(io::kDirectAlignment, RoundUp(size, io::kDirectAlignment))));
}

// Writes the file's windows in order on a thread of its own, all the windows waiting at once as one job, so that the
// device sees many requests while the caller fills the next windows. Destroyed before WaitForRoom(0), it writes no
// more (the export failed) but waits for the write under way.
class WindowWriter {
 public:
  WindowWriter(io::FileJobExecutor& executor, const std::string& path, uint64_t file_size)
      : executor_(executor), path_(path), file_size_(file_size), thread_([this] { Run(); }) {}
  ~WindowWriter() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closing_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }

  // Queues the file's bytes [begin, end), at `data`: page-aligned, and at the file's end followed by zeros up to a
  // page boundary, which direct writes carry (and the file is then cut to its size).
  void Write(const char* data, uint64_t begin, uint64_t end) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queued_.push_back(Window{data, begin, end});
    }
    changed_.notify_all();
  }

  // Waits until at most `windows` are queued or being written; the first failure, if any.
  Status WaitForRoom(size_t windows) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return queued_.size() + writing_ <= windows || !status_.ok(); });
    return status_;
  }

 private:
  struct Window {
    const char* data = nullptr;
    uint64_t begin = 0;
    uint64_t end = 0;
  };

  void Run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return !queued_.empty() || closing_; });
      if (queued_.empty()) return;
      const std::vector<Window> batch(queued_.begin(), queued_.end());
      queued_.clear();
      writing_ = batch.size();
      const bool skip = !status_.ok() || closing_;
      lock.unlock();
      const Status status = skip ? Status::Ok() : WriteBatch(batch);
      lock.lock();
      if (status_.ok()) status_ = status;
      writing_ = 0;
      changed_.notify_all();
    }
  }

  // One job of one segment per window; the job holding the file's end finishes the file (cut to size, synced).
  Status WriteBatch(const std::vector<Window>& batch) const {
    io::WriteJob job;
    job.path = path_;
    job.final_size = file_size_;
    job.finish = batch.back().end == file_size_;
    job.compute_checksums = false;
    std::vector<const char*> sources;
    for (const Window& w : batch) {
      job.segments.push_back(io::FileSegment{w.begin, 0, w.end - w.begin});
      sources.push_back(w.data);
    }
    return executor_.WriteFrom(job, sources).status();
  }

  io::FileJobExecutor& executor_;
  const std::string& path_;
  const uint64_t file_size_;
  std::mutex mutex_;
  std::condition_variable changed_;  // a window queued or written, or closing
  std::deque<Window> queued_;
  size_t writing_ = 0;
  bool closing_ = false;
  Status status_;
  std::thread thread_;
};

// The chunks' parts holding elements [first, last) of `record` (row-major), to land at `dst`: one fetch per chunk
// and regular piece of the range, so that each has one consumer and can be read straight into it.
void AddFetches(const TensorRecord& record, uint64_t first, uint64_t last, char* dst,
                std::vector<ChunkFetch>* fetches) {
  const uint64_t element = DTypeSize(record.dtype);
  for (const FlatPiece& piece : DecomposeFlatRange(WholeBox(record.shape), first, last)) {
    for (size_t c = 0; c < record.chunks.size(); ++c) {
      const std::optional<Box> region = Intersect(record.chunks[c].box, piece.box);
      if (!region) continue;
      fetches->push_back(
          ChunkFetch{&record, c, {ChunkConsumer{*region, dst + piece.range_offset * element, piece.box}}});
    }
  }
}

// Fills windows in file order. `next_` is the first file byte not yet placed in a window: the header's bytes, then
// every tensor's, each tensor as whole elements read straight into the window's buffer (or, for a tensor exported
// in another dtype, into `stored_` and converted into the window).
class WindowFiller {
 public:
  WindowFiller(const io::IoTuning& tuning, const CheckpointSource& source, const std::string& checkpoint,
               const std::string& header, const std::vector<ExportedTensor>& tensors)
      : tuning_(tuning),
        source_(source),
        checkpoint_(checkpoint),
        header_(header),
        tensors_(tensors),
        start_(header.size()) {}

  // Fills `buffer` with the file's bytes [begin, end) (bytes [begin, next_) are already there, carried over from
  // the window before) and returns how far it filled: up to one element past `end`.
  Result<uint64_t> Fill(char* buffer, uint64_t begin, uint64_t end) {
    if (next_ < header_.size()) {
      const uint64_t stop = std::min<uint64_t>(header_.size(), end);
      std::memcpy(buffer + (next_ - begin), header_.data() + next_, stop - next_);
      next_ = stop;
    }
    std::vector<ChunkFetch> fetches;
    std::vector<Cast> casts;
    uint64_t stored_bytes = 0;
    while (next_ < end && tensor_ < tensors_.size()) {
      const ExportedTensor& t = tensors_[tensor_];
      const uint64_t element = DTypeSize(t.dtype);
      const uint64_t count = Volume(t.record->shape);
      const uint64_t first = (next_ - start_) / element;
      const uint64_t last = std::min(count, (end - start_ + element - 1) / element);
      if (last > first) {
        char* dst = buffer + (next_ - begin);
        if (t.dtype == t.record->dtype) {
          AddFetches(*t.record, first, last, dst, &fetches);
        } else {
          casts.push_back(Cast{&t, first, last, dst, stored_bytes});
          stored_bytes += RoundUp((last - first) * DTypeSize(t.record->dtype), io::kDirectAlignment);
        }
      }
      next_ = start_ + last * element;
      if (last == count) {
        start_ = next_;
        ++tensor_;
      }
    }
    RETURN_IF_ERROR(ReserveStored(stored_bytes));
    for (const Cast& c : casts) AddFetches(*c.tensor->record, c.first, c.last, stored_.get() + c.at, &fetches);
    if (!fetches.empty()) {
      RETURN_IF_ERROR(FetchChunksInProcess(tuning_, source_.dir, source_.manifest, fetches)
                          .status()
                          .WithContext("reading " + Quoted(checkpoint_)));
    }
    for (const Cast& c : casts) {
      CastElements(c.tensor->record->dtype, c.tensor->dtype, stored_.get() + c.at, c.dst, c.last - c.first);
    }
    return next_;
  }

 private:
  // Elements [first, last) of a tensor exported in another dtype: read as stored at offset `at` of `stored_`, then
  // converted to `dst` in the window.
  struct Cast {
    const ExportedTensor* tensor = nullptr;
    uint64_t first = 0;
    uint64_t last = 0;
    char* dst = nullptr;
    uint64_t at = 0;
  };

  Status ReserveStored(uint64_t size) {
    if (size <= stored_size_) return Status::Ok();
    stored_ = AllocateAligned(size);
    stored_size_ = stored_ != nullptr ? size : 0;
    if (stored_ == nullptr) return Status(Code::kNoMemory, "no memory for the export's values to convert");
    return Status::Ok();
  }

  const io::IoTuning& tuning_;
  const CheckpointSource& source_;
  const std::string& checkpoint_;
  const std::string& header_;
  const std::vector<ExportedTensor>& tensors_;
  size_t tensor_ = 0;
  uint64_t start_;  // file offset of tensor_'s first byte
  uint64_t next_ = 0;
  AlignedBytes stored_;
  uint64_t stored_size_ = 0;
};

// Fills the windows one after another into `ring` (kWindows slots of `slot` bytes) while `writer` writes those
// filled before. Window edges lie a whole number of windows from where the data starts (after the page-padded
// header), so that a tensor's bytes keep in the window the page alignment they have in the file and go straight in;
// the first window holds what precedes the first such edge.
Status FillWindows(WindowFiller& filler, WindowWriter& writer, char* ring, uint64_t slot, uint64_t window,
                   uint64_t data_start, uint64_t file_size) {
  const uint64_t phase = data_start / io::kDirectAlignment * io::kDirectAlignment % window;
  uint64_t carried = 0;
  const char* previous = nullptr;
  for (uint64_t k = 0, begin = 0; begin < file_size; ++k) {
    const uint64_t end = std::min(file_size, begin == 0 && phase != 0 ? phase : begin + window);
    // The window kWindows before this one must be written before its buffer takes this one.
    RETURN_IF_ERROR(writer.WaitForRoom(kWindows - 1));
    char* buffer = ring + (k % kWindows) * slot;
    // Committed at its first use, at a fraction of the cost of the faults its first direct reads would take. Not
    // huge pages: right after the page cache was dropped, 64 MiB of them stalled 130-160 ms in compaction here.
    if (k < kWindows) io::CommitPages(buffer, slot);
    // Bytes past the last window (its last element's tail) start this one.
    if (carried > 0) std::memcpy(buffer, previous, carried);
    ASSIGN_OR_RETURN(const uint64_t filled, filler.Fill(buffer, begin, end));
    if (end == file_size)
      std::memset(buffer + (end - begin), 0, RoundUp(end - begin, io::kDirectAlignment) - (end - begin));
    writer.Write(buffer, begin, end);
    carried = filled - end;
    previous = buffer + (end - begin);
    begin = end;
  }
  return writer.WaitForRoom(0);
}

}  // namespace

Status WriteExportFile(const io::IoTuning& tuning, const CheckpointSource& source, const std::string& checkpoint,
                       const std::string& path, const std::string& header, const std::vector<ExportedTensor>& tensors,
                       uint64_t window_bytes) {
  uint64_t data_bytes = 0;
  for (const ExportedTensor& t : tensors) data_bytes += t.bytes();
  const uint64_t file_size = header.size() + data_bytes;
  const uint64_t window =
      std::max<uint64_t>(1, RoundUp(window_bytes, io::kDirectAlignment) / io::kDirectAlignment) * io::kDirectAlignment;
  ASSIGN_OR_RETURN(std::unique_ptr<io::FileJobExecutor> executor, io::FileJobExecutor::CreateForCallerMemory(tuning));
  // Creates the file (or starts the object's upload) and reserves its size: direct writes where the file system
  // does them, else (tmpfs before Linux 6.6) through the page cache.
  io::WriteJob create;
  create.path = path;
  create.create = true;
  create.final_size = file_size;
  const Result<io::SourceRules> prepared = executor->PrepareWrite(create);
  if (!prepared.ok()) {
    // Not this export's file to remove when one was there already; otherwise it may have been created.
    if (prepared.status().code() != Code::kAlreadyExists && !io::IsObjectStorePath(path)) unlink(path.c_str());
    return prepared.status();
  }
  const uint64_t slot = window + kSpillBytes;
  const AlignedBytes ring = AllocateAligned(kWindows * slot);
  Status status = ring != nullptr ? Status::Ok() : Status(Code::kNoMemory, "no memory for the export's windows");
  if (status.ok()) {
    WindowFiller filler(tuning, source, checkpoint, header, tensors);
    WindowWriter writer(*executor, path, file_size);
    status = FillWindows(filler, writer, ring.get(), slot, window, header.size(), file_size);
  }
  if (!status.ok()) {
    // Closes the file unsynced, or aborts the upload, then removes what was written.
    executor->AbandonFiles(io::ParentDirectory(path));
    if (!io::IsObjectStorePath(path)) unlink(path.c_str());
  }
  return status;
}

}  // namespace ckpt::runtime
