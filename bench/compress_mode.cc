// The measuring modes of bench/compress: ckpt's block codec (CKPT_SAVE_COMPRESS) against plain zstd on the same
// bytes, and a save with and without compression to a disk whose writes are throttled.
//
//   ckpt_bench codec --input FILE --byte-groups N [--zstd-level L]
//        the bytes of FILE (whole N-byte elements) in 1 MiB blocks, as a save stores them, on this one thread:
//        ckpt's codec (io/block_codec.h, the code a save's I/O workers run, with byte_groups N as a save passes the
//        element size) and plain zstd at level L (default 3, zstd's default) on the same blocks ungrouped. Every
//        block's round trip is checked once, then each codec compresses and decompresses the whole file in passes
//        until a second has gone by. Prints codec_ and zstd_ stored_bytes, compress_seconds and decompress_seconds
//        (per pass over the file), and input_bytes. Runs alone, not under ckpt-launch.
//   ckpt_bench throttled-save --input FILE --dir D --mib S [--tensors T]
//        FILE's bytes (BF16) repeated to fill S MiB, registered as T BF16 tensors of [rows, 1024] on 1 rank; one
//        compressed save to warm the context up (arena, plan, the workers' codecs; removed), then a save without
//        compression (D.plain) and one with CKPT_SAVE_COMPRESS (D.compressed), each timed until durable. The
//        compressed checkpoint is loaded back and compared with the state byte for byte. Prints the state's bytes,
//        the bytes of each checkpoint's data files and each save's time. bench/compress runs it in a cgroup that
//        throttles the disk's writes.
//
// The codec has no public API (a save applies it), so this file, unlike the other modes, compiles io/block_codec.cc
// in (bench/CMakeLists.txt).
#include <unistd.h>

#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_support.h"
#include "io/block_codec.h"

namespace bench {
namespace {

constexpr uint64_t kBlockBytes = 1 * kMiB;  // a save's block (ckpt.h, CKPT_SAVE_COMPRESS)
constexpr double kMinTimedSeconds = 1.0;
constexpr int kMinPasses = 3;
constexpr int kDefaultZstdLevel = 3;  // ZSTD_CLEVEL_DEFAULT
constexpr uint64_t kBf16Bytes = 2;

// `--flag value` pairs; every flag must be one of `known`.
std::map<std::string, std::string> ParseFlags(int argc, char** argv, const std::vector<std::string>& known) {
  std::map<std::string, std::string> flags;
  for (int i = 2; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (std::find(known.begin(), known.end(), flag) == known.end()) throw BenchError("unknown option " + flag);
    if (i + 1 >= argc) throw BenchError(flag + " needs a value");
    flags[flag] = argv[i + 1];
  }
  return flags;
}

const std::string& Required(const std::map<std::string, std::string>& flags, const std::string& flag) {
  const auto found = flags.find(flag);
  if (found == flags.end()) throw BenchError(flag + " is required");
  return found->second;
}

uint64_t Positive(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || value == 0) throw BenchError(flag + " needs a positive integer, got " + text);
  return value;
}

// The whole of `path` in page-aligned memory.
std::unique_ptr<PageBuffer> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw BenchError("cannot open " + path);
  const uint64_t size = static_cast<uint64_t>(in.tellg());
  if (size == 0) throw BenchError(path + " is empty");
  auto buffer = std::make_unique<PageBuffer>(size);
  in.seekg(0);
  if (!in.read(buffer->data(), static_cast<std::streamsize>(size))) throw BenchError("cannot read " + path);
  return buffer;
}

// The seconds one call of `pass` takes, averaged over passes repeated until kMinTimedSeconds have gone by.
double SecondsPerPass(const std::function<void()>& pass) {
  const auto start = Clock::now();
  int passes = 0;
  do {
    pass();
    ++passes;
  } while (passes < kMinPasses || SecondsSince(start) < kMinTimedSeconds);
  return SecondsSince(start) / passes;
}

// One compressed block: where its stored bytes lie in the output, and how many there are.
struct StoredBlock {
  uint64_t offset;
  uint64_t size;
};

// A codec under test: compresses the block [in, in + length) into `out` (room for Bound(length) bytes) and
// returns the stored size; decompresses it back.
struct BlockCodec {
  std::function<uint64_t(const char*, uint64_t, char*)> compress;
  std::function<void(const char*, uint64_t, char*, uint64_t)> decompress;
  std::function<uint64_t(uint64_t)> bound;
};

struct CodecTiming {
  uint64_t stored_bytes = 0;
  double compress_s = 0;
  double decompress_s = 0;
};

// Compresses `input` block by block, checks that every block decompresses to itself, then times both directions.
CodecTiming Measure(const PageBuffer& input, const BlockCodec& codec, const std::string& name) {
  const uint64_t blocks = (input.size() + kBlockBytes - 1) / kBlockBytes;
  PageBuffer stored(codec.bound(kBlockBytes) * blocks);
  PageBuffer output(input.size());
  std::memset(stored.data(), 0, stored.size());  // faulted in before any timing
  std::memset(output.data(), 0, output.size());
  std::vector<StoredBlock> layout(blocks);
  auto compress_all = [&] {
    for (uint64_t b = 0; b < blocks; ++b) {
      const uint64_t length = std::min(kBlockBytes, input.size() - b * kBlockBytes);
      const uint64_t offset = b * codec.bound(kBlockBytes);
      layout[b] = {offset, codec.compress(input.data() + b * kBlockBytes, length, stored.data() + offset)};
    }
  };
  auto decompress_all = [&] {
    for (uint64_t b = 0; b < blocks; ++b) {
      const uint64_t length = std::min(kBlockBytes, input.size() - b * kBlockBytes);
      codec.decompress(stored.data() + layout[b].offset, layout[b].size, output.data() + b * kBlockBytes, length);
    }
  };
  compress_all();
  decompress_all();
  if (std::memcmp(input.data(), output.data(), input.size()) != 0) {
    throw BenchError(name + ": the bytes decompressed differ from the input");
  }
  CodecTiming timing;
  for (const StoredBlock& block : layout) timing.stored_bytes += block.size;
  timing.compress_s = SecondsPerPass(compress_all);
  timing.decompress_s = SecondsPerPass(decompress_all);
  return timing;
}

// ckpt's codec, as a save's I/O worker calls it.
BlockCodec CkptCodec(uint32_t byte_groups) {
  auto compressor = std::make_shared<ckpt::io::BlockCompressor>();
  auto decompressor = std::make_shared<ckpt::io::BlockDecompressor>();
  return {
      [=](const char* in, uint64_t length, char* out) { return compressor->Compress(in, length, byte_groups, out); },
      [=](const char* in, uint64_t stored, char* out, uint64_t length) {
        const ckpt::Status status = decompressor->Decompress(in, stored, byte_groups, out, length, "a block");
        if (!status.ok()) throw BenchError("ckpt's codec: " + status.message());
      },
      [](uint64_t length) { return length; },  // a block that does not shrink is stored raw
  };
}

// Plain zstd: one frame per block at `level`, one context reused as a save's worker would.
BlockCodec ZstdCodec(int level) {
  std::shared_ptr<ZSTD_CCtx> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  std::shared_ptr<ZSTD_DCtx> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (cctx == nullptr || dctx == nullptr) throw BenchError("cannot create zstd contexts");
  return {
      [=](const char* in, uint64_t length, char* out) {
        const size_t size = ZSTD_compressCCtx(cctx.get(), out, ZSTD_compressBound(length), in, length, level);
        if (ZSTD_isError(size)) throw BenchError(std::string("ZSTD_compressCCtx: ") + ZSTD_getErrorName(size));
        return static_cast<uint64_t>(size);
      },
      [=](const char* in, uint64_t stored, char* out, uint64_t length) {
        const size_t size = ZSTD_decompressDCtx(dctx.get(), out, length, in, stored);
        if (ZSTD_isError(size) || size != length) throw BenchError("ZSTD_decompressDCtx failed on a block");
      },
      [](uint64_t length) { return static_cast<uint64_t>(ZSTD_compressBound(length)); },
  };
}

void PrintTiming(Reporter& out, const std::string& prefix, const CodecTiming& timing) {
  out.Print((prefix + "stored_bytes").c_str(), timing.stored_bytes);
  out.Print((prefix + "compress_seconds").c_str(), timing.compress_s);
  out.Print((prefix + "decompress_seconds").c_str(), timing.decompress_s);
}

}  // namespace

void RunCodec(int argc, char** argv) {
  const auto flags = ParseFlags(argc, argv, {"--input", "--byte-groups", "--zstd-level"});
  const uint64_t byte_groups = Positive("--byte-groups", Required(flags, "--byte-groups"));
  if (!ckpt::io::ValidByteGroups(static_cast<uint32_t>(byte_groups))) {
    throw BenchError("--byte-groups is 1, 2, 4 or 8");
  }
  const int level = flags.count("--zstd-level") != 0
                        ? static_cast<int>(Positive("--zstd-level", flags.at("--zstd-level")))
                        : kDefaultZstdLevel;
  const auto input = ReadFile(Required(flags, "--input"));
  if (input->size() % byte_groups != 0) throw BenchError("the input is not a whole number of elements");
  const CodecTiming ckpt_timing = Measure(*input, CkptCodec(static_cast<uint32_t>(byte_groups)), "ckpt's codec");
  const CodecTiming zstd_timing = Measure(*input, ZstdCodec(level), "zstd");
  Reporter out(true);
  out.Print("input_bytes", input->size());
  PrintTiming(out, "codec_", ckpt_timing);
  PrintTiming(out, "zstd_", zstd_timing);
}

namespace {

// The BF16 state of the throttled save: T tensors of [rows, kColumns], all in one buffer.
StatePtr MakeBf16State(const PageBuffer& buffer, uint32_t tensors, ckpt_error_t* err) {
  ckpt_state_t* raw = nullptr;
  Check(ckpt_state_create(&raw, err), err, "ckpt_state_create");
  StatePtr state(raw);
  const uint64_t tensor_bytes = buffer.size() / tensors;
  const uint64_t shape[2] = {tensor_bytes / (kColumns * kBf16Bytes), kColumns};
  const uint64_t offset[2] = {0, 0};
  for (uint32_t t = 0; t < tensors; ++t) {
    const std::string key = "bench.bf16." + std::to_string(t);
    ckpt_tensor_shard shard;
    ckpt_tensor_shard_init(&shard, sizeof shard);
    shard.key = key.c_str();
    shard.dtype = CKPT_DTYPE_BF16;
    shard.ndim = 2;
    shard.global_shape = shape;
    shard.local_shape = shape;
    shard.global_offset = offset;
    shard.data = buffer.data() + t * tensor_bytes;
    shard.data_size = tensor_bytes;
    Check(ckpt_state_add_tensor(state.get(), &shard, err), err, "ckpt_state_add_tensor " + key);
  }
  return state;
}

// The bytes of the files under `dir`/data: what a save wrote of the tensors.
uint64_t DataBytes(const std::string& dir) {
  uint64_t bytes = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir + "/data")) {
    if (entry.is_regular_file()) bytes += entry.file_size();
  }
  if (bytes == 0) throw BenchError(dir + "/data holds no bytes");
  return bytes;
}

// A save until durable, with the page cache's dirty pages (earlier phases') written out before the clock starts.
SaveTiming SaveAfterSync(ckpt_context_t* ctx, ckpt_state_t* state, const std::string& dir, ckpt_error_t* err,
                         uint64_t flags) {
  ::sync();
  return TimedSave(ctx, state, dir, err, CKPT_TIER_STORAGE, flags);
}

}  // namespace

void RunThrottledSave(int argc, char** argv) {
  const auto flags = ParseFlags(argc, argv, {"--input", "--dir", "--mib", "--tensors"});
  const std::string dir = Required(flags, "--dir");
  const uint64_t bytes = Positive("--mib", Required(flags, "--mib")) * kMiB;
  const uint32_t tensors =
      flags.count("--tensors") != 0 ? static_cast<uint32_t>(Positive("--tensors", flags.at("--tensors"))) : 4;
  if (bytes % (tensors * kColumns * kBf16Bytes) != 0) {
    throw BenchError("--mib must split into " + std::to_string(tensors) + " tensors of whole BF16 rows");
  }
  const auto weights = ReadFile(Required(flags, "--input"));
  PageBuffer buffer(bytes);
  for (uint64_t at = 0; at < bytes; at += weights->size()) {
    std::memcpy(buffer.data() + at, weights->data(), std::min(weights->size(), bytes - at));
  }

  ErrorPtr err = MakeError();
  ContextPtr ctx = MakeContext(CKPT_TRANSPORT_DEFAULT, err.get());
  StatePtr state = MakeBf16State(buffer, tensors, err.get());
  SaveAfterSync(ctx.get(), state.get(), dir + ".warm", err.get(), CKPT_SAVE_COMPRESS);
  std::filesystem::remove_all(dir + ".warm");
  const SaveTiming plain = SaveAfterSync(ctx.get(), state.get(), dir + ".plain", err.get(), 0);
  const uint64_t plain_bytes = DataBytes(dir + ".plain");
  std::filesystem::remove_all(dir + ".plain");
  const std::string compressed_dir = dir + ".compressed";
  const SaveTiming compressed = SaveAfterSync(ctx.get(), state.get(), compressed_dir, err.get(), CKPT_SAVE_COMPRESS);
  const uint64_t compressed_bytes = DataBytes(compressed_dir);

  PageBuffer loaded(bytes);
  std::memset(loaded.data(), 0, loaded.size());
  StatePtr loaded_state = MakeBf16State(loaded, tensors, err.get());
  Check(ckpt_load(ctx.get(), loaded_state.get(), compressed_dir.c_str(), nullptr, err.get()), err.get(),
        "ckpt_load " + compressed_dir);
  if (std::memcmp(loaded.data(), buffer.data(), bytes) != 0) {
    throw BenchError("the compressed checkpoint " + compressed_dir + " loads different bytes than were saved");
  }
  std::filesystem::remove_all(compressed_dir);

  Reporter out(true);
  out.Print("state_bytes", bytes);
  out.Print("uncompressed_data_bytes", plain_bytes);
  out.Print("compressed_data_bytes", compressed_bytes);
  out.Print("uncompressed_save_seconds", plain.durable_s);
  out.Print("compressed_save_seconds", compressed.durable_s);
}

}  // namespace bench
