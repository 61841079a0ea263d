// The files of a memory checkpoint as replication moves them: mapped for sending straight from shared memory,
// written chunk by chunk into a hidden ".part" file that is renamed into place once whole, and listed for a peer
// that fetches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "agent/replication_wire.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "io/file_mapping.h"

namespace ckpt::agent {

// A regular file (links are not followed), open for sending; `*size` is its size.
Result<UniqueFd> OpenForSending(const std::string& path, uint64_t* size);

// `path` sized to `size` and open for reading and writing (so that it can be mapped for filling): created afresh (an
// older one is replaced), or, `recycled`, the file MemoryStore::TakeRecycled moved there, whose pages are written over.
Result<UniqueFd> CreatePartFile(const std::string& path, uint64_t size, bool recycled);
// The part file `fd` (at `path`), already sized to `size`, mapped for receiving into where every page of it exists
// (a recycled file no smaller than the replica, without holes); otherwise an empty mapping, and the file is filled
// through writes: a mapping's missing pages are allocated one fault at a time, on the receiving thread, and a fault
// that finds memory full raises SIGBUS where a write returns ENOSPC.
Result<io::FileMapping> MapIfAllocated(int fd, const std::string& path, uint64_t size);
// Whether the pages of the first `size` bytes of the file open as `fd` all exist, as MapIfAllocated asks.
bool HoldsAllPages(int fd, uint64_t size);
// Writes `size` bytes of `data` at `offset` of `fd` (the file at `path`, for messages).
Status WriteFully(int fd, const char* data, uint64_t size, uint64_t offset, const std::string& path);

// Where `file` (ValidateReplicatedFileName) lives inside the checkpoint directory `dir`, and the hidden name it is
// received under.
std::string ReplicatedFilePath(const std::string& dir, const std::string& file);
std::string PartialFilePath(const std::string& dir, const std::string& file);

// The files of checkpoint directory `dir` that replication moves: its MANIFEST and its data/*.bin, regular files
// only; empty when `dir` does not exist.
std::vector<FileInfo> HeldFiles(const std::string& dir);

}  // namespace ckpt::agent
