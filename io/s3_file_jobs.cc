// The S3 executor and the router in front of the local one. Like the local executor, one job at a time: a worker
// runs its jobs in order, and a data file's jobs all go to the same worker, so its upload's state lives here from
// the file's create job to its finish job.
#include "io/s3_file_jobs.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "io/block_checksums.h"
#include "io/s3/s3_client.h"
#include "io/s3_upload.h"

namespace ckpt::io {
namespace {

// A read's ranges: large enough that a request's overhead is small, small enough that a segment of some tens of MiB
// is fetched over many connections at once.
constexpr uint64_t kMinRangeBytes = 4ull << 20;
constexpr uint64_t kMaxRangeBytes = 16ull << 20;
constexpr uint64_t kRangeGranule = 1ull << 20;

// Uploads copy from any address, and only the segments' own bytes.
constexpr SourceRules kObjectSourceRules{1, false};

uint64_t RoundUp(uint64_t value, uint64_t granule) { return (value + granule - 1) / granule * granule; }

// Whether `url` names something below `directory` (not the directory itself, nor a sibling sharing its prefix).
bool IsUnder(const std::string& url, const std::string& directory) {
  if (directory.empty()) return false;
  const size_t length = directory.back() == '/' ? directory.size() - 1 : directory.size();
  return url.size() > length + 1 && url.compare(0, length, directory, 0, length) == 0 && url[length] == '/';
}

// Where each segment's bytes are: at its arena offset in `memory`.
std::vector<const char*> SegmentStarts(const char* memory, const std::vector<FileSegment>& segments) {
  std::vector<const char*> starts;
  starts.reserve(segments.size());
  for (const FileSegment& s : segments) starts.push_back(memory + s.arena_offset);
  return starts;
}

// kInvalidArgument unless every segment lies within `size` bytes of memory: a job is bad input until checked.
Status CheckSegmentsFit(const std::vector<FileSegment>& segments, uint64_t size) {
  for (size_t i = 0; i < segments.size(); ++i) {
    const FileSegment& s = segments[i];
    if (s.arena_offset > size || s.length > size - s.arena_offset) {
      return InvalidArgument("segment " + std::to_string(i) + " (memory offset " + std::to_string(s.arena_offset) +
                             ", length " + std::to_string(s.length) + ") reaches past its memory of " +
                             std::to_string(size) + " bytes");
    }
  }
  return Status::Ok();
}

Status CheckSources(const WriteJob& job, const std::vector<const char*>& sources) {
  if (sources.size() != job.segments.size()) {
    return InvalidArgument("the job has " + std::to_string(job.segments.size()) + " segments but " +
                           std::to_string(sources.size()) + " sources");
  }
  for (size_t i = 0; i < sources.size(); ++i) {
    if (sources[i] == nullptr) return InvalidArgument("segment " + std::to_string(i) + " has no memory");
  }
  return Status::Ok();
}

Status CheckBeneathRoot(const ReadJob& job) {
  if (IsUnder(job.path, job.root)) return Status::Ok();
  return InvalidArgument("read job for " + Quoted(job.path) + " is not beneath its root " + Quoted(job.root));
}

// The job's segments cut into ranges, sized so that the job's bytes spread over the client's connections.
std::vector<s3::RangeRead> PlanRanges(const ReadJob& job, const std::string& key, char* memory, uint32_t connections) {
  uint64_t total = 0;
  for (const FileSegment& s : job.segments) total += s.length;
  const uint64_t share = RoundUp(total / std::max<uint32_t>(connections, 1) + 1, kRangeGranule);
  const uint64_t range_bytes = std::clamp(share, kMinRangeBytes, kMaxRangeBytes);
  std::vector<s3::RangeRead> reads;
  for (const FileSegment& s : job.segments) {
    for (uint64_t done = 0; done < s.length; done += range_bytes) {
      reads.push_back(s3::RangeRead{key, s.file_offset + done, std::min(range_bytes, s.length - done),
                                    memory + s.arena_offset + done});
    }
  }
  return reads;
}

class S3Executor final : public FileJobExecutor {
 public:
  S3Executor(s3::Client& client, char* arena, uint64_t arena_size)
      : client_(client), arena_(arena), arena_size_(arena_size) {}
  // Uploads still open belong to saves that never finished: aborted, so that their parts do not cost storage.
  ~S3Executor() override {
    for (auto& [url, upload] : uploads_) upload->Abort();
  }

  Result<WriteResult> Write(const WriteJob& job) override {
    Status valid = RequireArena();
    if (valid.ok()) valid = CheckSegmentsFit(job.segments, arena_size_);
    if (!valid.ok()) return Fail(job.path, valid);
    return WriteObject(job, SegmentStarts(arena_, job.segments));
  }

  Result<WriteResult> WriteFrom(const WriteJob& job, const std::vector<const char*>& sources) override {
    const Status valid = CheckSources(job, sources);
    if (!valid.ok()) return Fail(job.path, valid);
    return WriteObject(job, sources);
  }

  Result<SourceRules> PrepareWrite(const WriteJob& job) override {
    const Result<ObjectUpload*> upload = UploadFor(job);
    if (!upload.ok()) return Fail(job.path, upload.status());
    return kObjectSourceRules;
  }

  Status Read(const ReadJob& job, ReadFailure* failure) override {
    const Status valid = RequireArena();
    if (!valid.ok()) return valid.WithContext("read job for " + Quoted(job.path));
    return ReadObject(job, arena_, arena_size_, failure);
  }

  Status ReadInto(const ReadJob& job, char* memory, uint64_t size, ReadFailure* failure) override {
    if (memory == nullptr) return InvalidArgument("read job for " + Quoted(job.path) + " has no memory to read into");
    return ReadObject(job, memory, size, failure);
  }

  size_t AbandonFiles(const std::string& directory) override {
    size_t abandoned = 0;
    for (auto it = uploads_.begin(); it != uploads_.end();) {
      if (!IsUnder(it->first, directory)) {
        ++it;
        continue;
      }
      it->second->Abort();
      it = uploads_.erase(it);
      ++abandoned;
    }
    return abandoned;
  }

  std::string backend_name() const override { return "s3"; }

 private:
  Status RequireArena() const {
    if (arena_ != nullptr) return Status::Ok();
    return InvalidArgument("this executor reads into caller memory only");
  }

  Result<WriteResult> WriteObject(const WriteJob& job, const std::vector<const char*>& starts) {
    Result<WriteResult> result = StreamJob(job, starts);
    if (!result.ok()) return Fail(job.path, result.status());
    return result;
  }

  // Checksums first, from the very bytes the parts are then sent from.
  Result<WriteResult> StreamJob(const WriteJob& job, const std::vector<const char*>& starts) {
    if (job.compute_checksums && job.block_size == 0) return InvalidArgument("checksum block size is 0");
    ASSIGN_OR_RETURN(ObjectUpload* const upload, UploadFor(job));
    if (job.final_size != upload->final_size()) {
      return InvalidArgument("the job says the object has " + std::to_string(job.final_size) +
                             " bytes, its create job said " + std::to_string(upload->final_size()));
    }
    WriteResult result;
    if (job.compute_checksums) result = SegmentChecksums(job.segments, starts, job.block_size);
    RETURN_IF_ERROR(upload->Write(job.segments, starts, job.finish));
    if (job.finish) uploads_.erase(job.path);
    return result;
  }

  // A create job starts the object's upload; a later job continues it.
  Result<ObjectUpload*> UploadFor(const WriteJob& job) {
    const auto it = uploads_.find(job.path);
    if (job.create) {
      if (it != uploads_.end()) return InvalidArgument("a create job came for an object being written already");
      ASSIGN_OR_RETURN(std::unique_ptr<ObjectUpload> upload, ObjectUpload::Start(client_, job.path, job.final_size));
      return uploads_.emplace(job.path, std::move(upload)).first->second.get();
    }
    if (it == uploads_.end()) {
      return InvalidArgument(
          "no upload of the object is in progress (its create job failed, or its save was "
          "abandoned): an object cannot be written to after it was begun elsewhere");
    }
    return it->second.get();
  }

  // A failed job's object is given up: its upload aborted and its state dropped.
  Status Fail(const std::string& url, const Status& status) {
    const auto it = uploads_.find(url);
    if (it != uploads_.end()) {
      it->second->Abort();
      uploads_.erase(it);
    }
    return status.WithContext("cannot write " + Quoted(url));
  }

  Status ReadObject(const ReadJob& job, char* memory, uint64_t size, ReadFailure* failure);
  Status ExplainFailedRead(const ReadJob& job, const s3::Location& object, const Status& failed);

  s3::Client& client_;
  char* arena_;
  uint64_t arena_size_;
  std::map<std::string, std::unique_ptr<ObjectUpload>> uploads_;  // by URL, from create job to finish job
};

Status S3Executor::ReadObject(const ReadJob& job, char* memory, uint64_t size, ReadFailure* failure) {
  RETURN_IF_ERROR(CheckBeneathRoot(job));
  RETURN_IF_ERROR(ValidateExpectedChecksums(job));
  RETURN_IF_ERROR(CheckSegmentsFit(job.segments, size).WithContext("read job for " + Quoted(job.path)));
  ASSIGN_OR_RETURN(const s3::Location object, s3::ParseUrl(job.path));
  std::vector<s3::RangeRead> reads = PlanRanges(job, object.prefix, memory, client_.settings().connections);
  const Status fetched = client_.GetRanges(object.bucket, reads);
  if (!fetched.ok()) return ExplainFailedRead(job, object, fetched);
  return VerifyBlocks(job, memory, failure);
}

// A range that the object does not hold fails as the server answers it (a short body, or 416 for one starting past
// the end); what the caller must hear is that the object is shorter than the checkpoint says, so a HEAD decides.
Status S3Executor::ExplainFailedRead(const ReadJob& job, const s3::Location& object, const Status& failed) {
  const Status context = failed.WithContext("cannot read " + Quoted(job.path));
  if (failed.code() == Code::kNotFound) return context;
  const Result<s3::ObjectInfo> info = client_.Head(object.bucket, object.prefix);
  if (!info.ok()) return context;
  for (size_t i = 0; i < job.segments.size(); ++i) {
    const FileSegment& s = job.segments[i];
    if (s.length == 0 || s.file_offset + s.length <= info->size) continue;
    return Corrupt(Quoted(job.path) + " is truncated: segment " + std::to_string(i) + " needs bytes [" +
                   std::to_string(s.file_offset) + ", " + std::to_string(s.file_offset + s.length) +
                   ") but the object has " + std::to_string(info->size) + " bytes");
  }
  return context;
}

class ObjectStoreRouter final : public FileJobExecutor {
 public:
  ObjectStoreRouter(std::unique_ptr<FileJobExecutor> local, char* arena, uint64_t arena_size)
      : local_(std::move(local)), arena_(arena), arena_size_(arena_size) {}

  Result<WriteResult> Write(const WriteJob& job) override {
    ASSIGN_OR_RETURN(FileJobExecutor* const executor, ExecutorFor(job.path));
    return executor->Write(job);
  }
  Result<WriteResult> WriteFrom(const WriteJob& job, const std::vector<const char*>& sources) override {
    ASSIGN_OR_RETURN(FileJobExecutor* const executor, ExecutorFor(job.path));
    return executor->WriteFrom(job, sources);
  }
  Result<SourceRules> PrepareWrite(const WriteJob& job) override {
    ASSIGN_OR_RETURN(FileJobExecutor* const executor, ExecutorFor(job.path));
    return executor->PrepareWrite(job);
  }
  Status Read(const ReadJob& job, ReadFailure* failure) override {
    ASSIGN_OR_RETURN(FileJobExecutor* const executor, ExecutorFor(job.path));
    return executor->Read(job, failure);
  }
  Status ReadInto(const ReadJob& job, char* memory, uint64_t size, ReadFailure* failure) override {
    ASSIGN_OR_RETURN(FileJobExecutor* const executor, ExecutorFor(job.path));
    return executor->ReadInto(job, memory, size, failure);
  }
  size_t AbandonFiles(const std::string& directory) override {
    return local_->AbandonFiles(directory) + (object_store_ ? object_store_->AbandonFiles(directory) : 0);
  }
  std::string backend_name() const override { return last_was_s3_ ? "s3" : local_->backend_name(); }

 private:
  // The S3 executor is made on the first S3 job, so that a checkpoint on files never resolves S3 settings.
  Result<FileJobExecutor*> ExecutorFor(const std::string& path) {
    last_was_s3_ = s3::IsS3Url(path);
    if (!last_was_s3_) return local_.get();
    if (!object_store_) {
      const Result<s3::Client*> client = s3::SharedClient();
      if (!client.ok()) return client.status().WithContext("I/O job for " + Quoted(path));
      object_store_ = std::make_unique<S3Executor>(*client.value(), arena_, arena_size_);
    }
    return object_store_.get();
  }

  std::unique_ptr<FileJobExecutor> local_;
  std::unique_ptr<FileJobExecutor> object_store_;
  char* arena_;
  uint64_t arena_size_;
  bool last_was_s3_ = false;
};

}  // namespace

std::unique_ptr<FileJobExecutor> RouteObjectStoreJobs(std::unique_ptr<FileJobExecutor> local, char* arena,
                                                      uint64_t arena_size) {
  return std::make_unique<ObjectStoreRouter>(std::move(local), arena, arena_size);
}

}  // namespace ckpt::io
