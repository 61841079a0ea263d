// `ckpt export` and `ckpt import`: between ckpt checkpoints and safetensors (tools/cli_verbs.h).
#include <strings.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "common/os_error.h"
#include "tools/cli_common.h"
#include "tools/cli_verbs.h"

namespace ckpt_cli {

std::optional<uint64_t> ParseSize(const std::string& text) {
  uint64_t number = 0;
  const char* end = text.data() + text.size();
  const auto [rest, error] = std::from_chars(text.data(), end, number);
  if (error != std::errc() || rest == text.data()) return std::nullopt;
  const std::string unit(rest, end);
  static const std::pair<const char*, uint64_t> kUnits[] = {{"", 1},
                                                            {"B", 1},
                                                            {"KB", 1000},
                                                            {"MB", 1000000},
                                                            {"GB", 1000000000},
                                                            {"TB", 1000000000000},
                                                            {"KiB", 1ull << 10},
                                                            {"MiB", 1ull << 20},
                                                            {"GiB", 1ull << 30},
                                                            {"TiB", 1ull << 40}};
  for (const auto& [name, scale] : kUnits) {
    uint64_t bytes = 0;
    if (unit == name && !__builtin_mul_overflow(number, scale, &bytes)) return bytes;
  }
  return std::nullopt;
}

std::optional<int32_t> ParseDtype(const std::string& name) {
  for (int32_t code = 1; ckpt_dtype_size(code) != 0; ++code) {
    if (strcasecmp(name.c_str(), ckpt_dtype_name(code)) == 0) return code;
  }
  return std::nullopt;
}

int Export(const ExportOptions& options) {
  ckpt_export_options opts = CKPT_EXPORT_OPTIONS_INIT;
  if (options.max_shard_bytes) opts.max_shard_bytes = *options.max_shard_bytes;
  opts.dtype = options.dtype;
  opts.part_index = options.part_index;
  opts.part_count = options.part_count;
  std::vector<const char*> key_pointers;
  for (const std::string& key : options.keys) key_pointers.push_back(key.c_str());
  opts.keys = key_pointers.empty() ? nullptr : key_pointers.data();
  opts.key_count = key_pointers.size();
  ckpt_error_t* err = nullptr;
  if (const int32_t status = ckpt_error_create(&err); status != CKPT_OK)
    return Report("creating an error", status, nullptr);
  const ErrorPtr owned(err);
  const auto started = std::chrono::steady_clock::now();
  if (const int32_t status = ckpt_export(options.dir.c_str(), options.out.c_str(), &opts, err); status != CKPT_OK) {
    return Report("exporting " + options.dir + " to " + options.out, status, err);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("exported %s to %s in %.2f s\n", Escaped(options.dir).c_str(), Escaped(options.out).c_str(), seconds);
  return kExitOk;
}

namespace {

// The bytes of one stored chunk, read through the reader for the save to stage from. Anonymous memory that the
// kernel commits page by page as the read fills it: a size the source's index claims costs only address space
// until the bytes arrive, so a claim larger than the file fails in the read, not by exhausting memory.
class ChunkBuffer {
 public:
  ChunkBuffer(const ChunkBuffer&) = delete;
  ChunkBuffer& operator=(const ChunkBuffer&) = delete;
  ~ChunkBuffer() {
    if (data_ != MAP_FAILED) munmap(data_, size_);
  }

  // A buffer of `size` bytes (at least one page is mapped, so that an empty chunk has an address too), or nothing
  // with errno set.
  static std::unique_ptr<ChunkBuffer> Allocate(uint64_t size) {
    std::unique_ptr<ChunkBuffer> buffer(new ChunkBuffer());
    buffer->size_ = std::max<uint64_t>(size, 1);
    buffer->data_ =
        mmap(nullptr, buffer->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return buffer->data_ == MAP_FAILED ? nullptr : std::move(buffer);
  }

  void* data() const { return data_; }

 private:
  ChunkBuffer() = default;
  void* data_ = MAP_FAILED;
  size_t size_ = 0;
};

struct ContextFree {
  void operator()(ckpt_context_t* ctx) const { ckpt_context_free(ctx); }
};
struct StateFree {
  void operator()(ckpt_state_t* state) const { ckpt_state_free(state); }
};
struct RequestFree {
  void operator()(ckpt_request_t* request) const { ckpt_request_free(request); }
};
using StatePtr = std::unique_ptr<ckpt_state_t, StateFree>;

// What the import saves: the source's tensors, read and verified, its common entries and its metadata.
struct Imported {
  StatePtr state;
  std::vector<std::unique_ptr<ChunkBuffer>> buffers;  // the tensors' bytes, read by the save until it returns
  std::vector<const char*> metadata_keys;             // owned by the source's reader
  std::vector<const char*> metadata_values;
};

// Reads one stored chunk of `tensor` as the loader would (files opened beneath the source without following links,
// never a FIFO, every block's checksum checked) and registers it as a shard of the same box.
int ImportChunk(Checkpoint& source, const ckpt_tensor_info& tensor, const ckpt_chunk_info& chunk, Imported* out) {
  const std::string box = FormatBox(tensor.ndim, chunk.offset, chunk.shape);
  const std::string what = "reading tensor '" + std::string(tensor.key) + "' " + box + " of " + source.dir;
  std::unique_ptr<ChunkBuffer> buffer = ChunkBuffer::Allocate(chunk.byte_length);
  if (!buffer) {
    std::fprintf(stderr, "ckpt: %s: cannot allocate %s (import holds every tensor in memory): %s\n",
                 Escaped(what).c_str(), FormatBytes(chunk.byte_length).c_str(), ckpt::OsErrorText(errno).c_str());
    return kExitFailed;
  }
  if (const int32_t status = ckpt_reader_read(source.reader.get(), tensor.key, tensor.ndim, chunk.offset, chunk.shape,
                                              buffer->data(), chunk.byte_length, source.err.get());
      status != CKPT_OK) {
    return Report(what, status, source.err.get());
  }
  ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
  shard.key = tensor.key;
  shard.dtype = tensor.dtype;
  shard.ndim = tensor.ndim;
  shard.global_shape = tensor.shape;
  shard.local_shape = chunk.shape;
  shard.global_offset = chunk.offset;
  shard.data = buffer->data();
  shard.data_size = chunk.byte_length;
  if (const int32_t status = ckpt_state_add_tensor(out->state.get(), &shard, source.err.get()); status != CKPT_OK) {
    return Report("adding tensor '" + std::string(tensor.key) + "' " + box, status, source.err.get());
  }
  out->buffers.push_back(std::move(buffer));
  return kExitOk;
}

// Every tensor, chunk by chunk: the saved checkpoint keeps the source's layout.
int ImportTensors(Checkpoint& source, const ckpt_checkpoint_info& info, Imported* out) {
  for (uint64_t t = 0; t < info.tensor_count; ++t) {
    ckpt_tensor_info tensor = CKPT_TENSOR_INFO_INIT;
    if (const int32_t status = ckpt_reader_tensor(source.reader.get(), t, &tensor, source.err.get());
        status != CKPT_OK) {
      return Report("reading " + source.dir, status, source.err.get());
    }
    for (uint64_t c = 0; c < tensor.chunk_count; ++c) {
      ckpt_chunk_info chunk = CKPT_CHUNK_INFO_INIT;
      if (const int32_t status = ckpt_reader_chunk(source.reader.get(), t, c, &chunk, source.err.get());
          status != CKPT_OK) {
        return Report("reading " + source.dir, status, source.err.get());
      }
      if (const int code = ImportChunk(source, tensor, chunk, out); code != kExitOk) return code;
    }
  }
  return kExitOk;
}

int ImportCommonAndMetadata(Checkpoint& source, const ckpt_checkpoint_info& info, Imported* out) {
  ckpt_reader_t* reader = source.reader.get();
  ckpt_error_t* err = source.err.get();
  for (uint64_t i = 0; i < info.common_count; ++i) {
    const char* key = nullptr;
    const void* data = nullptr;
    uint64_t size = 0;
    int32_t status = ckpt_reader_common_at(reader, i, &key, &data, &size, err);
    if (status == CKPT_OK) status = ckpt_state_add_common(out->state.get(), key, data, size, err);
    if (status != CKPT_OK) return Report("copying the common entries of " + source.dir, status, err);
  }
  for (uint64_t i = 0; i < info.metadata_count; ++i) {
    const char* key = nullptr;
    const char* value = nullptr;
    if (const int32_t status = ckpt_reader_metadata_at(reader, i, &key, &value, err); status != CKPT_OK) {
      return Report("reading the metadata of " + source.dir, status, err);
    }
    out->metadata_keys.push_back(key);
    out->metadata_values.push_back(value);
  }
  return kExitOk;
}

// Saves what was imported as the checkpoint `dir` on one rank; `err` is the source's error object.
int SaveImported(Imported& imported, const std::string& dir, bool compress, ckpt_error_t* err) {
  ckpt_context_options context_options = CKPT_CONTEXT_OPTIONS_INIT;
  context_options.rank = 0;
  context_options.world_size = 1;
  context_options.io_workers = 0;  // I/O threads: this tool may be installed without the worker executable
  // The tool shows every line the library logs, the save's INFO line with its size and speed included.
  context_options.log = [](void*, int32_t, const char* message) {
    std::fprintf(stderr, "ckpt: %s\n", ControlsEscaped(message).c_str());
  };
  ckpt_context_t* raw_ctx = nullptr;
  if (const int32_t status = ckpt_context_create(&context_options, &raw_ctx, err); status != CKPT_OK) {
    return Report("creating a context", status, err);
  }
  const std::unique_ptr<ckpt_context_t, ContextFree> ctx(raw_ctx);
  ckpt_save_options save_options = CKPT_SAVE_OPTIONS_INIT;
  save_options.metadata_count = static_cast<uint32_t>(imported.metadata_keys.size());
  save_options.metadata_keys = imported.metadata_keys.data();
  save_options.metadata_values = imported.metadata_values.data();
  if (compress) save_options.flags |= CKPT_SAVE_COMPRESS;
  ckpt_request_t* raw_request = nullptr;
  if (const int32_t status = ckpt_save(ctx.get(), imported.state.get(), dir.c_str(), &save_options, &raw_request, err);
      status != CKPT_OK) {
    return Report("saving " + dir, status, err);
  }
  const std::unique_ptr<ckpt_request_t, RequestFree> request(raw_request);
  if (const int32_t status = ckpt_request_wait(request.get(), 0, err); status != CKPT_OK) {
    return Report("saving " + dir, status, err);
  }
  return kExitOk;
}

}  // namespace

int Import(const ImportOptions& options) {
  auto source = Open(options.source);
  if (!source) return kExitFailed;
  Failure failure;
  const auto info = Info(*source, &failure);
  if (!info) return Report(failure);
  if (info->object_count != 0) {
    std::fprintf(stderr, "ckpt: import copies tensors, common entries and metadata; %s also holds %llu objects\n",
                 Escaped(options.source).c_str(), static_cast<unsigned long long>(info->object_count));
    return kExitFailed;
  }
  const auto started = std::chrono::steady_clock::now();
  Imported imported;
  ckpt_state_t* raw_state = nullptr;
  if (const int32_t status = ckpt_state_create(&raw_state, source->err.get()); status != CKPT_OK) {
    return Report("creating a state", status, source->err.get());
  }
  imported.state.reset(raw_state);
  // Everything is read and checked before the save starts: damaged bytes never become a checkpoint.
  if (const int code = ImportTensors(*source, *info, &imported); code != kExitOk) return code;
  if (const int code = ImportCommonAndMetadata(*source, *info, &imported); code != kExitOk) return code;
  if (const int code = SaveImported(imported, options.dir, options.compress, source->err.get()); code != kExitOk) {
    return code;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("imported %s into %s: %llu tensors in %.2f s\n", Escaped(options.source).c_str(),
              Escaped(options.dir).c_str(), static_cast<unsigned long long>(info->tensor_count), seconds);
  return kExitOk;
}

}  // namespace ckpt_cli
