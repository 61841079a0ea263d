// A simulated step's messages kept in files, indexed by receiver, instead of in memory: bench/scale holds one rank's
// inbox at a time, so that the memory of a simulation of 32,768 or 65,536 ranks is that of its largest inbox and
// of the manifest, not of every message the job sends in a step (16 GB at 16,384 ranks when they were all held).
// A step runs in worker processes (RunStep), each spooling the messages of its ranks to a file of its own, which the
// step's spool then adopts.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/scale_common.h"
#include "common/unique_fd.h"

namespace ckpt::bench {

class Spool {
 public:
  // A new, empty spool in the file at `path` (replaced if it exists; removed with the files it adopted when the
  // spool goes), for messages to `ranks` receivers.
  Spool(std::string path, int ranks);
  ~Spool();
  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;

  const std::string& path() const { return paths_.front(); }
  void Add(int from, int to, std::string_view message);
  // Every message to `to`. The spool keeps them: a later call returns them again.
  Messages Inbox(int to);
  // Counts every message into `bytes`, as the step's all-to-all moves it.
  void CountInto(ControlBytes* bytes) const;

  // For a worker: writes the index of this spool's own file beside it, for Adopt, and leaves both in place.
  void Keep();
  // Takes in the messages of a spool a worker kept at `path`.
  void Adopt(const std::string& path);

 private:
  struct Entry {
    uint64_t offset;
    uint32_t size;
    int32_t from;
    int32_t to;
    uint32_t file;  // index into files_
  };
  void Flush();
  void Index(const Entry& entry);

  std::vector<std::string> paths_;  // this spool's own file first, then the adopted ones
  std::vector<UniqueFd> files_;
  bool kept_ = false;
  std::string pending_;  // added and not yet written to the own file: writes go out in large pieces
  uint64_t end_ = 0;     // the own file's length once pending_ is written
  std::vector<std::vector<Entry>> by_receiver_;
};

// What one rank's share of a step gives back besides its messages: its seconds and up to two counts.
struct RankResult {
  double seconds = 0;
  double counts[2] = {0, 0};
};

// Runs `work(rank, out)` for every rank of `ranks` in `workers` forked processes (rank r in worker r % workers, in
// increasing order), each adding its ranks' messages to a spool of its own that `into` adopts; returns each rank's
// result. A worker that fails ends the simulation.
std::vector<RankResult> RunStep(int ranks, int workers, const std::function<RankResult(int rank, Spool& out)>& work,
                                Spool& into);

}  // namespace ckpt::bench
