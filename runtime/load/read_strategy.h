// How a load reads its tensors, chosen once per load and the same on every rank (rank 0 decides it in
// load_agreement.h from what every rank asks): read once + exchange (every needed stored block read by one rank, the
// pieces exchanged over the transport) or own reads (every rank reads the whole checksum blocks its own pieces need,
// with no planning collectives and no exchange rounds). The rule is ChooseLoadReads; include/ckpt.h documents it
// beside ckpt_load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/format/manifest.h"
#include "runtime/load/chunk_fetcher.h"

namespace ckpt::runtime {

// Numbered as CKPT_LOAD_READS_*.
enum class LoadReads : int32_t { kOnce = 1, kOwn = 2 };

// CKPT_LOAD_READS: auto (default), once or own.
enum class LoadReadsSetting : int32_t { kAuto = 0, kOnce = 1, kOwn = 2 };

// Own reads are chosen by AUTO only while they read at most this much more than read once would (× 1000): no more,
// bar the rounding of pieces to whole checksum blocks.
inline constexpr uint64_t kOwnReadsMaxAmplificationMilli = 1100;

// What rank 0 knows of the job when it chooses.
struct ReadStrategyInputs {
  LoadReadsSetting setting = LoadReadsSetting::kAuto;
  bool exchanges = false;         // every rank has a transport to exchange pieces over
  bool files_everywhere = false;  // every rank may read every data file (no memory copy split among the nodes)
  bool one_node = false;          // every rank runs on the same node
  bool storage_local = false;     // the checkpoint is on storage local to the node, on every rank
  uint64_t own_bytes = 0;         // what own reads would read, all ranks together
  uint64_t needed_bytes = 0;      // the stored bytes of the tensors any rank asked for
};

// The strategy, and why where it is not what the setting asked for (empty otherwise): own reads where there is no
// transport or the setting forces them; read once where the setting forces it or files lie on some ranks only;
// under AUTO own reads only on one node, local storage, and an estimated amplification within the threshold.
struct ReadStrategy {
  LoadReads reads = LoadReads::kOnce;
  std::string fallback;  // set where a forced setting could not be followed
};
ReadStrategy ChooseLoadReads(const ReadStrategyInputs& in);

// The read amplification (× 1000) of reading `read` bytes for `distinct` needed ones; 1000 when nothing is needed.
uint64_t AmplificationMilli(uint64_t read, uint64_t distinct);

// CKPT_LOAD_READS of this process; an invalid value is kInvalidArgument naming the variable.
Result<LoadReadsSetting> LoadReadsFromEnv();

// "read once + exchange" or "own reads", for the load's INFO line.
const char* LoadReadsName(LoadReads reads);

// Whether a file system of this statfs type is local to the node (a block device's or memory's): not one of the
// network or cluster file systems (NFS, SMB/CIFS, Lustre, GPFS, CephFS, FUSE, 9p, ...), whose storage every node
// shares and where reading each byte once matters most.
bool IsLocalFileSystem(int64_t statfs_type);

// Whether the checkpoint at `dir` lies on storage local to this node: not an s3:// URL, and a local file system.
bool StorageIsLocal(const std::string& dir);

// The bytes FetchChunks reads for `fetches`: for each chunk, the whole checksum blocks from the first its consumers
// need to the last.
uint64_t OwnReadBytes(const std::vector<ChunkFetch>& fetches);

}  // namespace ckpt::runtime
