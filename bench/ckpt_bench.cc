// ckpt_bench: the measuring half of bench/run. Like a user's trainer it uses only the public C API (ckpt.h); it
// runs under ckpt-launch and prints raw `name value` lines on rank 0, which bench/run turns into figures printed
// beside their baselines.
//
//   ckpt_bench save  --dir D --mib S [--tensors T]  one memcpy of the state (baseline), then two saves (D and
//                                                    D.warm): how long ckpt_save blocks, how long until the commit
//                                                    is durable, the peak memory of the rank and its I/O workers
//   ckpt_bench load  --dir D --mib S [--tensors T]  loads D into fresh pre-faulted buffers and checks a sample
//   ckpt_bench dedup --dir D --mib S [--tensors T]  every rank holds the same replicated state; rank 0 times the
//                                                    save and checks that the checkpoint stores it only once
//   ckpt_bench version
//
// The state is T tensors of S/T MiB each, F32 [rows, 1024], filled with a pattern that is never zero, so that a
// buffer the load did not fill fails the check.

#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ckpt.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kColumns = 1024;
constexpr uint64_t kRowBytes = kColumns * sizeof(float);
constexpr uint64_t kPageBytes = 4096;
constexpr auto kSamplePeriod = std::chrono::milliseconds(5);
// Child processes are looked up again this often (in samples): a worker that died may have been restarted.
constexpr int kChildRefreshSamples = 20;

constexpr const char* kUsage =
    "usage: ckpt_bench save|load|dedup --dir DIR --mib S [--tensors T]\n"
    "       ckpt_bench version\n"
    "Run under ckpt-launch; rank 0 prints `name value` lines. See bench/run.\n";

// A failure to report: the benchmark stops and exits non-zero.
class BenchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Args {
  std::string mode;
  std::string dir;
  uint64_t bytes = 0;
  uint32_t tensors = 8;
};

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

uint64_t ParseCount(const std::string& flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || value == 0) throw BenchError(flag + " needs a positive integer, got " + text);
  return value;
}

Args ParseArgs(int argc, char** argv) {
  Args args;
  args.mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw BenchError(flag + " needs a value");
    const char* value = argv[++i];
    if (flag == "--dir") {
      args.dir = value;
    } else if (flag == "--mib") {
      args.bytes = ParseCount(flag, value) * kMiB;
    } else if (flag == "--tensors") {
      args.tensors = static_cast<uint32_t>(ParseCount(flag, value));
    } else {
      throw BenchError("unknown option " + flag);
    }
  }
  if (args.dir.empty() || args.bytes == 0) throw BenchError("--dir and --mib are required");
  if (args.bytes % (args.tensors * kRowBytes) != 0) {
    throw BenchError("--mib must split into " + std::to_string(args.tensors) + " tensors of whole 4 KiB rows");
  }
  return args;
}

// Anonymous page-aligned memory, as a trainer's large host tensors are; unmapped (returned to the system) when
// destroyed, so that each phase of the benchmark holds only the memory it needs.
class PageBuffer {
 public:
  explicit PageBuffer(uint64_t size) : size_(size) {
    void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED) throw BenchError("cannot map " + std::to_string(size) + " bytes: " + strerror(errno));
    data_ = static_cast<char*>(data);
  }
  ~PageBuffer() { munmap(data_, size_); }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;

  char* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  uint64_t size_;
};

// The value of word `index` of tensor `tensor`: a hash, never zero, the same on every rank (replicas agree).
uint32_t PatternWord(uint32_t tensor, uint64_t index) {
  const uint64_t mixed = (index + 1) * 0x9E3779B97F4A7C15ull ^ (tensor + 1ull) * 0xBF58476D1CE4E5B9ull;
  return static_cast<uint32_t>(mixed >> 32) | 1u;
}

// The state as T equal tensors laid end to end in one buffer, so that one memcpy of the buffer is the baseline.
struct Layout {
  uint32_t tensors;
  uint64_t tensor_bytes;

  uint64_t words_per_tensor() const { return tensor_bytes / sizeof(uint32_t); }
  uint32_t* tensor_words(const PageBuffer& buffer, uint32_t tensor) const {
    return reinterpret_cast<uint32_t*>(buffer.data() + tensor * tensor_bytes);
  }
};

void FillPattern(const PageBuffer& buffer, const Layout& layout) {
  for (uint32_t t = 0; t < layout.tensors; ++t) {
    uint32_t* words = layout.tensor_words(buffer, t);
    for (uint64_t i = 0; i < layout.words_per_tensor(); ++i) words[i] = PatternWord(t, i);
  }
}

// Checks one word in every 4 KiB page (at a position that moves from page to page) and the last word of every
// tensor: a page the load skipped or misplaced fails, at a cost of microseconds per MiB.
void VerifySample(const PageBuffer& buffer, const Layout& layout) {
  const uint64_t words_per_page = kPageBytes / sizeof(uint32_t);
  for (uint32_t t = 0; t < layout.tensors; ++t) {
    const uint32_t* words = layout.tensor_words(buffer, t);
    const uint64_t count = layout.words_per_tensor();
    for (uint64_t page = 0; page * words_per_page < count; ++page) {
      const uint64_t index = std::min(page * words_per_page + (page * 37) % words_per_page, count - 1);
      if (words[index] != PatternWord(t, index)) {
        char message[160];
        std::snprintf(message, sizeof message, "loaded tensor bench.t%u word %" PRIu64 " is 0x%08x, expected 0x%08x",
                      t, index, words[index], PatternWord(t, index));
        throw BenchError(message);
      }
    }
    if (words[count - 1] != PatternWord(t, count - 1)) {
      throw BenchError("loaded tensor bench.t" + std::to_string(t) + " differs in its last word");
    }
  }
}

// Owners of the C API's handles.
struct ErrorFree {
  void operator()(ckpt_error_t* e) const { ckpt_error_free(e); }
};
struct ContextFree {
  void operator()(ckpt_context_t* c) const { ckpt_context_free(c); }
};
struct StateFree {
  void operator()(ckpt_state_t* s) const { ckpt_state_free(s); }
};
struct RequestFree {
  void operator()(ckpt_request_t* r) const { ckpt_request_free(r); }
};
struct ReaderFree {
  void operator()(ckpt_reader_t* r) const { ckpt_reader_free(r); }
};
using ErrorPtr = std::unique_ptr<ckpt_error_t, ErrorFree>;
using ContextPtr = std::unique_ptr<ckpt_context_t, ContextFree>;
using StatePtr = std::unique_ptr<ckpt_state_t, StateFree>;
using RequestPtr = std::unique_ptr<ckpt_request_t, RequestFree>;
using ReaderPtr = std::unique_ptr<ckpt_reader_t, ReaderFree>;

void Check(int32_t status, const ckpt_error_t* err, const std::string& what) {
  if (status == CKPT_OK) return;
  throw BenchError(what + " failed: " + ckpt_status_string(status) + ": " + ckpt_error_message(err));
}

ErrorPtr MakeError() {
  ckpt_error_t* err = nullptr;
  if (ckpt_error_create(&err) != CKPT_OK) throw BenchError("cannot create an error object");
  return ErrorPtr(err);
}

ContextPtr MakeContext(ckpt_error_t* err) {
  ckpt_context_t* ctx = nullptr;
  Check(ckpt_context_create(nullptr, &ctx, err), err, "ckpt_context_create");
  return ContextPtr(ctx);
}

// Registers the layout's tensors over `buffer`. With a replica id, every rank holds the whole of every tensor.
StatePtr MakeState(const PageBuffer& buffer, const Layout& layout, const uint32_t* replica_id, ckpt_error_t* err) {
  ckpt_state_t* raw = nullptr;
  Check(ckpt_state_create(&raw, err), err, "ckpt_state_create");
  StatePtr state(raw);
  const uint64_t shape[2] = {layout.tensor_bytes / kRowBytes, kColumns};
  const uint64_t offset[2] = {0, 0};
  for (uint32_t t = 0; t < layout.tensors; ++t) {
    const std::string key = "bench.t" + std::to_string(t);
    ckpt_tensor_shard shard;
    ckpt_tensor_shard_init(&shard);
    shard.key = key.c_str();
    shard.dtype = CKPT_DTYPE_F32;
    shard.ndim = 2;
    shard.global_shape = shape;
    shard.local_shape = shape;
    shard.global_offset = offset;
    shard.replica_ndim = replica_id != nullptr ? 1 : 0;
    shard.replica_id = replica_id;
    shard.data = layout.tensor_words(buffer, t);
    shard.data_size = layout.tensor_bytes;
    Check(ckpt_state_add_tensor(state.get(), &shard, err), err, "ckpt_state_add_tensor " + key);
  }
  return state;
}

// Resident memory of one process, split so that shared memory (the staging arena, mapped by the rank and by its
// workers) is not counted once per process that maps it.
struct Residency {
  uint64_t private_kib = 0;  // RssAnon + RssFile
  uint64_t shared_kib = 0;   // RssShmem
  uint64_t peak_kib = 0;     // VmHWM
  bool readable = false;
};

Residency ReadResidency(pid_t pid) {
  Residency r;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string field;
  uint64_t kib = 0;
  while (status >> field) {
    if (field == "RssAnon:" || field == "RssFile:" || field == "RssShmem:" || field == "VmHWM:") {
      if (!(status >> kib)) break;
      r.readable = true;
      if (field == "RssShmem:") {
        r.shared_kib = kib;
      } else if (field == "VmHWM:") {
        r.peak_kib = kib;
      } else {
        r.private_kib += kib;
      }
    }
  }
  return r;
}

// The direct children of this process (its I/O workers), found through /proc/<pid>/stat.
std::vector<pid_t> ChildProcesses() {
  std::vector<pid_t> children;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return children;
  const pid_t self = getpid();
  while (dirent* entry = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    std::ifstream stat_file(std::string("/proc/") + entry->d_name + "/stat");
    std::string line;
    std::getline(stat_file, line);
    // The command name is parenthesised and may itself contain ") ": the parent pid follows the last one.
    const size_t name_end = line.rfind(") ");
    if (name_end == std::string::npos) continue;
    char state = 0;
    long parent = 0;
    if (std::sscanf(line.c_str() + name_end + 2, "%c %ld", &state, &parent) == 2 && parent == self) {
      children.push_back(static_cast<pid_t>(pid));
    }
  }
  closedir(proc);
  return children;
}

// Asks the kernel to restart this process's VmHWM from its current residency ("5" in clear_refs, Linux 4.0+), so
// that the high-water mark covers the save alone, not the memcpy baseline before it. False where refused.
bool ResetPeakResidency() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.flush();
  return clear_refs.good();
}

// Samples the resident memory of this process and its children on a thread while a save runs. The footprint of
// a sample is every process's private pages plus the largest shared residency (the arena is one memfd: counting
// it per process would count it several times). Where it can be reset, this process's own high-water mark also
// counts, which catches a spike between two samples.
class MemorySampler {
 public:
  MemorySampler() { children_ = ChildProcesses(); }
  ~MemorySampler() { Stop(); }

  uint64_t SampleKib() {
    uint64_t private_kib = 0, shared_kib = 0;
    for (pid_t pid : Processes()) {
      const Residency r = ReadResidency(pid);
      private_kib += r.private_kib;
      shared_kib = std::max(shared_kib, r.shared_kib);
    }
    return private_kib + shared_kib;
  }

  void Start() {
    use_own_peak_ = ResetPeakResidency();
    running_ = true;
    thread_ = std::thread([this] {
      for (int sample = 1; running_; ++sample) {
        if (sample % kChildRefreshSamples == 0) children_ = ChildProcesses();
        const int children = static_cast<int>(children_.size());
        max_children_ = std::max(max_children_.load(), children);
        peak_kib_ = std::max(peak_kib_.load(), SampleKib());
        std::this_thread::sleep_for(kSamplePeriod);
      }
    });
  }

  // Stops sampling; returns the peak footprint seen in KiB.
  uint64_t Stop() {
    if (thread_.joinable()) {
      running_ = false;
      thread_.join();
      const uint64_t own_peak_kib = use_own_peak_ ? ReadResidency(getpid()).peak_kib : 0;
      peak_kib_ = std::max({peak_kib_.load(), SampleKib(), own_peak_kib});
    }
    return peak_kib_;
  }

  int max_children() const { return max_children_; }

 private:
  std::vector<pid_t> Processes() const {
    std::vector<pid_t> pids = children_;
    pids.push_back(getpid());
    return pids;
  }

  std::vector<pid_t> children_;
  std::thread thread_;
  bool use_own_peak_ = false;
  std::atomic<bool> running_{false};
  std::atomic<uint64_t> peak_kib_{0};
  std::atomic<int> max_children_{0};
};

class Reporter {
 public:
  explicit Reporter(bool enabled) : enabled_(enabled) {}
  void Print(const char* name, double value) const {
    if (enabled_) std::printf("%s %.6f\n", name, value);
  }
  void Print(const char* name, uint64_t value) const {
    if (enabled_) std::printf("%s %" PRIu64 "\n", name, value);
  }

 private:
  bool enabled_;
};

#ifdef CKPT_CONTEXT_STATS_INIT
// Weak, so that this benchmark also runs against a libckpt built before the call existed (comparing versions is
// what it is for); the call's address is then null.
#pragma weak ckpt_context_stats_get
#endif

// The library's own account of this rank's staging arena, where this libckpt reports it.
void PrintLibraryStats(const Reporter& out, const ckpt_context_t* ctx, ckpt_error_t* err) {
#ifdef CKPT_CONTEXT_STATS_INIT
  if (&ckpt_context_stats_get == nullptr) return;
  ckpt_context_stats stats = CKPT_CONTEXT_STATS_INIT;
  Check(ckpt_context_stats_get(ctx, &stats, err), err, "ckpt_context_stats_get");
  out.Print("staging_arena_mib", static_cast<double>(stats.arena_bytes) / kMiB);
  out.Print("library_io_workers", static_cast<uint64_t>(stats.io_workers));
#else
  (void)out, (void)ctx, (void)err;
#endif
}

// The baseline of the save's blocking time: one memcpy of the whole state into memory that is already faulted in.
double MemcpyMilliseconds(const PageBuffer& source) {
  PageBuffer target(source.size());
  std::memset(target.data(), 0, target.size());
  const auto start = Clock::now();
  std::memcpy(target.data(), source.data(), source.size());
  const double ms = SecondsSince(start) * 1e3;
  // Reading the copy back keeps the compiler from dropping a copy whose target is never used.
  if (std::memcmp(target.data() + target.size() - kPageBytes, source.data() + source.size() - kPageBytes,
                  kPageBytes) != 0) {
    throw BenchError("the memcpy baseline produced a different copy");
  }
  return ms;
}

struct SaveTiming {
  double block_s;    // until ckpt_save returned: the registered buffers may change again
  double durable_s;  // until ckpt_request_wait returned: the checkpoint is committed
};

SaveTiming TimedSave(ckpt_context_t* ctx, ckpt_state_t* state, const std::string& dir, ckpt_error_t* err) {
  ckpt_request_t* raw = nullptr;
  const auto start = Clock::now();
  Check(ckpt_save(ctx, state, dir.c_str(), nullptr, &raw, err), err, "ckpt_save " + dir);
  const double block_s = SecondsSince(start);
  RequestPtr request(raw);
  Check(ckpt_request_wait(request.get(), 0, err), err, "ckpt_request_wait for " + dir);
  return {block_s, SecondsSince(start)};
}

// Two saves of the same state: the first, into a fresh context, gives the save's throughput; the second is what
// every later save of a training loop sees (arena already faulted in, plan cached), so its blocking time is the
// one compared with memcpy. It goes to DIR.warm.
void RunSave(const Args& args) {
  const Layout layout{args.tensors, args.bytes / args.tensors};
  PageBuffer buffer(args.bytes);
  FillPattern(buffer, layout);
  const double memcpy_ms = MemcpyMilliseconds(buffer);

  ErrorPtr err = MakeError();
  ContextPtr ctx = MakeContext(err.get());
  StatePtr state = MakeState(buffer, layout, nullptr, err.get());
  MemorySampler sampler;
  const uint64_t before_kib = sampler.SampleKib();
  sampler.Start();
  const SaveTiming first = TimedSave(ctx.get(), state.get(), args.dir, err.get());
  const SaveTiming warm = TimedSave(ctx.get(), state.get(), args.dir + ".warm", err.get());
  const uint64_t peak_kib = sampler.Stop();

  const Reporter out(ckpt_context_rank(ctx.get()) == 0);
  out.Print("save_seconds", first.durable_s);
  out.Print("async_block_first_ms", first.block_s * 1e3);
  out.Print("async_block_ms", warm.block_s * 1e3);
  out.Print("warm_save_seconds", warm.durable_s);
  out.Print("memcpy_ms", memcpy_ms);
  out.Print("pre_save_rss_mib", before_kib / 1024.0);
  out.Print("save_peak_rss_mib", peak_kib / 1024.0);
  out.Print("io_worker_processes", static_cast<uint64_t>(sampler.max_children()));
  PrintLibraryStats(out, ctx.get(), err.get());
}

void RunLoad(const Args& args) {
  const Layout layout{args.tensors, args.bytes / args.tensors};
  PageBuffer buffer(args.bytes);
  std::memset(buffer.data(), 0, buffer.size());

  ErrorPtr err = MakeError();
  ContextPtr ctx = MakeContext(err.get());
  StatePtr state = MakeState(buffer, layout, nullptr, err.get());
  const auto start = Clock::now();
  Check(ckpt_load(ctx.get(), state.get(), args.dir.c_str(), nullptr, err.get()), err.get(), "ckpt_load");
  const double load_s = SecondsSince(start);
  VerifySample(buffer, layout);
  Reporter(ckpt_context_rank(ctx.get()) == 0).Print("load_seconds", load_s);
}

// Fails unless the checkpoint stores the replicated state exactly once.
void CheckStoredOnce(const std::string& dir, uint64_t state_bytes, ckpt_error_t* err) {
  ckpt_reader_t* raw = nullptr;
  Check(ckpt_reader_open(dir.c_str(), &raw, err), err, "ckpt_reader_open " + dir);
  ReaderPtr reader(raw);
  ckpt_checkpoint_info info = CKPT_CHECKPOINT_INFO_INIT;
  Check(ckpt_reader_info(reader.get(), &info, err), err, "ckpt_reader_info");
  if (info.total_bytes != state_bytes) {
    throw BenchError("the replicated state of " + std::to_string(state_bytes) + " bytes was stored as " +
                     std::to_string(info.total_bytes) + " bytes");
  }
}

void RunDedup(const Args& args) {
  const Layout layout{args.tensors, args.bytes / args.tensors};
  PageBuffer buffer(args.bytes);
  FillPattern(buffer, layout);

  // Context creation waits for every rank, so the ranks enter the save together with their state ready.
  ErrorPtr err = MakeError();
  ContextPtr ctx = MakeContext(err.get());
  const uint32_t replica_id[1] = {static_cast<uint32_t>(ckpt_context_rank(ctx.get()))};
  StatePtr state = MakeState(buffer, layout, replica_id, err.get());

  const SaveTiming timing = TimedSave(ctx.get(), state.get(), args.dir, err.get());

  if (ckpt_context_rank(ctx.get()) != 0) return;
  CheckStoredOnce(args.dir, args.bytes, err.get());
  Reporter(true).Print("dedup_save_seconds", timing.durable_s);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "version") {
    std::printf("%s\n", ckpt_version_string());
    return 0;
  }
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return kExitUsage;
  }
  Args args;
  try {
    args = ParseArgs(argc, argv);
  } catch (const BenchError& e) {
    std::fprintf(stderr, "ckpt_bench: %s\n%s", e.what(), kUsage);
    return kExitUsage;
  }
  try {
    if (args.mode == "save") {
      RunSave(args);
    } else if (args.mode == "load") {
      RunLoad(args);
    } else if (args.mode == "dedup") {
      RunDedup(args);
    } else {
      std::fprintf(stderr, "ckpt_bench: unknown mode %s\n%s", args.mode.c_str(), kUsage);
      return kExitUsage;
    }
  } catch (const std::exception& e) {
    const char* rank = std::getenv("RANK");
    std::fprintf(stderr, "ckpt_bench rank %s: %s\n", rank != nullptr ? rank : "0", e.what());
    return kExitFailure;
  }
  return 0;
}
