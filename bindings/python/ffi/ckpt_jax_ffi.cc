// The XLA FFI custom call behind ckpt.jax.JitSaver: a save issued from inside jax.jit.
//
// JitSaver wraps the call in shard_map, so XLA runs it once per device, with that device's block of every leaf.
// Each call copies its blocks to host memory (XLA buffers live only for the call); the process's last call for a
// checkpoint path issues the collective ckpt_save of everything the process's devices brought and returns once it is
// staged. The checkpoint is then written and committed in the background; ckpt_jax_ffi_wait reports the outcome.
//
// Operands:   path       u8[N]: the checkpoint directory, NUL-terminated (a runtime value: no recompilation per step)
//             placement  s32[leaves, 1 + 8]: per leaf, this device's replica index and the global offset of its block
//             leaves...  this device's block of each leaf
// Result:     s32[1], 0
// Attributes: saver (the id ckpt_jax_ffi_open returned), keys ("\n"-joined), layout ([leaves, ndim, global
//             shape..., ndim, global shape..., ...]), calls (this process's devices in the mesh), pytree (the
//             structure recorded as a common entry).
//
// Errors found before the collective (a malformed path or layout) are the same on every process, which all fail
// alike without entering it; errors of the save itself are agreed by ckpt_save on every rank.
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "ckpt.h"
#include "xla/ffi/api/ffi.h"

#ifdef CKPT_JAX_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ffi = xla::ffi;

namespace {

constexpr int64_t kPlacementColumns = 1 + CKPT_MAX_NDIM;
constexpr char kPytreeKey[] = ".ckpt/pytree";

// The ckpt dtype of an XLA element type, 0 for one ckpt does not store.
int32_t CkptDtype(ffi::DataType type) {
  using T = ffi::DataType;
  static const std::map<T, int32_t> kDtypes = {
      {T::PRED, CKPT_DTYPE_BOOL},
      {T::U8, CKPT_DTYPE_U8},
      {T::S8, CKPT_DTYPE_I8},
      {T::S16, CKPT_DTYPE_I16},
      {T::U16, CKPT_DTYPE_U16},
      {T::S32, CKPT_DTYPE_I32},
      {T::U32, CKPT_DTYPE_U32},
      {T::S64, CKPT_DTYPE_I64},
      {T::U64, CKPT_DTYPE_U64},
      {T::F16, CKPT_DTYPE_F16},
      {T::BF16, CKPT_DTYPE_BF16},
      {T::F32, CKPT_DTYPE_F32},
      {T::F64, CKPT_DTYPE_F64},
      {T::C64, CKPT_DTYPE_C64},
      {T::C128, CKPT_DTYPE_C128},
      {T::F8E4M3FN, CKPT_DTYPE_F8_E4M3},
      {T::F8E5M2, CKPT_DTYPE_F8_E5M2},
      {T::F8E4M3FNUZ, CKPT_DTYPE_F8_E4M3FNUZ},
      {T::F8E5M2FNUZ, CKPT_DTYPE_F8_E5M2FNUZ},
      {T::F8E4M3B11FNUZ, CKPT_DTYPE_F8_E4M3B11FNUZ},
      {T::F8E3M4, CKPT_DTYPE_F8_E3M4},
      {T::F8E4M3, CKPT_DTYPE_F8_E4M3_IEEE},
      {T::F8E8M0FNU, CKPT_DTYPE_F8_E8M0},
      {T::F4E2M1FN, CKPT_DTYPE_F4_E2M1},
      {T::S4, CKPT_DTYPE_I4},
      {T::U4, CKPT_DTYPE_U4},
      {T::S2, CKPT_DTYPE_I2},
      {T::U2, CKPT_DTYPE_U2},
  };
  auto it = kDtypes.find(type);
  return it == kDtypes.end() ? 0 : it->second;
}

// Bits per element of the sub-byte types, which XLA packs low bits first; 8 for the others (a byte or more).
int BitsPerElement(ffi::DataType type) {
  using T = ffi::DataType;
  if (type == T::S4 || type == T::U4 || type == T::F4E2M1FN) return 4;
  if (type == T::S2 || type == T::U2) return 2;
  return 8;
}

// Spreads `count` packed sub-byte elements to one per byte, each in the low bits, as numpy and ckpt hold them.
std::vector<uint8_t> Unpack(const std::vector<uint8_t>& packed, size_t count, int bits) {
  std::vector<uint8_t> out(count);
  const int per_byte = 8 / bits;
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  for (size_t i = 0; i < count; ++i) {
    out[i] = static_cast<uint8_t>(packed[i / per_byte] >> ((i % per_byte) * bits)) & mask;
  }
  return out;
}

// A ckpt error object for one call (handlers run on XLA's threads).
class CallError {
 public:
  CallError() {
    if (ckpt_error_create(&err_) != CKPT_OK) err_ = nullptr;
  }
  ~CallError() { ckpt_error_free(err_); }
  CallError(const CallError&) = delete;
  CallError& operator=(const CallError&) = delete;

  ckpt_error_t* get() const { return err_; }

  // The XLA error for a failed ckpt call with this status; `what` says what was being done.
  ffi::Error ToFfi(const std::string& what, int32_t status) const {
    const char* message = err_ != nullptr ? ckpt_error_message(err_) : "";
    return ffi::Error(ToErrorCode(status), what + ": " + (message[0] != '\0' ? message : ckpt_status_string(status)));
  }

 private:
  static ffi::ErrorCode ToErrorCode(int32_t status) {
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

  ckpt_error_t* err_ = nullptr;
};

// An error found before any ckpt call: the operands or attributes are wrong.
ffi::Error Failed(const std::string& what) { return ffi::Error(ffi::ErrorCode::kInvalidArgument, what); }

// One block of one leaf, copied to host memory.
struct StagedBlock {
  std::string key;
  int32_t dtype = 0;
  int32_t replica = 0;
  std::vector<uint64_t> global_shape;
  std::vector<uint64_t> offset;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;
  int bits = 8;         // per element in `bytes` until unpacked
  size_t elements = 0;  // in the block
};

// What the calls of one process have brought for one checkpoint path.
struct PendingSave {
  int64_t calls_arrived = 0;
  std::string pytree;
  std::string first_error;
  // Blocks by (key, offset): a box held by several local devices is kept once, from its lowest replica.
  std::map<std::pair<std::string, std::vector<uint64_t>>, StagedBlock> blocks;
};

// Everything one JitSaver (one ckpt context) has in flight.
class Saver {
 public:
  Saver(ckpt_context_t* ctx, int32_t tier) : ctx_(ctx), tier_(tier) {}

  // Adds one call's blocks; returns the whole pending save when this is the process's last call for `path`.
  std::unique_ptr<PendingSave> Arrive(const std::string& path, int64_t calls, std::string pytree,
                                      std::vector<StagedBlock> blocks, const std::string& error) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::unique_ptr<PendingSave>& pending = pending_[path];
    if (!pending) pending = std::make_unique<PendingSave>();
    if (pending->first_error.empty()) pending->first_error = error;
    pending->pytree = std::move(pytree);
    for (StagedBlock& block : blocks) {
      auto at = std::make_pair(block.key, block.offset);
      auto found = pending->blocks.find(at);
      if (found == pending->blocks.end() || block.replica < found->second.replica) {
        pending->blocks[at] = std::move(block);
      }
    }
    if (++pending->calls_arrived < calls) return nullptr;
    std::unique_ptr<PendingSave> complete = std::move(pending);
    pending_.erase(path);
    return complete;
  }

  // Whether a block of (key, offset) with a replica at most `replica` is already staged: its copy can be skipped.
  bool AlreadyStaged(const std::string& path, const std::string& key, const std::vector<uint64_t>& offset,
                     int32_t replica) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto pending = pending_.find(path);
    if (pending == pending_.end() || !pending->second) return false;
    auto found = pending->second->blocks.find(std::make_pair(key, offset));
    return found != pending->second->blocks.end() && found->second.replica <= replica;
  }

  // The collective save of a complete pending save; returns once staged.
  ffi::Error Save(const std::string& path, PendingSave& pending) {
    std::lock_guard<std::mutex> lock(save_mutex_);  // the context is used by one thread at a time
    CallError err;
    ckpt_state_t* state = nullptr;
    int32_t status = ckpt_state_create(&state, err.get());
    if (status != CKPT_OK) return err.ToFfi("ckpt: creating the state of " + path, status);
    std::unique_ptr<ckpt_state_t, decltype(&ckpt_state_free)> owned(state, ckpt_state_free);
    for (auto& [at, block] : pending.blocks) {
      ckpt_tensor_shard shard = CKPT_TENSOR_SHARD_INIT;
      const uint32_t replica = static_cast<uint32_t>(block.replica);
      shard.key = block.key.c_str();
      shard.dtype = block.dtype;
      shard.ndim = static_cast<uint32_t>(block.shape.size());
      shard.global_shape = block.global_shape.data();
      shard.local_shape = block.shape.data();
      shard.global_offset = block.offset.data();
      shard.replica_ndim = 1;
      shard.replica_id = &replica;
      shard.data = block.bytes.data();
      shard.data_size = block.bytes.size();
      status = ckpt_state_add_tensor(state, &shard, err.get());
      if (status != CKPT_OK) return err.ToFfi("ckpt: '" + block.key + "' for " + path, status);
    }
    status = ckpt_state_add_common(state, kPytreeKey, pending.pytree.data(), pending.pytree.size(), err.get());
    if (status != CKPT_OK) return err.ToFfi("ckpt: " + path, status);
    ckpt_save_options options = CKPT_SAVE_OPTIONS_INIT;
    options.tier = tier_;
    ckpt_request_t* request = nullptr;
    status = ckpt_save(ctx_, state, path.c_str(), &options, &request, err.get());
    if (status != CKPT_OK) return err.ToFfi("ckpt: saving " + path, status);
    std::lock_guard<std::mutex> requests_lock(mutex_);
    requests_.push_back(request);
    return ffi::Error::Success();
  }

  // Waits for every save issued so far, frees their requests, and returns the first failure.
  int32_t Wait(uint32_t timeout_ms, ckpt_error_t* err) {
    std::vector<ckpt_request_t*> requests;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      requests.swap(requests_);
    }
    int32_t first = CKPT_OK;
    std::vector<ckpt_request_t*> unfinished;
    for (ckpt_request_t* request : requests) {
      const int32_t status = ckpt_request_wait(request, timeout_ms, first == CKPT_OK ? err : nullptr);
      if (status == CKPT_E_IN_PROGRESS) {
        unfinished.push_back(request);
      } else {
        ckpt_request_free(request);
      }
      if (first == CKPT_OK && status != CKPT_OK) first = status;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    requests_.insert(requests_.begin(), unfinished.begin(), unfinished.end());
    return first;
  }

 private:
  ckpt_context_t* ctx_;
  const int32_t tier_;  // CKPT_TIER_*: where every save of this saver goes
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<PendingSave>> pending_;
  std::vector<ckpt_request_t*> requests_;
  std::mutex save_mutex_;
};

class Savers {
 public:
  static Savers& Instance() {
    static Savers* savers = new Savers();  // never destroyed: XLA threads may still call during exit
    return *savers;
  }

  int64_t Open(ckpt_context_t* ctx, int32_t tier) {
    std::lock_guard<std::mutex> lock(mutex_);
    savers_.push_back(std::make_shared<Saver>(ctx, tier));
    return static_cast<int64_t>(savers_.size()) - 1;
  }

  std::shared_ptr<Saver> Get(int64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (id < 0 || id >= static_cast<int64_t>(savers_.size())) return nullptr;
    return savers_[id];
  }

  void Close(int64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (id >= 0 && id < static_cast<int64_t>(savers_.size())) savers_[id].reset();
  }

 private:
  std::mutex mutex_;
  std::vector<std::shared_ptr<Saver>> savers_;
};

// The leaves' keys and global shapes, from the attributes.
struct Layout {
  std::vector<std::string> keys;
  std::vector<std::vector<uint64_t>> global_shapes;
};

ffi::Error ParseLayout(std::string_view keys, ffi::Span<const int64_t> layout, size_t leaves, Layout* out) {
  size_t start = 0;
  while (start <= keys.size() && out->keys.size() < leaves) {
    const size_t end = std::min(keys.find('\n', start), keys.size());
    out->keys.emplace_back(keys.substr(start, end - start));
    start = end + 1;
  }
  if (out->keys.size() != leaves || layout.size() < 1 || layout[0] != static_cast<int64_t>(leaves)) {
    return Failed("ckpt_jax_save: the keys and layout attributes describe another number of leaves than the " +
                  std::to_string(leaves) + " operands");
  }
  size_t at = 1;
  for (size_t i = 0; i < leaves; ++i) {
    if (at >= layout.size() || layout[at] < 0 || layout[at] > CKPT_MAX_NDIM ||
        at + 1 + static_cast<size_t>(layout[at]) > layout.size()) {
      return Failed("ckpt_jax_save: malformed layout attribute at leaf " + std::to_string(i));
    }
    const size_t ndim = static_cast<size_t>(layout[at]);
    std::vector<uint64_t> shape;
    for (size_t d = 0; d < ndim; ++d) shape.push_back(static_cast<uint64_t>(layout[at + 1 + d]));
    out->global_shapes.push_back(std::move(shape));
    at += 1 + ndim;
  }
  return ffi::Error::Success();
}

// The NUL-terminated path held by the path operand's bytes.
ffi::Error ParsePath(const std::vector<uint8_t>& bytes, std::string* path) {
  const char* text = reinterpret_cast<const char*>(bytes.data());
  const size_t length = strnlen(text, bytes.size());
  if (length == 0 || length == bytes.size()) {
    return Failed("ckpt_jax_save: the path operand is empty or not NUL-terminated (make it with ckpt.jax.path_array)");
  }
  path->assign(text, length);
  return ffi::Error::Success();
}

struct HostMemory {
  ffi::Error ToHost(void* host, const void* data, size_t size) const {
    if (size > 0) std::memcpy(host, data, size);
    return ffi::Error::Success();
  }
  ffi::Error Sync() const { return ffi::Error::Success(); }
  ffi::Error Zero(void* data, size_t size) const {
    std::memset(data, 0, size);
    return ffi::Error::Success();
  }
};

#ifdef CKPT_JAX_WITH_CUDA
// Buffers on a CUDA device: copies are queued on the computation's stream, then waited for once in Sync.
struct CudaMemory {
  cudaStream_t stream;

  ffi::Error ToHost(void* host, const void* data, size_t size) const {
    return Check(cudaMemcpyAsync(host, data, size, cudaMemcpyDeviceToHost, stream));
  }
  ffi::Error Sync() const { return Check(cudaStreamSynchronize(stream)); }
  ffi::Error Zero(void* data, size_t size) const { return Check(cudaMemsetAsync(data, 0, size, stream)); }

 private:
  static ffi::Error Check(cudaError_t status) {
    if (status == cudaSuccess) return ffi::Error::Success();
    return ffi::Error::Internal(std::string("ckpt_jax_save: CUDA: ") + cudaGetErrorString(status));
  }
};
#endif

// A host copy of a small operand (the path, the placement).
template <typename Memory, typename Buffer>
ffi::Error HostCopy(const Memory& memory, const Buffer& operand, std::vector<uint8_t>* out) {
  out->resize(operand.size_bytes());
  if (ffi::Error e = memory.ToHost(out->data(), operand.untyped_data(), out->size()); e.failure()) return e;
  return memory.Sync();
}

// This call's blocks, copied to host memory, skipping those another local device already brought.
template <typename Memory>
ffi::Error StageBlocks(const Memory& memory, Saver& saver, const std::string& path, const Layout& layout,
                       const std::vector<uint8_t>& placement, const ffi::RemainingArgs& leaves,
                       std::vector<StagedBlock>* out) {
  const size_t count = leaves.size();
  if (placement.size() != count * kPlacementColumns * sizeof(int32_t)) {
    return Failed("ckpt_jax_save: the placement operand has " + std::to_string(placement.size() / sizeof(int32_t)) +
                  " entries for " + std::to_string(count) + " leaves");
  }
  std::vector<int32_t> rows(placement.size() / sizeof(int32_t));
  std::memcpy(rows.data(), placement.data(), placement.size());
  for (size_t i = 0; i < count; ++i) {
    ffi::ErrorOr<ffi::AnyBuffer> leaf = leaves.get<ffi::AnyBuffer>(i);
    if (!leaf.has_value()) return leaf.error();
    StagedBlock block;
    block.key = layout.keys[i];
    block.dtype = CkptDtype(leaf->element_type());
    if (block.dtype == 0) return Failed("ckpt_jax_save: '" + block.key + "': ckpt cannot store this element type");
    block.global_shape = layout.global_shapes[i];
    const auto dims = leaf->dimensions();
    if (dims.size() != block.global_shape.size()) {
      return Failed("ckpt_jax_save: '" + block.key + "': the block has " + std::to_string(dims.size()) +
                    " dimensions, the layout " + std::to_string(block.global_shape.size()));
    }
    const int32_t* row = rows.data() + i * kPlacementColumns;
    block.replica = row[0];
    for (size_t d = 0; d < dims.size(); ++d) {
      if (dims[d] < 0 || row[1 + d] < 0) return Failed("ckpt_jax_save: '" + block.key + "': negative placement");
      block.shape.push_back(static_cast<uint64_t>(dims[d]));
      block.offset.push_back(static_cast<uint64_t>(row[1 + d]));
    }
    if (saver.AlreadyStaged(path, block.key, block.offset, block.replica)) continue;
    block.bits = BitsPerElement(leaf->element_type());
    block.elements = leaf->element_count();
    block.bytes.resize(block.bits < 8 ? (block.elements * block.bits + 7) / 8 : leaf->size_bytes());
    if (ffi::Error e = memory.ToHost(block.bytes.data(), leaf->untyped_data(), block.bytes.size()); e.failure()) {
      return e;
    }
    out->push_back(std::move(block));
  }
  if (ffi::Error e = memory.Sync(); e.failure()) return e;
  for (StagedBlock& block : *out) {
    if (block.bits < 8) block.bytes = Unpack(block.bytes, block.elements, block.bits);
  }
  return ffi::Error::Success();
}

template <typename Memory>
ffi::Error SaveFromJit(const Memory& memory, ffi::Buffer<ffi::U8> path_operand, ffi::Buffer<ffi::S32> placement,
                       ffi::RemainingArgs leaves, ffi::Result<ffi::Buffer<ffi::S32>> status, int64_t saver_id,
                       std::string_view keys, ffi::Span<const int64_t> layout_attr, int64_t calls,
                       std::string_view pytree) {
  std::shared_ptr<Saver> saver = Savers::Instance().Get(saver_id);
  if (!saver) return Failed("ckpt_jax_save: saver " + std::to_string(saver_id) + " is closed or was never opened");
  if (calls < 1) return Failed("ckpt_jax_save: calls must be at least 1");
  std::vector<uint8_t> path_bytes, placement_bytes;
  if (ffi::Error e = HostCopy(memory, path_operand, &path_bytes); e.failure()) return e;
  std::string path;
  if (ffi::Error e = ParsePath(path_bytes, &path); e.failure()) return e;
  Layout layout;
  std::vector<StagedBlock> blocks;
  ffi::Error staged = ParseLayout(keys, layout_attr, leaves.size(), &layout);
  if (!staged.failure()) staged = HostCopy(memory, placement, &placement_bytes);
  if (!staged.failure()) staged = StageBlocks(memory, *saver, path, layout, placement_bytes, leaves, &blocks);
  // A failed call still counts as arrived, so that the process's last call knows the save cannot be complete.
  std::unique_ptr<PendingSave> complete =
      saver->Arrive(path, calls, std::string(pytree), std::move(blocks), staged.failure() ? staged.message() : "");
  if (staged.failure()) return staged;
  if (complete) {
    if (!complete->first_error.empty()) return Failed(complete->first_error);
    if (ffi::Error e = saver->Save(path, *complete); e.failure()) return e;
  }
  return memory.Zero(status->untyped_data(), status->size_bytes());
}

ffi::Error SaveOnHost(ffi::Buffer<ffi::U8> path, ffi::Buffer<ffi::S32> placement, ffi::RemainingArgs leaves,
                      ffi::Result<ffi::Buffer<ffi::S32>> status, int64_t saver, std::string_view keys,
                      ffi::Span<const int64_t> layout, int64_t calls, std::string_view pytree) {
  return SaveFromJit(HostMemory{}, path, placement, leaves, status, saver, keys, layout, calls, pytree);
}

#ifdef CKPT_JAX_WITH_CUDA
ffi::Error SaveOnCuda(cudaStream_t stream, ffi::Buffer<ffi::U8> path, ffi::Buffer<ffi::S32> placement,
                      ffi::RemainingArgs leaves, ffi::Result<ffi::Buffer<ffi::S32>> status, int64_t saver,
                      std::string_view keys, ffi::Span<const int64_t> layout, int64_t calls, std::string_view pytree) {
  return SaveFromJit(CudaMemory{stream}, path, placement, leaves, status, saver, keys, layout, calls, pytree);
}
#endif

// The operands, result and attributes of a save call (see the top of this file), after the platform's context.
template <typename Binding>
auto BindSave(Binding binding) {
  return std::move(binding)  // a Binding is consumed by each step
      .template Arg<ffi::Buffer<ffi::U8>>()
      .template Arg<ffi::Buffer<ffi::S32>>()
      .RemainingArgs()
      .template Ret<ffi::Buffer<ffi::S32>>()
      .template Attr<int64_t>("saver")
      .template Attr<std::string_view>("keys")
      .template Attr<ffi::Span<const int64_t>>("layout")
      .template Attr<int64_t>("calls")
      .template Attr<std::string_view>("pytree");
}

}  // namespace

// The handlers and the C functions ckpt.jax calls through ctypes; nothing else is exported.
#define CKPT_JAX_EXPORT extern "C" __attribute__((visibility("default")))

XLA_FFI_DEFINE_HANDLER_SYMBOL(ckpt_jax_save_cpu, SaveOnHost, BindSave(ffi::Ffi::Bind()));

#ifdef CKPT_JAX_WITH_CUDA
XLA_FFI_DEFINE_HANDLER_SYMBOL(ckpt_jax_save_cuda, SaveOnCuda,
                              BindSave(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));
#endif

/* Opens a saver that issues its saves through `ctx` (which must outlive it) to `tier` (CKPT_TIER_*, as
 * ckpt_save_options.tier); returns its id for the `saver` attribute, or -1 if ctx is NULL. */
CKPT_JAX_EXPORT int64_t ckpt_jax_ffi_open(ckpt_context_t* ctx, int32_t tier) {
  return ctx == nullptr ? -1 : Savers::Instance().Open(ctx, tier);
}

/* Waits for every save the saver issued so far (timeout_ms 0: no limit beyond the context's); returns CKPT_OK, or
 * the first failure with its message in `err`. CKPT_E_IN_PROGRESS if the timeout passed first. */
CKPT_JAX_EXPORT int32_t ckpt_jax_ffi_wait(int64_t saver_id, uint32_t timeout_ms, ckpt_error_t* err) {
  std::shared_ptr<Saver> saver = Savers::Instance().Get(saver_id);
  if (!saver) return CKPT_E_INVALID_ARGUMENT;
  return saver->Wait(timeout_ms, err);
}

/* Waits for the saver's saves, then forgets it; later calls naming it fail. */
CKPT_JAX_EXPORT void ckpt_jax_ffi_close(int64_t saver_id) {
  if (std::shared_ptr<Saver> saver = Savers::Instance().Get(saver_id)) (void)saver->Wait(0, nullptr);
  Savers::Instance().Close(saver_id);
}
