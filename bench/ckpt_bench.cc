// ckpt_bench: the measuring half of bench/run. Like a user's trainer it uses ckpt through the public C API only
// (ckpt.h); it runs under ckpt-launch and prints raw `name value` lines, which bench/run turns into figures printed
// beside their baselines.
//
//   ckpt_bench save  --dir D --mib S [--tensors T]  one memcpy of the state (baseline), then two saves (D and
//                                                    D.warm): how long ckpt_save blocks, how long until the commit
//                                                    is durable, the CPU time of the rank and its I/O workers over
//                                                    the first, the peak memory of the rank and its I/O workers
//   ckpt_bench load  --dir D --mib S [--tensors T]  loads D into fresh pre-faulted buffers and checks a sample;
//                                                    the load's time and CPU time (rank and I/O workers)
//   ckpt_bench dedup --dir D --mib S [--tensors T]  every rank holds the same replicated state; rank 0 times the
//                                                    save and checks that the checkpoint stores it only once
//   ckpt_bench reshard-save --dir D --mib S [--tensors T]
//                    saves S MiB laid out TP=2 x DP=(ranks/2): the tensors split in row halves, each half
//                    replicated on the data-parallel ranks; bench.t0 replicated on every rank
//   ckpt_bench reshard-load --dir D --mib S [--tensors T] [--transport auto|none|ucx]
//                    every rank loads a 1/ranks row range of every tensor, and the whole of bench.t0
//   ckpt_bench replicated-load --dir D --mib S [--tensors T] [--transport auto|none|ucx]
//                    every rank loads the whole state (saved by dedup)
//   ckpt_bench device-save --dir D --mib S [--tensors T]
//                    the state in CUDA memory of device 0: cudaMemcpy of every tensor into pinned host memory
//                    (baseline), then two saves (D, removed, and D.warm): how long the second ckpt_save blocks
//                    while it stages the tensors into the arena; D.warm is loaded back and checked
//   ckpt_bench codec --input FILE --byte-groups N [--zstd-level L]
//   ckpt_bench throttled-save --input FILE --dir D --mib S [--tensors T]
//                    bench/compress's modes (compress_mode.cc): ckpt's block codec beside plain zstd, and saves
//                    with and without CKPT_SAVE_COMPRESS; the codec mode alone goes beyond the C API, to the codec
//   ckpt_bench cuda-probe                            "available", or "unavailable: <ckpt's reason>"
//   ckpt_bench version
//
// The modes save, load, dedup and device-save print on rank 0; the two loads print on every rank (names ending
// ".rank<r>"). The state is T tensors of S/T MiB each, F32 [rows, 1024], filled with a pattern that is never zero,
// so that a buffer the load did not fill fails the check.

#include <dirent.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_support.h"

namespace bench {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr auto kSamplePeriod = std::chrono::milliseconds(5);
// Child processes are looked up again this often (in samples): a worker that died may have been restarted.
constexpr int kChildRefreshSamples = 20;

constexpr const char* kUsage =
    "usage: ckpt_bench save|save-in-place|save-cow|load|dedup|reshard-save|reshard-load|replicated-load|device-save\n"
    "                  |memory|memory-crash|replica-check|incremental\n"
    "                  --dir DIR --mib S\n"
    "                  [--tensors T] [--transport auto|none|ucx]\n"
    "       ckpt_bench codec --input FILE --byte-groups N [--zstd-level L]\n"
    "       ckpt_bench throttled-save --input FILE --dir DIR --mib S [--tensors T]\n"
    "       ckpt_bench cuda-probe|version\n"
    "Run under ckpt-launch; prints `name value` lines. See bench/run.\n";

uint64_t ParseCount(const std::string& flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || value == 0) throw BenchError(flag + " needs a positive integer, got " + text);
  return value;
}

int32_t ParseTransport(const std::string& name) {
  if (name == "auto") return CKPT_TRANSPORT_AUTO;
  if (name == "none") return CKPT_TRANSPORT_NONE;
  if (name == "ucx") return CKPT_TRANSPORT_UCX;
  throw BenchError("--transport is auto, none or ucx, got " + name);
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
    } else if (flag == "--transport") {
      args.transport = ParseTransport(value);
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

// The reading of a CPU-time clock in seconds.
double ClockSeconds(clockid_t clock) {
  timespec t{};
  if (clock_gettime(clock, &t) != 0) throw BenchError(std::string("clock_gettime: ") + std::strerror(errno));
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// The user and system CPU time of process `pid` (all its threads, exited ones included) from /proc/<pid>/stat, in
// clock ticks of 10 ms; 0 where the process is gone.
double ProcessCpuSeconds(pid_t pid) {
  std::ifstream stat_file("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat_file, line);
  const size_t name_end = line.rfind(") ");
  if (name_end == std::string::npos) return 0;
  unsigned long long utime = 0, stime = 0;
  // Fields 3 to 13 (state .. cmajflt) come before utime and stime.
  if (std::sscanf(line.c_str() + name_end + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                  &stime) != 2) {
    return 0;
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The CPU time that ckpt spends over an interval in this rank (every thread) and in its I/O worker processes. The
// workers are children that live as long as the context, so the kernel's RUSAGE_CHILDREN would count them only
// once reaped, and over their whole life: they are read one by one instead. A worker born within the interval
// counts whole; one that dies within it is lost (a restart, which a benchmark run does not see).
class CpuMeter {
 public:
  // The rank's clock is read after the scan of /proc and before the next one, so that neither scan is charged.
  CpuMeter() {
    for (pid_t pid : ChildProcesses()) worker_start_[pid] = ProcessCpuSeconds(pid);
    rank_start_ = ClockSeconds(CLOCK_PROCESS_CPUTIME_ID);
  }

  // Seconds since construction: {the rank's, the workers'}.
  std::pair<double, double> Elapsed() const {
    const double rank = ClockSeconds(CLOCK_PROCESS_CPUTIME_ID) - rank_start_;
    double workers = 0;
    for (pid_t pid : ChildProcesses()) {
      const auto start = worker_start_.find(pid);
      workers += ProcessCpuSeconds(pid) - (start == worker_start_.end() ? 0 : start->second);
    }
    return {rank, workers};
  }

 private:
  double rank_start_ = 0;
  std::map<pid_t, double> worker_start_;
};

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

  // The CPU time of the sampling thread so far, so that a CPU measurement of the save can leave it out; 0 when
  // it is not running.
  double ThreadCpuSeconds() {
    clockid_t clock;
    if (!thread_.joinable() || pthread_getcpuclockid(thread_.native_handle(), &clock) != 0) return 0;
    return ClockSeconds(clock);
  }

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

// The library's own account of this rank's staging arena, where this libckpt reports it.
void PrintLibraryStats(Reporter& out, const ckpt_context_t* ctx, ckpt_error_t* err) {
  ckpt_context_stats stats;
  if (!LibraryStats(ctx, &stats, err)) return;
  out.Print("staging_arena_mib", static_cast<double>(stats.arena_bytes) / kMiB);
  out.Print("library_io_workers", static_cast<uint64_t>(stats.io_workers));
}

// Two saves of the same state: the first, into a fresh context, gives the save's throughput; the second is what
// every later save of a training loop sees (arena already faulted in, plan cached), so its blocking time is the
// one compared with memcpy. It goes to DIR.warm.
void RunSave(const Args& args) {
  const RankLayout layout = RankLayout::Whole(Geometry::Of(args), {});
  PageBuffer buffer(layout.bytes());
  FillPattern(buffer, layout);
  const double memcpy_ms = MemcpyMilliseconds(buffer);

  ErrorPtr err = MakeError();
  ContextPtr ctx = MakeContext(args.transport, err.get());
  StatePtr state = MakeState(buffer, layout, err.get());
  MemorySampler sampler;
  const uint64_t before_kib = sampler.SampleKib();
  sampler.Start();
  const double sampler_start_s = sampler.ThreadCpuSeconds();
  const CpuMeter cpu;
  const SaveTiming first = TimedSave(ctx.get(), state.get(), args.dir, err.get());
  const auto [rank_cpu_s, worker_cpu_s] = cpu.Elapsed();
  const double sampler_cpu_s = sampler.ThreadCpuSeconds() - sampler_start_s;
  const SaveTiming warm = TimedSave(ctx.get(), state.get(), args.dir + ".warm", err.get());
  const uint64_t peak_kib = sampler.Stop();

  Reporter out(ckpt_context_rank(ctx.get()) == 0);
  out.Print("save_seconds", first.durable_s);
  // The sampling thread is the benchmark's, not ckpt's.
  out.Print("save_cpu_seconds", rank_cpu_s - sampler_cpu_s + worker_cpu_s);
  out.Print("save_worker_cpu_seconds", worker_cpu_s);
  out.Print("async_block_first_ms", first.block_s * 1e3);
  out.Print("async_block_ms", warm.block_s * 1e3);
  out.Print("warm_save_seconds", warm.durable_s);
  out.Print("memcpy_ms", memcpy_ms);
  out.Print("pre_save_rss_mib", before_kib / 1024.0);
  out.Print("save_peak_rss_mib", peak_kib / 1024.0);
  out.Print("io_worker_processes", static_cast<uint64_t>(sampler.max_children()));
  PrintLibraryStats(out, ctx.get(), err.get());
}

// One save written in place (CKPT_SAVE_IN_PLACE) by a fresh context, as save_seconds measures the asynchronous one:
// ckpt_save returns once the bytes are durable, having copied none of them into the arena.
void RunSaveInPlace(const Args& args) {
  const RankLayout layout = RankLayout::Whole(Geometry::Of(args), {});
  PageBuffer buffer(layout.bytes());
  FillPattern(buffer, layout);
  ErrorPtr err = MakeError();
  ContextPtr ctx = MakeContext(args.transport, err.get());
  StatePtr state = MakeState(buffer, layout, err.get());
  const CpuMeter cpu;
  const SaveTiming timing =
      TimedSave(ctx.get(), state.get(), args.dir, err.get(), CKPT_TIER_STORAGE, CKPT_SAVE_IN_PLACE);
  const auto [rank_cpu_s, worker_cpu_s] = cpu.Elapsed();
  Reporter out(ckpt_context_rank(ctx.get()) == 0);
  out.Print("save_in_place_seconds", timing.durable_s);
  out.Print("save_in_place_block_seconds", timing.block_s);
  out.Print("save_in_place_cpu_seconds", rank_cpu_s + worker_cpu_s);
  out.Print("save_in_place_worker_cpu_seconds", worker_cpu_s);
}

// How much of [begin, end) lies in transparent huge pages, in KiB: the AnonHugePages of the mappings of
// /proc/self/smaps that overlap it; 0 where unknown.
uint64_t AnonHugePagesKib(uintptr_t begin, uintptr_t end) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  uint64_t total = 0;
  while (std::getline(smaps, line)) {
    uintptr_t from = 0, to = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &from, &to) == 2 && line.find(':') > line.find(' ')) {
      inside = from < end && to > begin;
      continue;
    }
    unsigned long kib = 0;
    if (inside && std::sscanf(line.c_str(), "AnonHugePages: %lu kB", &kib) == 1) total += kib;
  }
  return total;
}

// Two copy-on-write saves (CKPT_SAVE_COPY_ON_WRITE) of the same state by a fresh context. The second is what a
// training loop sees (plan cached, fault handler started, arena faulted in, and the state collapsed into huge pages
// by the library after the first, which the steps between two checkpoints give it time to do: waited for here, at
// most 60 s): its blocking time is compared with a memcpy of the state, and its time until committed with fio's
// write. The first goes to DIR.first, removed before the second starts, so that no more than one copy of the state
// lies on the disk.
void RunSaveCopyOnWrite(const Args& args) {
  const RankLayout layout = RankLayout::Whole(Geometry::Of(args), {});
  PageBuffer buffer(layout.bytes());
  FillPattern(buffer, layout);
  ErrorPtr err = MakeError();
  ContextPtr ctx = MakeContext(args.transport, err.get());
  StatePtr state = MakeState(buffer, layout, err.get());
  const std::string first = args.dir + ".first";
  const SaveTiming cold =
      TimedSave(ctx.get(), state.get(), first, err.get(), CKPT_TIER_STORAGE, CKPT_SAVE_COPY_ON_WRITE);
  std::filesystem::remove_all(first);
  const auto collapsing = Clock::now();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(buffer.data()), end = begin + buffer.size();
  constexpr uintptr_t kHuge = 2u << 20;
  const uintptr_t huge_begin = (begin + kHuge - 1) / kHuge * kHuge, huge_end = end / kHuge * kHuge;
  const uint64_t huge_kib = huge_end > huge_begin ? (huge_end - huge_begin) / 1024 : 0;  // every whole huge page
  while (AnonHugePagesKib(begin, end) < huge_kib && SecondsSince(collapsing) < 60) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double collapse_wait_s = SecondsSince(collapsing);
  const SaveTiming warm =
      TimedSave(ctx.get(), state.get(), args.dir, err.get(), CKPT_TIER_STORAGE, CKPT_SAVE_COPY_ON_WRITE);
  Reporter out(ckpt_context_rank(ctx.get()) == 0);
  out.Print("cow_save_block_first_ms", cold.block_s * 1e3);
  out.Print("cow_save_block_ms", warm.block_s * 1e3);
  out.Print("cow_save_seconds", warm.durable_s);
  out.Print("cow_huge_page_wait_seconds", collapse_wait_s);
}

void RunLoad(const Args& args) {
  const RankLayout layout = RankLayout::Whole(Geometry::Of(args), {});
  PageBuffer buffer(layout.bytes());
  std::memset(buffer.data(), 0, buffer.size());

  ErrorPtr err = MakeError();
  ContextPtr ctx = MakeContext(args.transport, err.get());
  StatePtr state = MakeState(buffer, layout, err.get());
  const CpuMeter cpu;
  const auto start = Clock::now();
  Check(ckpt_load(ctx.get(), state.get(), args.dir.c_str(), nullptr, err.get()), err.get(), "ckpt_load");
  const double load_s = SecondsSince(start);
  const auto [rank_cpu_s, worker_cpu_s] = cpu.Elapsed();
  VerifySample(buffer, layout);
  Reporter out(ckpt_context_rank(ctx.get()) == 0);
  out.Print("load_seconds", load_s);
  out.Print("load_cpu_seconds", rank_cpu_s + worker_cpu_s);
  out.Print("load_worker_cpu_seconds", worker_cpu_s);
}

void RunDedup(const Args& args) {
  ErrorPtr err = MakeError();
  ContextPtr ctx = MakeContext(args.transport, err.get());
  const uint32_t rank = static_cast<uint32_t>(ckpt_context_rank(ctx.get()));
  const RankLayout layout = RankLayout::Whole(Geometry::Of(args), {rank});
  PageBuffer buffer(layout.bytes());
  FillPattern(buffer, layout);
  StatePtr state = MakeState(buffer, layout, err.get());
  Synchronize(ctx.get(), args.dir + ".sync", err.get());  // every rank has filled its buffer

  const SaveTiming timing = TimedSave(ctx.get(), state.get(), args.dir, err.get());

  if (ckpt_context_rank(ctx.get()) != 0) return;
  CheckStoredOnce(args.dir, args.bytes, err.get());
  Reporter(true).Print("dedup_save_seconds", timing.durable_s);
}

using Mode = void (*)(const Args&);

// The measuring modes, by name; null for an unknown name.
Mode FindMode(const std::string& name) {
  if (name == "save") return RunSave;
  if (name == "save-in-place") return RunSaveInPlace;
  if (name == "save-cow") return RunSaveCopyOnWrite;
  if (name == "load") return RunLoad;
  if (name == "dedup") return RunDedup;
  if (name == "reshard-save") return RunReshardSave;
  if (name == "reshard-load") return RunReshardLoad;
  if (name == "replicated-load") return RunReplicatedLoad;
  if (name == "device-save") return RunDeviceSave;
  if (name == "memory") return RunMemory;
  if (name == "memory-crash") return RunMemoryCrash;
  if (name == "replica-check") return RunReplicaCheck;
  if (name == "incremental") return RunIncremental;
  return nullptr;
}

// Runs `body`, turning an exception into a message naming this rank and a failing exit status.
template <typename Body>
int Guarded(Body body) {
  try {
    body();
  } catch (const std::exception& e) {
    const char* rank = std::getenv("RANK");
    std::fprintf(stderr, "ckpt_bench rank %s: %s\n", rank != nullptr ? rank : "0", e.what());
    return kExitFailure;
  }
  return 0;
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  using namespace bench;
  const std::string first = argc >= 2 ? argv[1] : "";
  if (argc == 2 && first == "version") {
    std::printf("%s\n", ckpt_version_string());
    return 0;
  }
  if (argc == 2 && first == "cuda-probe") return Guarded(RunCudaProbe);
  if (first == "codec") return Guarded([&] { RunCodec(argc, argv); });
  if (first == "throttled-save") return Guarded([&] { RunThrottledSave(argc, argv); });
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
  const Mode mode = FindMode(args.mode);
  if (mode == nullptr) {
    std::fprintf(stderr, "ckpt_bench: unknown mode %s\n%s", args.mode.c_str(), kUsage);
    return kExitUsage;
  }
  return Guarded([&] { mode(args); });
}
