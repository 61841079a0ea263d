#include "runtime/load/chunk_reader.h"

#include <algorithm>
#include <cstring>

#include "common/key_text.h"
#include "io/checksum.h"
#include "runtime/core/dtype.h"
#include "runtime/load/stored_blocks.h"

namespace ckpt::runtime {
namespace {

// Blocks copied through a bounce buffer are read this many bytes at a time (rounded to whole blocks).
constexpr uint64_t kWindowBytes = 8ull << 20;

// Reads blocks [first_block, first_block + count) of `stored` into `out` and checks each one that has a checksum.
Status ReadBlocks(CheckpointFiles& files, const StoredBytes& stored, uint64_t first_block, uint64_t count, char* out,
                  const std::string& what) {
  ASSIGN_OR_RETURN(const io::File* file, files.Open(stored.file_index));
  const uint64_t begin = first_block * stored.block_size;
  const uint64_t end = std::min(stored.byte_length, (first_block + count) * stored.block_size);
  RETURN_IF_ERROR(ReadStoredBlocks(*file, stored, first_block, count, out, what));
  files.CountRead(end - begin);
  if (stored.block_checksums.empty()) return Status::Ok();  // safetensors carry no checksums to verify
  for (uint64_t b = 0; b < count; ++b) {
    const uint64_t block_begin = b * stored.block_size;
    const uint64_t block_len = std::min(stored.block_size, end - begin - block_begin);
    if (io::Checksum(out + block_begin, block_len) != stored.block_checksums[first_block + b]) {
      const bool compressed = IsCompressed(stored);
      const uint64_t at =
          compressed ? StoredBlockOffset(stored, first_block + b) : stored.file_offset + begin + block_begin;
      const uint64_t length = compressed ? stored.stored_sizes[first_block + b] : block_len;
      return Corrupt(what + ": checksum mismatch in file " + files.name(stored.file_index) + ", block " +
                     std::to_string(first_block + b) + " (file bytes " + std::to_string(at) + " to " +
                     std::to_string(at + length) + (compressed ? ", compressed)" : ")"));
    }
  }
  return Status::Ok();
}

// Serves byte ranges of one stored chunk in increasing order, reading whole verified blocks. Ranges that cover
// whole blocks are read straight into the destination; the rest go through a window of verified blocks.
class BlockCursor {
 public:
  BlockCursor(CheckpointFiles& files, const StoredBytes& stored, std::string what)
      : files_(files), stored_(stored), what_(std::move(what)) {}

  Status Copy(uint64_t offset, uint64_t length, char* dst) {
    const uint64_t bs = stored_.block_size;
    while (length > 0) {
      const bool aligned = offset % bs == 0;
      const uint64_t whole_blocks = (offset + length == stored_.byte_length) ? io::BlockCount(length, bs) : length / bs;
      if (aligned && whole_blocks > 0 && !InWindow(offset)) {
        RETURN_IF_ERROR(ReadBlocks(files_, stored_, offset / bs, whole_blocks, dst, what_));
        const uint64_t n = std::min(length, whole_blocks * bs);
        offset += n, dst += n, length -= n;
        continue;
      }
      if (!InWindow(offset)) RETURN_IF_ERROR(LoadWindow(offset / bs));
      const uint64_t n = std::min(length, window_end_ - offset);
      std::memcpy(dst, window_.data() + (offset - window_begin_), n);
      offset += n, dst += n, length -= n;
    }
    return Status::Ok();
  }

 private:
  bool InWindow(uint64_t offset) const { return offset >= window_begin_ && offset < window_end_; }

  Status LoadWindow(uint64_t first_block) {
    const uint64_t bs = stored_.block_size;
    const uint64_t blocks =
        std::min(std::max<uint64_t>(1, kWindowBytes / bs), io::BlockCount(stored_.byte_length, bs) - first_block);
    window_begin_ = first_block * bs;
    window_end_ = std::min(stored_.byte_length, window_begin_ + blocks * bs);
    window_.resize(window_end_ - window_begin_);
    Status s = ReadBlocks(files_, stored_, first_block, blocks, window_.data(), what_);
    if (!s.ok()) window_begin_ = window_end_ = 0;
    return s;
  }

  CheckpointFiles& files_;
  const StoredBytes& stored_;
  std::string what_;
  std::vector<char> window_;
  uint64_t window_begin_ = 0;
  uint64_t window_end_ = 0;
};

}  // namespace

CheckpointFiles::CheckpointFiles(std::string dir, const Manifest& manifest)
    : dir_(std::move(dir)), manifest_(manifest), files_(manifest.files.size()) {}

Result<const io::File*> CheckpointFiles::Open(uint32_t file_index) {
  if (file_index >= files_.size()) return Internal("file index " + std::to_string(file_index) + " out of range");
  if (!files_[file_index]) {
    const DataFileRecord& record = manifest_.files[file_index];
    const std::string path = DataFilePath(dir_, record);
    auto opened = io::File::OpenBeneath(DataFileRoot(dir_, record), DataFileBeneathRoot(record));
    if (!opened.ok()) {
      if (opened.status().code() != Code::kNotFound) return opened.status();
      if (record.checkpoint.empty()) return Corrupt("data file " + record.name + " is missing from " + dir_);
      return Corrupt("data file " + DescribeDataFile(record) + " is missing from " + DataFileRoot(dir_, record) +
                     ": the checkpoint " + Quoted(record.checkpoint) + " was deleted or moved, and " + dir_ +
                     " cannot be read without it");
    }
    ASSIGN_OR_RETURN(uint64_t size, opened->Size());
    if (size < record.size) {
      return Corrupt("data file " + path + " is truncated: " + std::to_string(size) + " bytes, the manifest records " +
                     std::to_string(record.size));
    }
    files_[file_index] = std::make_unique<io::File>(std::move(opened).value());
  }
  return files_[file_index].get();
}

Status ReadTensorRegion(CheckpointFiles& files, const TensorRecord& tensor, const Box& region, void* dst,
                        const Box& dst_box) {
  const size_t element_size = DTypeSize(tensor.dtype);
  char* out = static_cast<char*>(dst);
  for (const ChunkRecord& chunk : tensor.chunks) {
    std::optional<Box> common = Intersect(chunk.box, region);
    if (!common) continue;
    BlockCursor cursor(files, chunk.bytes, "tensor '" + tensor.key + "' chunk " + chunk.box.ToString());
    Status status;
    ForEachRun(chunk.box, dst_box, *common, element_size, [&](uint64_t src_off, uint64_t dst_off, uint64_t n) {
      if (status.ok()) status = cursor.Copy(src_off, n, out + dst_off);
    });
    RETURN_IF_ERROR(status);
  }
  return Status::Ok();
}

Result<std::string> ReadStoredBytes(CheckpointFiles& files, const StoredBytes& stored, const std::string& what) {
  // Opening checks the file's real size against the manifest, which bounds byte_length: nothing is allocated for
  // bytes a hostile manifest merely claims.
  RETURN_IF_ERROR(files.Open(stored.file_index).status().WithContext(what));
  std::string out(stored.byte_length, '\0');
  if (stored.byte_length > 0) {
    RETURN_IF_ERROR(
        ReadBlocks(files, stored, 0, io::BlockCount(stored.byte_length, stored.block_size), out.data(), what));
  }
  return out;
}

Status VerifyStoredBytes(CheckpointFiles& files, const StoredBytes& stored, const std::string& what) {
  RETURN_IF_ERROR(files.Open(stored.file_index).status().WithContext(what));  // as ReadStoredBytes: sizes first
  const uint64_t blocks = io::BlockCount(stored.byte_length, stored.block_size);
  const uint64_t per_read = std::max<uint64_t>(1, kWindowBytes / stored.block_size);
  std::vector<char> buffer;
  for (uint64_t b = 0; b < blocks; b += per_read) {
    const uint64_t count = std::min(per_read, blocks - b);
    buffer.resize(std::min(stored.byte_length - b * stored.block_size, count * stored.block_size));
    RETURN_IF_ERROR(ReadBlocks(files, stored, b, count, buffer.data(), what));
  }
  return Status::Ok();
}

}  // namespace ckpt::runtime
