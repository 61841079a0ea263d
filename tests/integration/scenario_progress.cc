// What each rank reports about its own part of a save and a load, run on N ranks by ckpt-launch from
// tests/integration/run.sh. Exits non-zero, saying why, if a rank's figures are not its own.
// Usage: ckpt_scenario_progress MODE ARGS...
//
//   request-stats DIR   every rank's ckpt_request_stats counts the bytes and files the manifest says it wrote (a
//                       replicated tensor is written by one rank only), its progress ends COMMITTED with those
//                       bytes, and it logs an INFO line for the committed save and for the load
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "ckpt.h"
#include "scenario_common.h"

namespace scenario {
namespace {

// The INFO lines this rank's context logged.
struct InfoLines {
  std::mutex mutex;
  std::vector<std::string> lines;

  static void Log(void* user, int32_t level, const char* message) {
    auto* self = static_cast<InfoLines*>(user);
    std::lock_guard<std::mutex> lock(self->mutex);
    if (level == CKPT_LOG_INFO) self->lines.push_back(message);
  }

  bool Has(const std::string& prefix) {
    std::lock_guard<std::mutex> lock(mutex);
    for (const std::string& line : lines) {
      if (line.rfind(prefix, 0) == 0) return true;
    }
    return false;
  }
};

// The last progress report of a save (the save thread's calls come after the caller's, never at once).
struct LastProgress {
  std::mutex mutex;
  int32_t phase = -1;
  uint64_t done = 0, total = 0;

  static void Report(void* user, int32_t phase, uint64_t done, uint64_t total) {
    auto* self = static_cast<LastProgress*>(user);
    std::lock_guard<std::mutex> lock(self->mutex);
    self->phase = phase;
    self->done = done;
    self->total = total;
  }
};

// The bytes and data files the manifest of `dir` credits to `rank`, from its chunks' file names (data/<rank>-*).
std::pair<uint64_t, uint64_t> WrittenBy(const Session& s, const std::string& dir, int rank) {
  ckpt_reader_t* reader = nullptr;
  s.Check(ckpt_reader_open(dir.c_str(), &reader, s.err), "reader");
  ckpt_checkpoint_info info = CKPT_CHECKPOINT_INFO_INIT;
  s.Check(ckpt_reader_info(reader, &info, s.err), "reader info");
  const std::string prefix = "data/" + std::to_string(rank) + "-";
  uint64_t bytes = 0;
  std::set<std::string> files;
  for (uint64_t t = 0; t < info.tensor_count; ++t) {
    ckpt_tensor_info tensor = CKPT_TENSOR_INFO_INIT;
    s.Check(ckpt_reader_tensor(reader, t, &tensor, s.err), "reader tensor");
    for (uint64_t c = 0; c < tensor.chunk_count; ++c) {
      ckpt_chunk_info chunk = CKPT_CHUNK_INFO_INIT;
      s.Check(ckpt_reader_chunk(reader, t, c, &chunk, s.err), "reader chunk");
      if (std::string(chunk.file).rfind(prefix, 0) != 0) continue;
      bytes += chunk.byte_length;
      files.insert(chunk.file);
    }
  }
  ckpt_reader_free(reader);
  return {bytes, files.size()};
}

void Expect(const Session& s, bool holds, const std::string& what) {
  if (!holds) Die(s.rank, what);
}

int RequestStats(const char* root) {
  InfoLines info;
  Session s(&InfoLines::Log, &info);
  const std::string dir = std::string(root) + "/stats";
  ckpt_state_t* state = nullptr;
  s.Check(ckpt_state_create(&state, s.err), "state");
  Buffers buffers;
  RegisterLayout(s, state, buffers, true);
  uint64_t registered = 0;
  for (const std::vector<float>& buffer : buffers.floats) registered += buffer.size() * sizeof(float);

  LastProgress progress;
  ckpt_save_options opts = CKPT_SAVE_OPTIONS_INIT;
  opts.progress = &LastProgress::Report;
  opts.progress_user = &progress;
  ckpt_request_t* request = nullptr;
  s.Check(ckpt_save(s.ctx, state, dir.c_str(), &opts, &request, s.err), "save");
  s.Check(ckpt_request_wait(request, 0, s.err), "save wait");
  ckpt_request_stats stats = CKPT_REQUEST_STATS_INIT;
  s.Check(ckpt_request_stats_get(request, &stats, s.err), "stats");
  ckpt_request_free(request);

  const auto [bytes, files] = WrittenBy(s, dir, s.rank);
  const std::string figures =
      "state " + std::to_string(stats.state_bytes) + ", to write " + std::to_string(stats.bytes_to_write) +
      ", written " + std::to_string(stats.bytes_written) + " in " + std::to_string(stats.files_written) +
      " files; the manifest credits " + std::to_string(bytes) + " bytes in " + std::to_string(files) + " files";
  Expect(s, stats.committed == 1, "not committed: " + figures);
  Expect(s, stats.state_bytes == registered, "state_bytes is not what this rank registered: " + figures);
  Expect(s,
         stats.bytes_to_write == bytes && stats.bytes_written == bytes && stats.bytes_staged == bytes &&
             stats.bytes_committed == bytes,
         "the bytes are not this rank's own: " + figures);
  Expect(s, stats.files_written == files, "the files are not this rank's own: " + figures);
  Expect(s, progress.phase == CKPT_PHASE_COMMITTED && progress.done == bytes && progress.total == bytes,
         "the last progress report is phase " + std::to_string(progress.phase) + ", " + std::to_string(progress.done) +
             " of " + std::to_string(progress.total) + "; " + figures);
  Expect(s, info.Has("saved '" + dir + "': "), "no INFO line for the committed save");

  s.Check(ckpt_load(s.ctx, state, dir.c_str(), nullptr, s.err), "load");
  Expect(s, info.Has("loaded '" + dir + "': "), "no INFO line for the load");
  ckpt_state_free(state);
  std::printf("request-stats: rank %d wrote %llu of its %llu bytes in %llu files (%.2f GB/s)\n", s.rank,
              static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(registered),
              static_cast<unsigned long long>(files),
              static_cast<double>(stats.bytes_written) / static_cast<double>(stats.total_ns));
  return 0;
}

}  // namespace
}  // namespace scenario

int main(int argc, char** argv) {
  using namespace scenario;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "request-stats" && argc == 3) return RequestStats(argv[2]);
  std::fprintf(stderr, "usage: ckpt_scenario_progress request-stats DIR (see scenario_progress.cc)\n");
  return 2;
}
