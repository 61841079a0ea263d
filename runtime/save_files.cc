#include "runtime/save_files.h"

#include "common/bytes.h"
#include "io/checksum.h"

namespace ckpt::runtime {
namespace {

constexpr uint64_t kChunkAlignment = 4096;
constexpr uint32_t kMaxListCount = 1u << 30;

uint64_t AlignUp(uint64_t value, uint64_t alignment) { return (value + alignment - 1) / alignment * alignment; }

void EncodeStored(ByteWriter& out, const StoredBytes& s) {
  out.U64(s.file_offset);
  out.U64(s.byte_length);
  out.U64(s.block_size);
  out.U64s(s.block_checksums);
}

Status DecodeStored(ByteReader& in, StoredBytes* s) {
  RETURN_IF_ERROR(in.U64(&s->file_offset));
  RETURN_IF_ERROR(in.U64(&s->byte_length));
  RETURN_IF_ERROR(in.U64(&s->block_size));
  return in.U64s(&s->block_checksums, kMaxListCount);
}

}  // namespace

DataFileWriter::DataFileWriter(std::string dir, std::string relative_name, uint64_t block_size)
    : dir_(std::move(dir)), relative_name_(std::move(relative_name)), block_size_(block_size) {}

Result<StoredBytes> DataFileWriter::Append(const void* data, uint64_t size) {
  if (!created()) {
    ASSIGN_OR_RETURN(file_, io::File::CreateNew(io::JoinPath(dir_, relative_name_)));
  }
  StoredBytes stored;
  stored.file_offset = AlignUp(end_, kChunkAlignment);
  stored.byte_length = size;
  stored.block_size = block_size_;
  stored.block_checksums = io::BlockChecksums(data, size, block_size_);
  RETURN_IF_ERROR(file_.WriteAt(data, size, stored.file_offset));
  end_ = stored.file_offset + size;
  return stored;
}

Result<StoredBytes> DataFileWriter::AppendRegion(const void* src, const Box& src_box, const Box& region,
                                                 size_t element_size) {
  const char* base = static_cast<const char*>(src);
  uint64_t runs = 0;
  uint64_t first_offset = 0;
  ForEachRun(src_box, region, region, element_size, [&](uint64_t src_off, uint64_t, uint64_t) {
    if (runs++ == 0) first_offset = src_off;
  });
  const uint64_t bytes = region.volume() * element_size;
  if (runs <= 1) return Append(base + first_offset, bytes);
  gather_.resize(bytes);
  CopyRegion(src, src_box, gather_.data(), region, region, element_size);
  return Append(gather_.data(), bytes);
}

Result<uint64_t> DataFileWriter::Finish() {
  if (!created()) return uint64_t{0};
  RETURN_IF_ERROR(file_.Sync());
  RETURN_IF_ERROR(file_.Close());
  return end_;
}

std::string EncodeWriterReport(const WriterReport& report) {
  ByteWriter out;
  out.Bytes(report.file_name);
  out.U64(report.file_size);
  out.U32(static_cast<uint32_t>(report.items.size()));
  for (const WrittenItem& item : report.items) {
    out.U8(item.is_object ? 1 : 0);
    out.Bytes(item.key);
    out.U64s(item.box.offset);
    out.U64s(item.box.shape);
    out.U64s(item.index);
    EncodeStored(out, item.bytes);
  }
  out.U32(static_cast<uint32_t>(report.stored_common.size()));
  for (const CommonRecord& c : report.stored_common) {
    out.Bytes(c.key);
    EncodeStored(out, c.stored);
  }
  return out.Take();
}

Result<WriterReport> DecodeWriterReport(std::string_view bytes, int from_rank) {
  ByteReader in(bytes, "write report from rank " + std::to_string(from_rank));
  WriterReport report;
  RETURN_IF_ERROR(in.Bytes(&report.file_name));
  RETURN_IF_ERROR(in.U64(&report.file_size));
  uint32_t count = 0;
  RETURN_IF_ERROR(in.Count(&count, kMaxListCount, 1));
  report.items.resize(count);
  for (WrittenItem& item : report.items) {
    uint8_t is_object = 0;
    RETURN_IF_ERROR(in.U8(&is_object));
    item.is_object = is_object != 0;
    RETURN_IF_ERROR(in.Bytes(&item.key));
    RETURN_IF_ERROR(in.U64s(&item.box.offset, 8));
    RETURN_IF_ERROR(in.U64s(&item.box.shape, 8));
    RETURN_IF_ERROR(in.U64s(&item.index, 8));
    RETURN_IF_ERROR(DecodeStored(in, &item.bytes));
  }
  RETURN_IF_ERROR(in.Count(&count, kMaxListCount, 1));
  report.stored_common.resize(count);
  for (CommonRecord& c : report.stored_common) {
    c.is_inline = false;
    RETURN_IF_ERROR(in.Bytes(&c.key));
    RETURN_IF_ERROR(DecodeStored(in, &c.stored));
  }
  RETURN_IF_ERROR(in.ExpectDone());
  return report;
}

}  // namespace ckpt::runtime
