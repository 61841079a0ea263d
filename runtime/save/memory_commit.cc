#include "runtime/save/memory_commit.h"

#include "io/durable_publish.h"
#include "io/file_io.h"
#include "runtime/format/manifest.h"

namespace ckpt::runtime {
namespace {

// A leader other than rank 0: its node's copy, whole and in place under the checkpoint's name.
Result<std::vector<std::string>> PublishOnNode(const CommitInputs& commit, const std::string& manifest) {
  ASSIGN_OR_RETURN(std::vector<std::string> own, OwnDataFiles(commit.tmp_dir));
  RETURN_IF_ERROR(io::MakeDirectories(io::JoinPath(commit.tmp_dir, kDataDirName)));
  RETURN_IF_ERROR(io::WriteFileDurably(io::JoinPath(commit.tmp_dir, kManifestName), manifest.data(), manifest.size()));
  RETURN_IF_ERROR(io::PublishDirectory(commit.tmp_dir, {kDataDirName}, commit.path));
  return own;
}

}  // namespace

std::string NodesRoundId(const std::string& save_id) { return save_id + "-nodes"; }

Result<std::vector<std::string>> OwnDataFiles(const std::string& tmp_dir) {
  const std::string data = io::JoinPath(tmp_dir, kDataDirName);
  if (!io::IsDirectory(data)) return std::vector<std::string>();
  return io::ListDirectory(data);
}

Status CommitAcrossNodes(CommitChannel& channel, const CommitInputs& commit, Status committed,
                         const std::vector<std::string>& own_files, bool* second_awaited) {
  std::string manifest;
  if (committed.ok()) {
    Result<std::string> read = io::ReadWholeFile(commit.path, kManifestName, kMaxManifestBytes);
    if (read.ok()) manifest = std::move(read).value();
    committed = read.status();
  }
  const Status first = channel.PostOutcome(commit.save_id, committed, manifest);
  *second_awaited = first.ok() && committed.ok();
  Status outcome = committed.ok() ? first : committed;
  const std::string round = NodesRoundId(commit.save_id);
  if (outcome.ok()) outcome = channel.PostReport(round, 0, Status::Ok(), {});
  if (outcome.ok()) outcome = channel.CollectReports(round).status();
  if (outcome.ok()) outcome = commit.announce(own_files);
  if (!outcome.ok() && committed.ok()) (void)io::RemoveTree(commit.path);
  return outcome;
}

Status FollowCommitAcrossNodes(CommitChannel& channel, const CommitInputs& commit, int rank) {
  std::string manifest;
  RETURN_IF_ERROR(channel.AwaitOutcome(commit.save_id, &manifest));
  Status published;
  std::vector<std::string> own_files;
  if (commit.memory_nodes.leader) {
    Result<std::vector<std::string>> own = PublishOnNode(commit, manifest);
    published = own.status().WithContext("node " + std::to_string(commit.memory_nodes.node_index));
    if (own.ok()) own_files = std::move(own).value();
  }
  const std::string round = NodesRoundId(commit.save_id);
  Status outcome = channel.PostReport(round, rank, published, {});
  if (outcome.ok()) outcome = channel.AwaitOutcome(round, nullptr);
  if (!published.ok()) {
    (void)io::RemoveTree(commit.tmp_dir);
    return outcome.ok() ? published : outcome;
  }
  if (!commit.memory_nodes.leader) return outcome;
  if (outcome.ok()) outcome = commit.announce(own_files);
  if (!outcome.ok()) (void)io::RemoveTree(commit.path);
  return outcome;
}

}  // namespace ckpt::runtime
