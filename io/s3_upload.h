// One S3 object written by a data file's write jobs: the file's bytes arrive in order, job after job, and leave as
// the parts of a multipart upload, cut at fixed multiples of the part size. A part that lies inside one source
// buffer is uploaded straight from it; only parts that straddle buffers or gaps are assembled in memory of the
// upload's own, and what is left of a job short of a whole part waits there for the next job. An object that fits in
// one part is sent with a single PUT instead.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "io/file_jobs.h"
#include "io/s3/s3_client.h"

namespace ckpt::io {

class ObjectUpload {
 public:
  // Nothing is sent yet. `final_size`: the object's size, which sets the part size: the client's part_bytes, raised
  // so that the object takes at most 10,000 parts. kInvalidArgument for a URL without a key, or an object larger
  // than S3 can hold.
  static Result<std::unique_ptr<ObjectUpload>> Start(s3::Client& client, const std::string& url, uint64_t final_size);
  ObjectUpload(const ObjectUpload&) = delete;
  ObjectUpload& operator=(const ObjectUpload&) = delete;

  // Streams one job: zeros up to each segment's file offset, then its bytes from sources[i]; with `finish`, zeros up
  // to the final size and the object completed. Returns once every part it sent is stored, so the sources may be
  // reused then. kInvalidArgument for a segment before the bytes already sent or past the final size.
  Status Write(const std::vector<FileSegment>& segments, const std::vector<const char*>& sources, bool finish);
  // Aborts the multipart upload, if one was begun; best effort (an upload left behind only costs storage until the
  // bucket's lifecycle rule removes it).
  void Abort();

  uint64_t final_size() const { return final_size_; }
  uint64_t part_bytes() const { return part_bytes_; }

 private:
  ObjectUpload(s3::Client& client, std::string bucket, std::string key, uint64_t final_size, uint64_t part_bytes);
  Status CheckOrder(const std::vector<FileSegment>& segments) const;
  Status AppendBytes(const char* data, uint64_t length, bool finishing);
  Status AppendZeros(uint64_t length);
  void ReserveTail();
  Status TakeTailIfFull();
  Status AddPart(const char* data, uint64_t length);
  Status AddAssembledPart(std::vector<char> part);
  Status SendBatch();
  Status Complete();

  s3::Client& client_;
  std::string bucket_;
  std::string key_;
  uint64_t final_size_;
  uint64_t part_bytes_;
  bool single_put_;         // the object fits in one part: one PUT at the end
  uint64_t position_ = 0;   // bytes of the object streamed so far
  std::vector<char> tail_;  // the bytes after the last whole part: position_ % part_bytes_ of them (all, single PUT)
  std::string_view whole_body_;       // single PUT: the object, where one source holds it all
  std::string upload_id_;             // empty until the first part goes
  std::vector<s3::PartUpload> sent_;  // with their ETags, for the completion
  // The parts of the job in progress not yet sent, and the memory of those assembled here.
  std::vector<s3::PartUpload> batch_;
  std::vector<std::vector<char>> assembled_;
  uint64_t assembled_bytes_ = 0;
};

}  // namespace ckpt::io
