// XLA FFI handlers that let a JAX program save and restore sharded arrays with ckpt.
//
// ckpt_save_array   argument: one shard of an array (the buffer of one device).
//                   attributes: path, key, global_shape and offset (row-major, as JAX sees the array), and
//                   shards_in_checkpoint: how many ckpt_save_array calls this process makes for `path`.
//                   result: an S32 scalar, 1 for the call that completed and saved the checkpoint, else 0.
// ckpt_load_array   result: the shard to fill, whose shape and dtype give the box to read.
//                   attributes: path, key, offset.
//
// XLA buffers are valid only during a call, so each save call copies its shard to host memory and stages it; the
// call that brings the last shard of a checkpoint saves them all with one collective ckpt_save, in a context created
// on first use from the launcher's environment (a single-rank job without one). A checkpoint therefore needs, in
// every process, exactly `shards_in_checkpoint` calls with distinct boxes (the main replica of each); a call that
// fails stages nothing. Loads go through ckpt's reader: each call reads its own box, with no collective, so any
// sharding can restore any save.
//
// The CPU handlers are always built; the CUDA handlers (copies through the computation's stream) where CUDA is.
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckpt.h"
#include "xla/ffi/api/ffi.h"

#ifdef CKPT_JAX_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ffi = xla::ffi;

namespace {

using Dims = ffi::Span<const int64_t>;

// ---------------------------------------------------------------------------------------------------------------
// ckpt calls
// ---------------------------------------------------------------------------------------------------------------

ffi::ErrorCode ToErrorCode(int32_t status) {
  switch (status) {
    case CKPT_E_INVALID_ARGUMENT:
    case CKPT_E_MISMATCH:
      return ffi::ErrorCode::kInvalidArgument;
    case CKPT_E_NOT_FOUND:
      return ffi::ErrorCode::kNotFound;
    case CKPT_E_ALREADY_EXISTS:
      return ffi::ErrorCode::kAlreadyExists;
    case CKPT_E_CORRUPT:
      return ffi::ErrorCode::kDataLoss;
    case CKPT_E_TIMEOUT:
      return ffi::ErrorCode::kDeadlineExceeded;
    case CKPT_E_NO_SPACE:
    case CKPT_E_NO_MEMORY:
      return ffi::ErrorCode::kResourceExhausted;
    case CKPT_E_VERSION:
    case CKPT_E_UNSUPPORTED:
      return ffi::ErrorCode::kUnimplemented;
    case CKPT_E_PEER_FAILED:
      return ffi::ErrorCode::kAborted;
    default:
      return ffi::ErrorCode::kInternal;
  }
}

// A ckpt error object for the span of one handler call (handlers run on XLA's threads: no shared error object).
class CallError {
 public:
  CallError() {
    if (ckpt_error_create(&err_) != CKPT_OK) err_ = nullptr;
  }
  ~CallError() { ckpt_error_free(err_); }
  CallError(const CallError&) = delete;
  CallError& operator=(const CallError&) = delete;

  ckpt_error_t* get() const { return err_; }

  // The XLA error for a failed ckpt call; `what` says what was being done.
  ffi::Error ToFfi(const std::string& what, int32_t status) const {
    const char* message = err_ != nullptr ? ckpt_error_message(err_) : "";
    if (message[0] == '\0') message = ckpt_status_string(status);
    return ffi::Error(ToErrorCode(status), what + ": " + message);
  }

 private:
  ckpt_error_t* err_ = nullptr;
};

using StatePtr = std::unique_ptr<ckpt_state_t, decltype(&ckpt_state_free)>;
using ReaderPtr = std::unique_ptr<ckpt_reader_t, decltype(&ckpt_reader_free)>;

// The ckpt dtype of an XLA element type, 0 for a type ckpt does not store.
int32_t CkptDtype(ffi::DataType type) {
  switch (type) {
    case ffi::DataType::PRED:
      return CKPT_DTYPE_BOOL;
    case ffi::DataType::U8:
      return CKPT_DTYPE_U8;
    case ffi::DataType::S8:
      return CKPT_DTYPE_I8;
    case ffi::DataType::S16:
      return CKPT_DTYPE_I16;
    case ffi::DataType::U16:
      return CKPT_DTYPE_U16;
    case ffi::DataType::S32:
      return CKPT_DTYPE_I32;
    case ffi::DataType::U32:
      return CKPT_DTYPE_U32;
    case ffi::DataType::S64:
      return CKPT_DTYPE_I64;
    case ffi::DataType::U64:
      return CKPT_DTYPE_U64;
    case ffi::DataType::F16:
      return CKPT_DTYPE_F16;
    case ffi::DataType::BF16:
      return CKPT_DTYPE_BF16;
    case ffi::DataType::F32:
      return CKPT_DTYPE_F32;
    case ffi::DataType::F64:
      return CKPT_DTYPE_F64;
    case ffi::DataType::C64:
      return CKPT_DTYPE_C64;
    case ffi::DataType::F8E4M3FN:
      return CKPT_DTYPE_F8_E4M3;
    case ffi::DataType::F8E5M2:
      return CKPT_DTYPE_F8_E5M2;
    default:
      return 0;
  }
}

// Non-negative extents or coordinates, as ckpt's uint64_t.
ffi::Error ToUnsigned(Dims values, std::string_view what, std::string_view key, std::vector<uint64_t>* out) {
  out->clear();
  for (int64_t v : values) {
    if (v < 0) return ffi::Error::InvalidArgument("'" + std::string(key) + "': " + std::string(what) + " is negative");
    out->push_back(static_cast<uint64_t>(v));
  }
  return ffi::Error::Success();
}

// One shard: its tensor, its box, and a host copy of its elements.
struct StagedShard {
  std::string key;
  int32_t dtype = 0;
  std::vector<uint64_t> global_shape;
  std::vector<uint64_t> local_shape;
  std::vector<uint64_t> offset;
  std::vector<uint8_t> bytes;
};

// Describes the shard held in `data` (everything but its bytes), checking the attributes against the buffer.
ffi::Error DescribeShard(std::string_view key, const ffi::AnyBuffer& data, Dims global_shape, Dims offset,
                         StagedShard* out) {
  const std::string name(key);
  if (name.empty()) return ffi::Error::InvalidArgument("ckpt_save_array: the key attribute is empty");
  out->key = name;
  out->dtype = CkptDtype(data.element_type());
  if (out->dtype == 0) return ffi::Error::InvalidArgument("'" + name + "': ckpt cannot store this element type");
  const size_t ndim = data.dimensions().size();
  if (ndim > CKPT_MAX_NDIM || global_shape.size() != ndim || offset.size() != ndim) {
    return ffi::Error::InvalidArgument("'" + name + "': the shard has " + std::to_string(ndim) +
                                       " dimensions, global_shape " + std::to_string(global_shape.size()) +
                                       " and offset " + std::to_string(offset.size()) + " (at most " +
                                       std::to_string(CKPT_MAX_NDIM) + ", all equal)");
  }
  if (ffi::Error e = ToUnsigned(data.dimensions(), "the shard's shape", key, &out->local_shape); e.failure()) return e;
  if (ffi::Error e = ToUnsigned(global_shape, "global_shape", key, &out->global_shape); e.failure()) return e;
  return ToUnsigned(offset, "offset", key, &out->offset);
}

// One collective ckpt_save of `shards` as the checkpoint `path`, waited for: on return it is complete and durable.
ffi::Error SaveCheckpoint(ckpt_context_t* ctx, const std::string& path, std::vector<StagedShard>& shards) {
  CallError err;
  ckpt_state_t* raw_state = nullptr;
  int32_t status = ckpt_state_create(&raw_state, err.get());
  if (status != CKPT_OK) return err.ToFfi("creating the state of " + path, status);
  StatePtr state(raw_state, ckpt_state_free);
  for (StagedShard& s : shards) {
    ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
    shard.key = s.key.c_str();
    shard.dtype = s.dtype;
    shard.ndim = static_cast<uint32_t>(s.local_shape.size());
    shard.global_shape = s.global_shape.data();
    shard.local_shape = s.local_shape.data();
    shard.global_offset = s.offset.data();
    shard.data = s.bytes.data();
    shard.data_size = s.bytes.size();
    status = ckpt_state_add_tensor(state.get(), &shard, err.get());
    if (status != CKPT_OK) return err.ToFfi("registering '" + s.key + "' for " + path, status);
  }
  ckpt_request_t* request = nullptr;
  status = ckpt_save(ctx, state.get(), path.c_str(), nullptr, &request, err.get());
  if (status != CKPT_OK) return err.ToFfi("saving " + path, status);
  status = ckpt_request_wait(request, 0, err.get());
  ckpt_request_free(request);
  if (status != CKPT_OK) return err.ToFfi("completing " + path, status);
  return ffi::Error::Success();
}

// ---------------------------------------------------------------------------------------------------------------
// Process-wide state: the context, and the shards staged per checkpoint until the last one arrives.
// ---------------------------------------------------------------------------------------------------------------

class SaveCoordinator {
 public:
  static SaveCoordinator& Instance() {
    static SaveCoordinator coordinator;
    return coordinator;
  }

  ~SaveCoordinator() { ckpt_context_free(context_); }

  // Stages `shard` for `path`. When it is the last of the `expected` shards, moves all of them to `complete`.
  ffi::Error Stage(const std::string& path, int64_t expected, StagedShard shard,
                   std::optional<std::vector<StagedShard>>* complete) {
    std::lock_guard<std::mutex> lock(pending_mutex_);
    Pending& pending = pending_[path];
    if (pending.shards.empty()) pending.expected = expected;
    if (pending.expected != expected) {
      return ffi::Error::InvalidArgument("'" + shard.key + "': shards_in_checkpoint is " + std::to_string(expected) +
                                         " but earlier calls for " + path + " said " +
                                         std::to_string(pending.expected));
    }
    pending.shards.push_back(std::move(shard));
    if (static_cast<int64_t>(pending.shards.size()) == expected) {
      *complete = std::move(pending.shards);
      pending_.erase(path);
    }
    return ffi::Error::Success();
  }

  // Saves a complete checkpoint. Saves are serialised: the context is one handle, usable by one thread at a time.
  ffi::Error Save(const std::string& path, std::vector<StagedShard>& shards) {
    std::lock_guard<std::mutex> lock(context_mutex_);
    if (context_ == nullptr) {
      CallError err;
      int32_t status = ckpt_context_create(nullptr, &context_, err.get());
      if (status != CKPT_OK) return err.ToFfi("creating the ckpt context", status);
    }
    return SaveCheckpoint(context_, path, shards);
  }

 private:
  struct Pending {
    int64_t expected = 0;
    std::vector<StagedShard> shards;
  };

  SaveCoordinator() = default;

  std::mutex pending_mutex_;
  std::map<std::string, Pending> pending_;
  std::mutex context_mutex_;
  ckpt_context_t* context_ = nullptr;
};

// ---------------------------------------------------------------------------------------------------------------
// Where buffers live: host memory (CPU handlers) or a CUDA device (copies on the computation's stream).
// ---------------------------------------------------------------------------------------------------------------

struct HostMemory {
  static constexpr bool kHostAccessible = true;

  ffi::Error ToHost(void* host, const void* buffer, size_t size) const {
    if (size > 0) std::memcpy(host, buffer, size);
    return ffi::Error::Success();
  }
  ffi::Error FromHost(void* buffer, const void* host, size_t size) const { return ToHost(buffer, host, size); }
};

#ifdef CKPT_JAX_WITH_CUDA
struct CudaMemory {
  static constexpr bool kHostAccessible = false;
  cudaStream_t stream;

  // Both copies are waited for: the host side is complete, or may be freed, as soon as they return.
  ffi::Error ToHost(void* host, const void* buffer, size_t size) const {
    return Finish(cudaMemcpyAsync(host, buffer, size, cudaMemcpyDeviceToHost, stream), "device to host");
  }
  ffi::Error FromHost(void* buffer, const void* host, size_t size) const {
    return Finish(cudaMemcpyAsync(buffer, host, size, cudaMemcpyHostToDevice, stream), "host to device");
  }

 private:
  ffi::Error Finish(cudaError_t copied, const char* direction) const {
    cudaError_t status = copied == cudaSuccess ? cudaStreamSynchronize(stream) : copied;
    if (status == cudaSuccess) return ffi::Error::Success();
    return ffi::Error::Internal(std::string("copy ") + direction + " failed: " + cudaGetErrorString(status));
  }
};
#endif

// ---------------------------------------------------------------------------------------------------------------
// The two calls, for any memory
// ---------------------------------------------------------------------------------------------------------------

template <typename Memory>
ffi::Error SaveArray(const Memory& memory, ffi::AnyBuffer data, ffi::Result<ffi::BufferR0<ffi::S32>> committed,
                     std::string_view path, std::string_view key, Dims global_shape, Dims offset,
                     int64_t shards_in_checkpoint) {
  if (path.empty()) return ffi::Error::InvalidArgument("ckpt_save_array: the path attribute is empty");
  if (shards_in_checkpoint < 1) {
    return ffi::Error::InvalidArgument("ckpt_save_array: shards_in_checkpoint must be at least 1, not " +
                                       std::to_string(shards_in_checkpoint));
  }
  StagedShard shard;
  if (ffi::Error e = DescribeShard(key, data, global_shape, offset, &shard); e.failure()) return e;
  shard.bytes.resize(data.size_bytes());
  if (ffi::Error e = memory.ToHost(shard.bytes.data(), data.untyped_data(), shard.bytes.size()); e.failure()) {
    return e;
  }
  const std::string checkpoint(path);
  SaveCoordinator& coordinator = SaveCoordinator::Instance();
  std::optional<std::vector<StagedShard>> complete;
  if (ffi::Error e = coordinator.Stage(checkpoint, shards_in_checkpoint, std::move(shard), &complete); e.failure()) {
    return e;
  }
  int32_t saved_here = 0;
  if (complete.has_value()) {
    if (ffi::Error e = coordinator.Save(checkpoint, *complete); e.failure()) return e;
    saved_here = 1;
  }
  return memory.FromHost(committed->untyped_data(), &saved_here, sizeof(saved_here));
}

// Checks that the checkpoint has a tensor `key` of the dtype and rank the caller expects.
ffi::Error FindTensor(ckpt_reader_t* reader, const std::string& path, const std::string& key, int32_t dtype,
                      size_t ndim) {
  CallError err;
  ckpt_checkpoint_info info = CKPT_CHECKPOINT_INFO_INIT;
  int32_t status = ckpt_reader_info(reader, &info, err.get());
  if (status != CKPT_OK) return err.ToFfi("reading " + path, status);
  for (uint64_t index = 0; index < info.tensor_count; ++index) {
    ckpt_tensor_info tensor = CKPT_TENSOR_INFO_INIT;
    status = ckpt_reader_tensor(reader, index, &tensor, err.get());
    if (status != CKPT_OK) return err.ToFfi("listing the tensors of " + path, status);
    if (key != tensor.key) continue;
    if (tensor.dtype != dtype || tensor.ndim != ndim) {
      return ffi::Error::InvalidArgument("'" + key + "' in " + path + " is " + ckpt_dtype_name(tensor.dtype) +
                                         " with " + std::to_string(tensor.ndim) + " dimensions; the result is " +
                                         ckpt_dtype_name(dtype) + " with " + std::to_string(ndim));
    }
    return ffi::Error::Success();
  }
  return ffi::Error(ffi::ErrorCode::kNotFound, "'" + key + "' is not a tensor of " + path);
}

template <typename Memory>
ffi::Error LoadArray([[maybe_unused]] const Memory& memory, ffi::Result<ffi::AnyBuffer> result, std::string_view path,
                     std::string_view key, Dims offset) {
  ffi::AnyBuffer& box = *result;
  const std::string checkpoint(path);
  const std::string name(key);
  const int32_t dtype = CkptDtype(box.element_type());
  if (dtype == 0) return ffi::Error::InvalidArgument("'" + name + "': ckpt cannot store the result's element type");
  const size_t ndim = box.dimensions().size();
  if (offset.size() != ndim) {
    return ffi::Error::InvalidArgument("'" + name + "': offset has " + std::to_string(offset.size()) +
                                       " entries, the result " + std::to_string(ndim) + " dimensions");
  }
  std::vector<uint64_t> start, shape;
  if (ffi::Error e = ToUnsigned(offset, "offset", key, &start); e.failure()) return e;
  if (ffi::Error e = ToUnsigned(box.dimensions(), "the result's shape", key, &shape); e.failure()) return e;

  CallError err;
  ckpt_reader_t* raw_reader = nullptr;
  int32_t status = ckpt_reader_open(checkpoint.c_str(), &raw_reader, err.get());
  if (status != CKPT_OK) return err.ToFfi("opening " + checkpoint, status);
  ReaderPtr reader(raw_reader, ckpt_reader_free);
  if (ffi::Error e = FindTensor(reader.get(), checkpoint, name, dtype, ndim); e.failure()) return e;

  const size_t size = box.size_bytes();
  std::vector<uint8_t> staging;
  void* target = box.untyped_data();
  if constexpr (!Memory::kHostAccessible) {
    staging.resize(size);
    target = staging.data();
  }
  status = ckpt_reader_read(reader.get(), name.c_str(), static_cast<uint32_t>(ndim), start.data(), shape.data(), target,
                            size, err.get());
  if (status != CKPT_OK) return err.ToFfi("reading '" + name + "' from " + checkpoint, status);
  if constexpr (!Memory::kHostAccessible) return memory.FromHost(box.untyped_data(), staging.data(), size);
  return ffi::Error::Success();
}

ffi::Error SaveArrayOnHost(ffi::AnyBuffer data, ffi::Result<ffi::BufferR0<ffi::S32>> committed, std::string_view path,
                           std::string_view key, Dims global_shape, Dims offset, int64_t shards_in_checkpoint) {
  return SaveArray(HostMemory{}, data, committed, path, key, global_shape, offset, shards_in_checkpoint);
}

ffi::Error LoadArrayOnHost(ffi::Result<ffi::AnyBuffer> result, std::string_view path, std::string_view key,
                           Dims offset) {
  return LoadArray(HostMemory{}, result, path, key, offset);
}

#ifdef CKPT_JAX_WITH_CUDA
ffi::Error SaveArrayOnCuda(cudaStream_t stream, ffi::AnyBuffer data, ffi::Result<ffi::BufferR0<ffi::S32>> committed,
                           std::string_view path, std::string_view key, Dims global_shape, Dims offset,
                           int64_t shards_in_checkpoint) {
  return SaveArray(CudaMemory{stream}, data, committed, path, key, global_shape, offset, shards_in_checkpoint);
}

ffi::Error LoadArrayOnCuda(cudaStream_t stream, ffi::Result<ffi::AnyBuffer> result, std::string_view path,
                           std::string_view key, Dims offset) {
  return LoadArray(CudaMemory{stream}, result, path, key, offset);
}
#endif

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// Exported handlers (register them with jax.ffi.register_ffi_target; see save_restore.py)
// ---------------------------------------------------------------------------------------------------------------

XLA_FFI_DEFINE_HANDLER_SYMBOL(ckpt_jax_save_array_cpu, SaveArrayOnHost,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::BufferR0<ffi::S32>>()
                                  .Attr<std::string_view>("path")
                                  .Attr<std::string_view>("key")
                                  .Attr<Dims>("global_shape")
                                  .Attr<Dims>("offset")
                                  .Attr<int64_t>("shards_in_checkpoint"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    ckpt_jax_load_array_cpu, LoadArrayOnHost,
    ffi::Ffi::Bind().Ret<ffi::AnyBuffer>().Attr<std::string_view>("path").Attr<std::string_view>("key").Attr<Dims>(
        "offset"));

#ifdef CKPT_JAX_WITH_CUDA
XLA_FFI_DEFINE_HANDLER_SYMBOL(ckpt_jax_save_array_cuda, SaveArrayOnCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::AnyBuffer>()
                                  .Ret<ffi::BufferR0<ffi::S32>>()
                                  .Attr<std::string_view>("path")
                                  .Attr<std::string_view>("key")
                                  .Attr<Dims>("global_shape")
                                  .Attr<Dims>("offset")
                                  .Attr<int64_t>("shards_in_checkpoint"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(ckpt_jax_load_array_cuda, LoadArrayOnCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Ret<ffi::AnyBuffer>()
                                  .Attr<std::string_view>("path")
                                  .Attr<std::string_view>("key")
                                  .Attr<Dims>("offset"));
#endif
