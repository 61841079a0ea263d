#include "io/s3_upload.h"

#include <algorithm>
#include <utility>

namespace ckpt::io {
namespace {

// S3's limits on multipart uploads.
constexpr uint64_t kMaxParts = 10000;
constexpr uint64_t kMinPartBytes = 5ull << 20;
constexpr uint64_t kMaxPartBytes = 5ull << 30;
// A part size raised for a large object is a whole number of MiB, for readable request logs.
constexpr uint64_t kPartGranule = 1ull << 20;
// Parts assembled here are sent once this many bytes of them wait, bounding the memory a job of many small
// segments holds; parts uploaded straight from their sources cost no memory and wait for the end of the job, so
// that they go out together, in parallel.
constexpr uint64_t kMaxAssembledBytes = 128ull << 20;

uint64_t RoundUp(uint64_t value, uint64_t granule) { return (value + granule - 1) / granule * granule; }

Result<uint64_t> PartBytesFor(const std::string& url, uint64_t final_size, uint64_t configured) {
  const uint64_t needed = RoundUp((final_size + kMaxParts - 1) / kMaxParts, kPartGranule);
  const uint64_t part_bytes = std::max({configured, needed, kMinPartBytes});
  if (part_bytes > kMaxPartBytes) {
    return InvalidArgument(Quoted(url) + " would have " + std::to_string(final_size) +
                           " bytes, more than S3 stores in one object (10,000 parts of 5 GiB)");
  }
  return part_bytes;
}

}  // namespace

Result<std::unique_ptr<ObjectUpload>> ObjectUpload::Start(s3::Client& client, const std::string& url,
                                                          uint64_t final_size) {
  ASSIGN_OR_RETURN(s3::Location location, s3::ParseUrl(url));
  if (location.prefix.empty()) return InvalidArgument(Quoted(url) + " names a bucket, not an object");
  ASSIGN_OR_RETURN(const uint64_t part_bytes, PartBytesFor(url, final_size, client.settings().part_bytes));
  return std::unique_ptr<ObjectUpload>(
      new ObjectUpload(client, std::move(location.bucket), std::move(location.prefix), final_size, part_bytes));
}

ObjectUpload::ObjectUpload(s3::Client& client, std::string bucket, std::string key, uint64_t final_size,
                           uint64_t part_bytes)
    : client_(client),
      bucket_(std::move(bucket)),
      key_(std::move(key)),
      final_size_(final_size),
      part_bytes_(part_bytes),
      single_put_(final_size <= part_bytes) {}

Status ObjectUpload::Write(const std::vector<FileSegment>& segments, const std::vector<const char*>& sources,
                           bool finish) {
  RETURN_IF_ERROR(CheckOrder(segments));
  for (size_t i = 0; i < segments.size(); ++i) {
    RETURN_IF_ERROR(AppendZeros(segments[i].file_offset - position_));
    RETURN_IF_ERROR(AppendBytes(sources[i], segments[i].length, finish));
  }
  if (!finish) return SendBatch();
  RETURN_IF_ERROR(AppendZeros(final_size_ - position_));
  return Complete();
}

Status ObjectUpload::CheckOrder(const std::vector<FileSegment>& segments) const {
  uint64_t end = position_;
  for (size_t i = 0; i < segments.size(); ++i) {
    const FileSegment& s = segments[i];
    const std::string segment = "segment " + std::to_string(i) + " (file offset " + std::to_string(s.file_offset) +
                                ", length " + std::to_string(s.length) + ")";
    if (s.file_offset < end) {
      return InvalidArgument(segment + " starts before byte " + std::to_string(end) +
                             ", which the object's bytes have reached: an object is written in file order");
    }
    if (s.file_offset > final_size_ || s.length > final_size_ - s.file_offset) {
      return InvalidArgument(segment + " reaches past the object's final size of " + std::to_string(final_size_));
    }
    end = s.file_offset + s.length;
  }
  return Status::Ok();
}

Status ObjectUpload::AppendBytes(const char* data, uint64_t length, bool finishing) {
  while (length > 0) {
    uint64_t taken = 0;
    const bool reaches_end = finishing && position_ + length == final_size_;
    if (single_put_ && reaches_end && position_ == 0) {
      whole_body_ = std::string_view(data, length);  // the object is this one buffer: PUT it from there
      taken = length;
    } else if (!single_put_ && tail_.empty() && (length >= part_bytes_ || reaches_end)) {
      taken = std::min(length, part_bytes_);  // a whole part inside the buffer, or the object's last part
      RETURN_IF_ERROR(AddPart(data, taken));
    } else {
      taken = std::min(length, part_bytes_ - tail_.size());
      ReserveTail();
      tail_.insert(tail_.end(), data, data + taken);
    }
    position_ += taken;
    data += taken;
    length -= taken;
    RETURN_IF_ERROR(TakeTailIfFull());
  }
  return Status::Ok();
}

Status ObjectUpload::AppendZeros(uint64_t length) {
  while (length > 0) {
    uint64_t taken = 0;
    if (!single_put_ && tail_.empty() && length >= part_bytes_) {
      taken = part_bytes_;
      RETURN_IF_ERROR(AddAssembledPart(std::vector<char>(part_bytes_)));
    } else {
      taken = std::min(length, part_bytes_ - tail_.size());
      ReserveTail();
      tail_.resize(tail_.size() + taken);  // value-initialised: zeros
    }
    position_ += taken;
    length -= taken;
    RETURN_IF_ERROR(TakeTailIfFull());
  }
  return Status::Ok();
}

// A tail holds at most a part (or the whole object, if smaller): room for that at once spares copies as it grows.
void ObjectUpload::ReserveTail() {
  if (tail_.capacity() == 0) tail_.reserve(std::min(part_bytes_, final_size_));
}

// A tail grown to a whole part becomes that part. A single PUT's tail is the whole object, and waits for the end.
Status ObjectUpload::TakeTailIfFull() {
  if (single_put_ || tail_.size() < part_bytes_) return Status::Ok();
  return AddAssembledPart(std::exchange(tail_, {}));
}

Status ObjectUpload::AddPart(const char* data, uint64_t length) {
  s3::PartUpload part;
  part.part_number = static_cast<uint32_t>(sent_.size() + batch_.size() + 1);
  part.data = data;
  part.length = length;
  batch_.push_back(std::move(part));
  return assembled_bytes_ >= kMaxAssembledBytes ? SendBatch() : Status::Ok();
}

// Moving `part` into assembled_ keeps its bytes where they are, so the part's pointer stays valid until it is sent.
Status ObjectUpload::AddAssembledPart(std::vector<char> part) {
  assembled_bytes_ += part.size();
  assembled_.push_back(std::move(part));
  return AddPart(assembled_.back().data(), assembled_.back().size());
}

Status ObjectUpload::SendBatch() {
  if (batch_.empty()) return Status::Ok();
  if (upload_id_.empty()) {
    ASSIGN_OR_RETURN(upload_id_, client_.CreateMultipartUpload(bucket_, key_));
  }
  RETURN_IF_ERROR(client_.UploadParts(bucket_, key_, upload_id_, batch_));
  for (s3::PartUpload& part : batch_) {
    part.data = nullptr;  // its memory is the job's, or freed below
    sent_.push_back(std::move(part));
  }
  batch_.clear();
  assembled_.clear();
  assembled_bytes_ = 0;
  return Status::Ok();
}

Status ObjectUpload::Complete() {
  if (single_put_) {
    const bool from_source = whole_body_.data() != nullptr;
    return client_.Put(bucket_, key_, from_source ? whole_body_ : std::string_view(tail_.data(), tail_.size()))
        .status();
  }
  if (!tail_.empty()) RETURN_IF_ERROR(AddAssembledPart(std::exchange(tail_, {})));
  RETURN_IF_ERROR(SendBatch());
  return client_.CompleteMultipartUpload(bucket_, key_, upload_id_, sent_).status();
}

void ObjectUpload::Abort() {
  if (!upload_id_.empty()) (void)client_.AbortMultipartUpload(bucket_, key_, upload_id_);
  upload_id_.clear();
}

}  // namespace ckpt::io
