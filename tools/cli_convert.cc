// `ckpt export` and `ckpt import`: between ckpt checkpoints and safetensors (tools/cli_verbs.h).
#include <fcntl.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>

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
  std::printf("exported %s to %s in %.2f s\n", options.dir.c_str(), options.out.c_str(), seconds);
  return kExitOk;
}

namespace {

// A file of the import's source, mapped read-only for the save to stage from: the page cache holds the bytes, not
// a copy of the whole model.
class MappedFile {
 public:
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (base_ != MAP_FAILED && size_ > 0) munmap(base_, size_);
  }

  // Maps `path` (a regular file, not reached through a link), or says why it cannot.
  static std::unique_ptr<MappedFile> Map(const std::string& path, std::string* why) {
    const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      *why = "cannot open " + path + ": " + std::strerror(errno);
      return nullptr;
    }
    struct stat st;
    std::unique_ptr<MappedFile> file(new MappedFile());
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      *why = path + " is not a regular file";
    } else if (st.st_size > 0) {
      file->size_ = static_cast<size_t>(st.st_size);
      file->base_ = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (file->base_ == MAP_FAILED) *why = "cannot map " + path + ": " + std::strerror(errno);
    }
    close(fd);
    return why->empty() ? std::move(file) : nullptr;
  }

  // The `length` bytes at `offset`, or nothing if the file is shorter.
  void* At(uint64_t offset, uint64_t length) const {
    if (offset > size_ || length > size_ - offset) return nullptr;
    return length == 0 ? nullptr : static_cast<char*>(base_) + offset;
  }

 private:
  MappedFile() = default;
  void* base_ = MAP_FAILED;
  size_t size_ = 0;
};

std::string SourceDirectory(const std::string& source) {
  struct stat st;
  if (stat(source.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return source;
  const size_t slash = source.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : source.substr(0, slash);
}

struct ContextFree {
  void operator()(ckpt_context_t* ctx) const { ckpt_context_free(ctx); }
};
struct StateFree {
  void operator()(ckpt_state_t* state) const { ckpt_state_free(state); }
};
struct RequestFree {
  void operator()(ckpt_request_t* request) const { ckpt_request_free(request); }
};

}  // namespace

int Import(const ImportOptions& options) {
  const std::string& source = options.source;
  const std::string& dir = options.dir;
  auto checkpoint = Open(source);
  if (!checkpoint) return kExitFailed;
  ckpt_reader_t* reader = checkpoint->reader.get();
  ckpt_error_t* err = checkpoint->err.get();
  ckpt_checkpoint_info info = CKPT_CHECKPOINT_INFO_INIT;
  if (const int32_t status = ckpt_reader_info(reader, &info, err); status != CKPT_OK) {
    return Report("reading " + source, status, err);
  }
  if (info.object_count != 0) {
    std::fprintf(stderr, "ckpt: import copies tensors, common entries and metadata; %s also holds %llu objects\n",
                 source.c_str(), static_cast<unsigned long long>(info.object_count));
    return kExitFailed;
  }
  ckpt_context_options context_options = CKPT_CONTEXT_OPTIONS_INIT;
  context_options.rank = 0;
  context_options.world_size = 1;
  context_options.io_workers = 0;  // I/O threads: this tool may be installed without the worker executable
  // The tool shows every line the library logs, the save's INFO line with its size and speed included.
  context_options.log = [](void*, int32_t, const char* message) { std::fprintf(stderr, "ckpt: %s\n", message); };
  ckpt_context_t* raw_ctx = nullptr;
  if (const int32_t status = ckpt_context_create(&context_options, &raw_ctx, err); status != CKPT_OK) {
    return Report("creating a context", status, err);
  }
  const std::unique_ptr<ckpt_context_t, ContextFree> ctx(raw_ctx);
  ckpt_state_t* raw_state = nullptr;
  if (const int32_t status = ckpt_state_create(&raw_state, err); status != CKPT_OK) {
    return Report("creating a state", status, err);
  }
  const std::unique_ptr<ckpt_state_t, StateFree> state(raw_state);

  // Every stored chunk becomes a shard whose data is the mapped source: the save checksums what it copies.
  const std::string root = SourceDirectory(source);
  std::map<std::string, std::unique_ptr<MappedFile>> files;
  for (uint64_t t = 0; t < info.tensor_count; ++t) {
    ckpt_tensor_info tensor = CKPT_TENSOR_INFO_INIT;
    if (const int32_t status = ckpt_reader_tensor(reader, t, &tensor, err); status != CKPT_OK) {
      return Report("reading " + source, status, err);
    }
    for (uint64_t c = 0; c < tensor.chunk_count; ++c) {
      ckpt_chunk_info chunk = CKPT_CHUNK_INFO_INIT;
      if (const int32_t status = ckpt_reader_chunk(reader, t, c, &chunk, err); status != CKPT_OK) {
        return Report("reading " + source, status, err);
      }
      std::unique_ptr<MappedFile>& file = files[chunk.file];
      if (!file) {
        std::string why;
        file = MappedFile::Map(root + "/" + chunk.file, &why);
        if (!file) {
          std::fprintf(stderr, "ckpt: %s\n", why.c_str());
          return kExitFailed;
        }
      }
      void* data = file->At(chunk.file_offset, chunk.byte_length);
      if (data == nullptr && chunk.byte_length != 0) {
        std::fprintf(stderr, "ckpt: %s is shorter than tensor '%s' needs\n", chunk.file, tensor.key);
        return kExitFailed;
      }
      ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
      shard.key = tensor.key;
      shard.dtype = tensor.dtype;
      shard.ndim = tensor.ndim;
      shard.global_shape = tensor.shape;
      shard.local_shape = chunk.shape;
      shard.global_offset = chunk.offset;
      shard.data = data;
      shard.data_size = chunk.byte_length;
      if (const int32_t status = ckpt_state_add_tensor(state.get(), &shard, err); status != CKPT_OK) {
        return Report(std::string("adding tensor '") + tensor.key + "'", status, err);
      }
    }
  }
  for (uint64_t i = 0; i < info.common_count; ++i) {
    const char* key = nullptr;
    const void* data = nullptr;
    uint64_t size = 0;
    int32_t status = ckpt_reader_common_at(reader, i, &key, &data, &size, err);
    if (status == CKPT_OK) status = ckpt_state_add_common(state.get(), key, data, size, err);
    if (status != CKPT_OK) return Report("copying the common entries of " + source, status, err);
  }
  std::vector<const char*> keys, values;
  for (uint64_t i = 0; i < info.metadata_count; ++i) {
    const char* key = nullptr;
    const char* value = nullptr;
    if (const int32_t status = ckpt_reader_metadata_at(reader, i, &key, &value, err); status != CKPT_OK) {
      return Report("reading the metadata of " + source, status, err);
    }
    keys.push_back(key);
    values.push_back(value);
  }
  ckpt_save_options save_options = CKPT_SAVE_OPTIONS_INIT;
  save_options.metadata_count = static_cast<uint32_t>(keys.size());
  save_options.metadata_keys = keys.data();
  save_options.metadata_values = values.data();

  const auto started = std::chrono::steady_clock::now();
  ckpt_request_t* raw_request = nullptr;
  if (const int32_t status = ckpt_save(ctx.get(), state.get(), dir.c_str(), &save_options, &raw_request, err);
      status != CKPT_OK) {
    return Report("saving " + dir, status, err);
  }
  const std::unique_ptr<ckpt_request_t, RequestFree> request(raw_request);
  if (const int32_t status = ckpt_request_wait(request.get(), 0, err); status != CKPT_OK) {
    return Report("saving " + dir, status, err);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("imported %s into %s: %llu tensors in %.2f s\n", source.c_str(), dir.c_str(),
              static_cast<unsigned long long>(info.tensor_count), seconds);
  return kExitOk;
}

}  // namespace ckpt_cli
