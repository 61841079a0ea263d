#include "runtime/load/read_strategy.h"

#include <sys/statfs.h>

#include <algorithm>
#include <array>

#include "common/settings.h"
#include "io/s3/s3_client.h"

namespace ckpt::runtime {
namespace {

// statfs f_type of the file systems whose storage lies beyond the node (linux/magic.h and the vendors' own).
constexpr std::array<int64_t, 16> kRemoteFileSystems = {
    0x6969,      // NFS
    0x517B,      // SMB
    0xFF534D42,  // CIFS
    0xFE534D42,  // SMB2
    0x0BD00BD0,  // Lustre
    0x47504653,  // GPFS (IBM Storage Scale)
    0x00C36400,  // CephFS
    0x65735546,  // FUSE (s3fs, gcsfuse, virtiofs, ...)
    0x01021997,  // 9p
    0x5346414F,  // AFS
    0x6B414653,  // kAFS
    0x73757245,  // Coda
    0x564C,      // NCP
    0x20030528,  // OrangeFS / PVFS2
    0x19830326,  // BeeGFS
    0x01161970,  // GFS2
};

}  // namespace

ReadStrategy ChooseLoadReads(const ReadStrategyInputs& in) {
  if (!in.exchanges) {
    return {LoadReads::kOwn, in.setting == LoadReadsSetting::kOnce
                                 ? "CKPT_LOAD_READS=once without a transport: every rank reads its own pieces"
                                 : ""};
  }
  if (!in.files_everywhere) {
    return {LoadReads::kOnce, in.setting == LoadReadsSetting::kOwn
                                  ? "CKPT_LOAD_READS=own, but the memory copy's files lie on some nodes only: read once"
                                  : ""};
  }
  if (in.setting != LoadReadsSetting::kAuto) {
    return {in.setting == LoadReadsSetting::kOwn ? LoadReads::kOwn : LoadReads::kOnce, ""};
  }
  const bool own = in.one_node && in.storage_local &&
                   AmplificationMilli(in.own_bytes, in.needed_bytes) <= kOwnReadsMaxAmplificationMilli;
  return {own ? LoadReads::kOwn : LoadReads::kOnce, ""};
}

uint64_t AmplificationMilli(uint64_t read, uint64_t distinct) {
  if (distinct == 0) return 1000;
  return static_cast<uint64_t>(static_cast<long double>(read) * 1000 / distinct + 0.5L);
}

Result<LoadReadsSetting> LoadReadsFromEnv() {
  const std::string name = settings::StringFromEnv(settings::kLoadReadsVar);
  if (name.empty() || name == "auto") return LoadReadsSetting::kAuto;
  if (name == "once") return LoadReadsSetting::kOnce;
  if (name == "own") return LoadReadsSetting::kOwn;
  return InvalidArgument(std::string(settings::kLoadReadsVar) + "='" + name + "': expected auto, once or own");
}

const char* LoadReadsName(LoadReads reads) { return reads == LoadReads::kOwn ? "own reads" : "read once + exchange"; }

bool IsLocalFileSystem(int64_t statfs_type) {
  const int64_t type = statfs_type & 0xFFFFFFFF;  // f_type is signed on some ABIs: CIFS's magic would be negative
  return std::find(kRemoteFileSystems.begin(), kRemoteFileSystems.end(), type) == kRemoteFileSystems.end();
}

bool StorageIsLocal(const std::string& dir) {
  if (s3::IsS3Url(dir)) return false;
  struct statfs fs;
  return statfs(dir.c_str(), &fs) == 0 && IsLocalFileSystem(static_cast<int64_t>(fs.f_type));
}

uint64_t OwnReadBytes(const std::vector<ChunkFetch>& fetches) {
  uint64_t bytes = 0;
  for (const ChunkFetch& f : fetches) {
    const auto [begin, end] = NeededBlocks(f);
    bytes += end - begin;
  }
  return bytes;
}

}  // namespace ckpt::runtime
