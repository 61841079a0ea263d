#include "runtime/save/write_report.h"

#include "common/bytes.h"

namespace ckpt::runtime {
namespace {

constexpr uint32_t kMaxListCount = 1u << 30;

void EncodeStored(ByteWriter& out, const StoredBytes& s) {
  out.U32(s.file_index);
  out.U64(s.file_offset);
  out.U64(s.byte_length);
  out.U64(s.block_size);
  out.U64s(s.block_checksums);
  out.U8(s.codec);
  out.U8(s.byte_groups);
  out.U32s(s.stored_sizes.values());
}

Status DecodeStored(ByteReader& in, StoredBytes* s) {
  RETURN_IF_ERROR(in.U32(&s->file_index));
  RETURN_IF_ERROR(in.U64(&s->file_offset));
  RETURN_IF_ERROR(in.U64(&s->byte_length));
  RETURN_IF_ERROR(in.U64(&s->block_size));
  RETURN_IF_ERROR(in.U64s(&s->block_checksums, kMaxListCount));
  RETURN_IF_ERROR(in.U8(&s->codec));
  RETURN_IF_ERROR(in.U8(&s->byte_groups));
  std::vector<uint32_t> sizes;
  RETURN_IF_ERROR(in.U32s(&sizes, kMaxListCount));
  s->stored_sizes = StoredSizes(sizes);
  return Status::Ok();
}

void EncodeItem(ByteWriter& out, const WrittenItem& item) {
  out.U8(item.is_object ? 1 : 0);
  out.Bytes(item.key);
  out.U64s(item.box.offset);
  out.U64s(item.box.shape);
  out.U64s(item.index);
  EncodeStored(out, item.bytes);
}

Status DecodeItem(ByteReader& in, WrittenItem* item) {
  uint8_t is_object = 0;
  RETURN_IF_ERROR(in.U8(&is_object));
  item->is_object = is_object != 0;
  RETURN_IF_ERROR(in.Bytes(&item->key));
  RETURN_IF_ERROR(in.U64s(&item->box.offset, 8));
  RETURN_IF_ERROR(in.U64s(&item->box.shape, 8));
  RETURN_IF_ERROR(in.U64s(&item->index, 8));
  return DecodeStored(in, &item->bytes);
}

}  // namespace

std::string EncodeWriterReport(const WriterReport& report) {
  ByteWriter out;
  out.U32(static_cast<uint32_t>(report.files.size()));
  for (const DataFileRecord& file : report.files) {
    out.Bytes(file.name);
    out.U64(file.size);
  }
  out.U32(static_cast<uint32_t>(report.items.size()));
  for (const WrittenItem& item : report.items) EncodeItem(out, item);
  out.U32(static_cast<uint32_t>(report.stored_common.size()));
  for (const CommonRecord& c : report.stored_common) {
    out.Bytes(c.key);
    EncodeStored(out, c.stored);
  }
  out.U32(static_cast<uint32_t>(report.replicas.size()));
  for (const WrittenItem& item : report.replicas) EncodeItem(out, item);
  out.U32(static_cast<uint32_t>(report.digests.size()));
  for (const TensorDigests& d : report.digests) {
    out.Bytes(d.key);
    out.U64s(d.digests.box.offset);
    out.U64s(d.digests.box.shape);
    out.U64(d.digests.block_size);
    out.Bytes(d.digests.sha256);
  }
  out.U32(static_cast<uint32_t>(report.referenced_files.size()));
  for (const DataFileRecord& file : report.referenced_files) {
    out.Bytes(file.name);
    out.U64(file.size);
    out.Bytes(file.checkpoint);
  }
  out.U32(static_cast<uint32_t>(report.references.size()));
  for (const WrittenItem& item : report.references) EncodeItem(out, item);
  out.U32(static_cast<uint32_t>(report.split_items.size()));
  for (const WrittenItem& item : report.split_items) EncodeItem(out, item);
  return out.Take();
}

Result<WriterReport> DecodeWriterReport(std::string_view bytes, int from_rank) {
  ByteReader in(bytes, "write report from rank " + std::to_string(from_rank));
  WriterReport report;
  uint32_t count = 0;
  RETURN_IF_ERROR(in.Count(&count, kMaxListCount, 1));
  report.files.resize(count);
  for (DataFileRecord& file : report.files) {
    RETURN_IF_ERROR(in.Bytes(&file.name));
    RETURN_IF_ERROR(in.U64(&file.size));
  }
  RETURN_IF_ERROR(in.Count(&count, kMaxListCount, 1));
  report.items.resize(count);
  for (WrittenItem& item : report.items) RETURN_IF_ERROR(DecodeItem(in, &item));
  RETURN_IF_ERROR(in.Count(&count, kMaxListCount, 1));
  report.stored_common.resize(count);
  for (CommonRecord& c : report.stored_common) {
    c.is_inline = false;
    RETURN_IF_ERROR(in.Bytes(&c.key));
    RETURN_IF_ERROR(DecodeStored(in, &c.stored));
  }
  RETURN_IF_ERROR(in.Count(&count, kMaxListCount, 1));
  report.replicas.resize(count);
  for (WrittenItem& item : report.replicas) RETURN_IF_ERROR(DecodeItem(in, &item));
  RETURN_IF_ERROR(in.Count(&count, kMaxListCount, 1));
  report.digests.resize(count);
  for (TensorDigests& d : report.digests) {
    RETURN_IF_ERROR(in.Bytes(&d.key));
    RETURN_IF_ERROR(in.U64s(&d.digests.box.offset, 8));
    RETURN_IF_ERROR(in.U64s(&d.digests.box.shape, 8));
    RETURN_IF_ERROR(in.U64(&d.digests.block_size));
    RETURN_IF_ERROR(in.Bytes(&d.digests.sha256));
  }
  RETURN_IF_ERROR(in.Count(&count, kMaxListCount, 1));
  report.referenced_files.resize(count);
  for (DataFileRecord& file : report.referenced_files) {
    RETURN_IF_ERROR(in.Bytes(&file.name));
    RETURN_IF_ERROR(in.U64(&file.size));
    RETURN_IF_ERROR(in.Bytes(&file.checkpoint));
  }
  RETURN_IF_ERROR(in.Count(&count, kMaxListCount, 1));
  report.references.resize(count);
  for (WrittenItem& item : report.references) {
    RETURN_IF_ERROR(DecodeItem(in, &item));
    if (item.bytes.file_index >= report.referenced_files.size()) {
      return Corrupt("write report from rank " + std::to_string(from_rank) + ": a reference to file " +
                     std::to_string(item.bytes.file_index) + " of " + std::to_string(report.referenced_files.size()));
    }
  }
  RETURN_IF_ERROR(in.Count(&count, kMaxListCount, 1));
  report.split_items.resize(count);
  for (WrittenItem& item : report.split_items) RETURN_IF_ERROR(DecodeItem(in, &item));
  RETURN_IF_ERROR(in.ExpectDone());
  return report;
}

}  // namespace ckpt::runtime
