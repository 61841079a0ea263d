#include "runtime/load/stored_blocks.h"

#include <algorithm>
#include <vector>

#include "io/block_codec.h"

namespace ckpt::runtime {

Status ReadStoredBlocks(const io::File& file, const StoredBytes& stored, uint64_t first_block, uint64_t count,
                        char* out, const std::string& what) {
  const uint64_t begin = first_block * stored.block_size;
  const uint64_t end = std::min(stored.byte_length, (first_block + count) * stored.block_size);
  if (!IsCompressed(stored)) return file.ReadAt(out, end - begin, stored.file_offset + begin).WithContext(what);
  // Each thread decodes with its own context and reads the stored forms into its own buffer.
  thread_local io::BlockDecompressor decompressor;
  thread_local std::vector<char> buffer;
  const uint64_t at = StoredBlockOffset(stored, first_block);
  const uint64_t length = StoredBlockOffset(stored, first_block + count) - at;
  buffer.resize(length);
  RETURN_IF_ERROR(file.ReadAt(buffer.data(), length, at).WithContext(what));
  uint64_t consumed = 0;
  for (uint64_t b = first_block; b < first_block + count; ++b) {
    const uint64_t offset = b * stored.block_size;
    const uint64_t size = std::min(stored.block_size, stored.byte_length - offset);
    RETURN_IF_ERROR(decompressor.Decompress(buffer.data() + consumed, stored.stored_sizes[b], stored.byte_groups,
                                            out + (offset - begin), size, what + ": block " + std::to_string(b)));
    consumed += stored.stored_sizes[b];
  }
  return Status::Ok();
}

}  // namespace ckpt::runtime
