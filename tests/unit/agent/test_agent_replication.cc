// Replication between node agents (agent/replicator.h): two agents' stores and replicators in one process,
// each with a memory directory of its own, talking over UCX's TCP transport as agents on two nodes would; and the
// protocol fields and replication messages they exchange.
// ctest-labels: threaded
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/memory_store.h"
#include "agent/replication_files.h"
#include "agent/replication_wire.h"
#include "agent/replicator.h"
#include "collectives/agent/agent_protocol.h"
#include "io/file_io.h"
#include "tests/unit/agent/agent_replication_testing.h"

namespace ckpt::agent {
namespace {

using namespace std::chrono_literals;
using namespace replication_testing;
using coll::agent::PeerAgent;

TEST(AgentReplicationProtocolTest, NewFieldsSurviveTheRoundTrip) {
  MemoryCheckpoint c;
  c.name = "step-3";
  c.save_id = "save-9";
  c.node_index = 2;
  c.node_count = 4;
  c.own_files = {"4-0.bin", "5-0.bin"};
  c.replicated = false;
  c.replication_error = "node 'n3' (index 3) unreachable";
  Result<std::vector<MemoryCheckpoint>> list = coll::agent::DecodeCheckpoints(coll::agent::EncodeCheckpoints({c}));
  ASSERT_TRUE(list.ok()) << list.status().message();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ(list->front().save_id, "save-9");
  EXPECT_EQ(list->front().node_index, 2u);
  EXPECT_EQ(list->front().node_count, 4u);
  EXPECT_EQ(list->front().own_files, c.own_files);
  EXPECT_FALSE(list->front().replicated);
  EXPECT_EQ(list->front().replication_error, c.replication_error);

  coll::agent::Request request;
  request.op = coll::agent::Op::kPeers;
  request.peers = {PeerAgent{0, "a", std::string("\0addr", 5)}, PeerAgent{1, "b", "xyz"}};
  request.node_index = 1;
  request.replicas = 1;
  Result<coll::agent::Request> decoded = coll::agent::DecodeRequest(coll::agent::EncodeRequest(request));
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  ASSERT_EQ(decoded->peers.size(), 2u);
  EXPECT_EQ(decoded->peers[0].address, std::string("\0addr", 5));
  EXPECT_EQ(decoded->peers[1].node, "b");
  EXPECT_EQ(decoded->peers[1].node_index, 1u);
  EXPECT_EQ(decoded->replicas, 1u);

  coll::agent::Request fetch;
  fetch.op = coll::agent::Op::kFetch;
  fetch.checkpoint = c;
  fetch.files = {"MANIFEST", "3-0.bin"};
  Result<coll::agent::Request> fetch_back = coll::agent::DecodeRequest(coll::agent::EncodeRequest(fetch));
  ASSERT_TRUE(fetch_back.ok()) << fetch_back.status().message();
  EXPECT_EQ(fetch_back->files, fetch.files);
  EXPECT_EQ(fetch_back->checkpoint.name, c.name);

  coll::agent::Request reserve;
  reserve.op = coll::agent::Op::kReserve;
  reserve.name = "step-3.tmp-00000000deadbeef";
  reserve.bytes = 1 << 20;
  reserve.files = {"1-0.bin", "1-1.bin"};
  reserve.file_sizes = {700000, 348576};
  Result<coll::agent::Request> reserve_back = coll::agent::DecodeRequest(coll::agent::EncodeRequest(reserve));
  ASSERT_TRUE(reserve_back.ok()) << reserve_back.status().message();
  EXPECT_EQ(reserve_back->files, reserve.files);
  EXPECT_EQ(reserve_back->file_sizes, reserve.file_sizes);

  coll::agent::Request reassign;
  reassign.op = coll::agent::Op::kReassign;
  reassign.checkpoint.name = "step-2";
  reassign.checkpoint.node_index = 2;
  reassign.checkpoint.node_count = 3;
  reassign.checkpoint.own_files = {"0-1.bin", "1-0.bin"};
  reassign.checkpoint.save_id = "00000000deadbeef";
  Result<coll::agent::Request> reassign_back = coll::agent::DecodeRequest(coll::agent::EncodeRequest(reassign));
  ASSERT_TRUE(reassign_back.ok()) << reassign_back.status().message();
  EXPECT_EQ(reassign_back->op, coll::agent::Op::kReassign);
  EXPECT_EQ(reassign_back->checkpoint.node_index, 2u);
  EXPECT_EQ(reassign_back->checkpoint.node_count, 3u);
  EXPECT_EQ(reassign_back->checkpoint.own_files, reassign.checkpoint.own_files);
  EXPECT_EQ(reassign_back->checkpoint.save_id, reassign.checkpoint.save_id);
  std::string unknown = coll::agent::EncodeRequest(reassign);
  unknown[0] = static_cast<char>(static_cast<uint8_t>(coll::agent::Op::kReassign) + 1);
  EXPECT_EQ(coll::agent::DecodeRequest(unknown).status().code(), Code::kCorrupt) << "an operation past the last";

  coll::agent::Welcome welcome{"/dev/shm/x", 42, std::string("ucx\0address", 11)};
  Result<coll::agent::Welcome> back = coll::agent::DecodeWelcome(coll::agent::EncodeWelcome(welcome));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->replication_address, welcome.replication_address);
  EXPECT_EQ(back->budget_bytes, 42u);
}

TEST(AgentReplicationWireTest, AMessageOfAnotherJobOrWithAWrongProofIsRefused) {
  ReplicationMessage offer;
  offer.type = MessageType::kOffer;
  offer.job_id = "job-a";
  offer.checkpoint = "step-1";
  offer.chunk_bytes = 1 << 20;
  offer.files = {FileInfo{"MANIFEST", 10}, FileInfo{"0-0.bin", 20}};
  const std::string secret = "0123456789abcdef0123456789abcdef";
  const std::string signed_offer = EncodeReplicationMessage(offer, secret);
  ASSERT_TRUE(DecodeReplicationMessage(signed_offer, "job-a", secret).ok());
  EXPECT_EQ(DecodeReplicationMessage(signed_offer, "job-b", secret).status().code(), Code::kMismatch);
  EXPECT_EQ(DecodeReplicationMessage(signed_offer, "job-a", "another secret, long enough!!").status().code(),
            Code::kMismatch);
  EXPECT_EQ(DecodeReplicationMessage(EncodeReplicationMessage(offer, ""), "job-a", secret).status().code(),
            Code::kMismatch);
  std::string tampered = signed_offer;
  tampered[tampered.size() / 2] ^= 1;
  EXPECT_FALSE(DecodeReplicationMessage(tampered, "job-a", secret).ok());
  for (size_t cut = 0; cut < signed_offer.size(); cut += 7) {
    EXPECT_FALSE(DecodeReplicationMessage(signed_offer.substr(0, cut), "job-a", secret).ok()) << cut;
  }
}

TEST(AgentReplicationWireTest, FileAndCheckpointNamesOutsideTheCheckpointAreRefused) {
  for (const char* bad : {"../0-0.bin", ".0-0.bin", "a/0-0.bin", "0-0.txt", ".bin", "", "MANIFEST.bin/"}) {
    EXPECT_FALSE(ValidateReplicatedFileName(bad).ok()) << bad;
  }
  EXPECT_TRUE(ValidateReplicatedFileName("MANIFEST").ok());
  EXPECT_TRUE(ValidateReplicatedFileName("12-3.bin").ok());
  ReplicationMessage offer;
  offer.job_id = "job-a";
  offer.checkpoint = "..";
  offer.chunk_bytes = 1 << 20;
  EXPECT_FALSE(DecodeReplicationMessage(EncodeReplicationMessage(offer, ""), "job-a", "").ok());
  offer.checkpoint = "step-1";
  offer.files = {FileInfo{"../../etc/passwd", 1}};
  EXPECT_FALSE(DecodeReplicationMessage(EncodeReplicationMessage(offer, ""), "job-a", "").ok());
}

TEST_F(AgentReplicationTest, APushLandsByteIdenticalAndMarksTheCheckpointReplicated) {
  Node& a = AddNode("node-a");
  Node& b = AddNode("node-b");
  ASSERT_TRUE(a.replicator && b.replicator);
  Connect();
  const std::map<std::string, std::string> files_a = {
      {"0-0.bin", Pattern((5 << 20) + 12345, 1)}, {"1-0.bin", Pattern(777, 2)}, {"2-0.bin", ""}};
  WriteCheckpoint(a, files_a);
  WriteCheckpoint(b, {{"3-0.bin", Pattern(4096, 3)}});
  Complete(b, Checkpoint(1, {"3-0.bin"}));
  const uint64_t b_bytes_before = b.store->Find(kName)->bytes;
  Complete(a, Checkpoint(0, {"0-0.bin", "1-0.bin", "2-0.bin"}));
  EXPECT_FALSE(a.store->Find(kName)->replicated);
  a.replicator->Replicate(kName);

  EXPECT_EQ(ReplicationOutcome(a), "");
  for (const auto& [name, content] : files_a) {
    EXPECT_EQ(ReadAll(b.dir + "/" + kName + "/data/" + name), content) << name;
  }
  EXPECT_EQ(ReadAll(b.dir + "/" + kName + "/data/3-0.bin"), Pattern(4096, 3));
  // The replicas count against the receiver's budget, and no partial file is left.
  EXPECT_EQ(b.store->Find(kName)->bytes, b_bytes_before + files_a.at("0-0.bin").size() + 777);
  EXPECT_FALSE(io::PathExists(b.dir + "/" + kName + "/data/.0-0.bin.part"));
}

TEST_F(AgentReplicationTest, TheNextStepsReplicaIsWrittenIntoTheRecycledFilesOfTheOneBeforeByteIdentical) {
  Node& a = AddNode("node-a");
  Node& b = AddNode("node-b");
  ASSERT_TRUE(a.replicator && b.replicator);
  Connect();
  WriteCheckpoint(a, {{"0-0.bin", Pattern((3 << 20) + 5, 1)}, {"1-0.bin", Pattern(1 << 20, 2)}});
  WriteCheckpoint(b, {});
  Complete(b, Checkpoint(1, {}));
  Complete(a, Checkpoint(0, {"0-0.bin", "1-0.bin"}));
  a.replicator->Replicate(kName);
  ASSERT_EQ(ReplicationOutcome(a), "");

  // The next step on node b removes step 7, whose replicas become b's recycled files.
  const std::string next = "step-8";
  WriteCheckpoint(b, {}, "manifest of step 8", next);
  Complete(b, Checkpoint(1, {}, next));
  EXPECT_EQ(b.store->RecycledBytes(), (4u << 20) + 5);
  // One replica smaller than the file it is written into (which is cut to its size), one larger.
  const std::map<std::string, std::string> files = {{"0-0.bin", Pattern(2 << 20, 3)},
                                                    {"1-0.bin", Pattern((5 << 20) + 7, 4)}};
  WriteCheckpoint(a, files, "manifest of step 8", next);
  Complete(a, Checkpoint(0, {"0-0.bin", "1-0.bin"}, next));
  a.replicator->Replicate(next);
  ASSERT_EQ(ReplicationOutcome(a, 20s, next), "");

  for (const auto& [name, content] : files) {
    EXPECT_EQ(ReadAll(b.dir + "/" + next + "/data/" + name), content) << name;
  }
  EXPECT_EQ(b.store->RecycledBytes(), 0u) << "both recycled files were written into";
  EXPECT_EQ(b.store->Find(next)->bytes, std::string("manifest of step 8").size() + (7u << 20) + 7);
}

TEST_F(AgentReplicationTest, AFetchMakesACheckpointThePullerLacksWholeAndRegistersIt) {
  Node& a = AddNode("node-a");
  Node& b = AddNode("node-b");
  ASSERT_TRUE(a.replicator && b.replicator);
  Connect();
  const std::map<std::string, std::string> files = {{"0-0.bin", Pattern(3 << 20, 4)}, {"1-0.bin", Pattern(100, 5)}};
  WriteCheckpoint(a, files, "the manifest");
  Complete(a, Checkpoint(0, {"0-0.bin", "1-0.bin"}));

  MemoryCheckpoint wanted = Checkpoint(1, {});
  ASSERT_EQ(b.replicator->Fetch(wanted, {}).code(), Code::kInProgress);
  const Status fetched = FetchUntilDone(b, wanted);
  ASSERT_TRUE(fetched.ok()) << fetched.message();
  EXPECT_EQ(ReadAll(b.dir + "/" + kName + "/MANIFEST"), "the manifest");
  for (const auto& [name, content] : files) EXPECT_EQ(ReadAll(b.dir + "/" + kName + "/data/" + name), content);
  std::optional<MemoryCheckpoint> registered = b.store->Find(kName);
  ASSERT_TRUE(registered.has_value());
  EXPECT_TRUE(registered->replicated);
  EXPECT_TRUE(registered->own_files.empty());
  EXPECT_GE(registered->bytes, (3u << 20) + 100);
  Result<std::vector<std::string>> entries = io::ListDirectory(b.dir);
  ASSERT_TRUE(entries.ok());
  for (const std::string& entry : *entries) EXPECT_EQ(entry.find(".fetch-"), std::string::npos) << entry;
}

TEST_F(AgentReplicationTest, AFetchOfNamedFilesPullsThoseAndTheManifestOnlyAndThenMore) {
  Node& a = AddNode("node-a");
  Node& b = AddNode("node-b");
  ASSERT_TRUE(a.replicator && b.replicator);
  Connect();
  const std::map<std::string, std::string> files = {
      {"0-0.bin", Pattern(1 << 20, 11)}, {"1-0.bin", Pattern(300, 12)}, {"2-0.bin", Pattern(5000, 13)}};
  WriteCheckpoint(a, files, "the manifest");
  Complete(a, Checkpoint(0, {"0-0.bin", "1-0.bin", "2-0.bin"}));
  const std::string copy = b.dir + "/" + kName;

  const Status manifest_only = FetchUntilDone(b, Checkpoint(1, {}), {"MANIFEST"});
  ASSERT_TRUE(manifest_only.ok()) << manifest_only.message();
  EXPECT_EQ(ReadAll(copy + "/MANIFEST"), "the manifest");
  for (const auto& [name, content] : files) EXPECT_FALSE(io::PathExists(copy + "/data/" + name)) << name;
  ASSERT_TRUE(b.store->Find(kName).has_value());

  // Asked for other files, the node pulls those into the copy it now holds, and nothing else.
  const Status one_more = FetchUntilDone(b, Checkpoint(1, {}), {"1-0.bin"});
  ASSERT_TRUE(one_more.ok()) << one_more.message();
  EXPECT_EQ(ReadAll(copy + "/data/1-0.bin"), files.at("1-0.bin"));
  EXPECT_FALSE(io::PathExists(copy + "/data/0-0.bin"));
  EXPECT_FALSE(io::PathExists(copy + "/data/2-0.bin"));

  const Status unknown = FetchUntilDone(b, Checkpoint(1, {}), {"7-0.bin"});
  EXPECT_EQ(unknown.code(), Code::kPeerFailed) << unknown.message();
  EXPECT_NE(unknown.message().find("no peer holds '7-0.bin'"), std::string::npos) << unknown.message();
  EXPECT_EQ(b.replicator->Fetch(Checkpoint(1, {}), {"../0-0.bin"}).code(), Code::kInvalidArgument);
}

TEST_F(AgentReplicationTest, APushToAPeerWithoutTheCheckpointDirectoryFailsNamingThePeer) {
  Node& a = AddNode("node-a");
  Node& b = AddNode("node-b");
  ASSERT_TRUE(a.replicator && b.replicator);
  Connect();
  WriteCheckpoint(a, {{"0-0.bin", Pattern(1000, 6)}});
  Complete(a, Checkpoint(0, {"0-0.bin"}));
  a.replicator->Replicate(kName);
  const std::string error = ReplicationOutcome(a);
  EXPECT_NE(error.find("node 'node-b' (index 1)"), std::string::npos) << error;
  EXPECT_NE(error.find("no memory checkpoint directory"), std::string::npos) << error;
  EXPECT_FALSE(a.store->Find(kName)->replicated);
}

TEST_F(AgentReplicationTest, APeerThatIsGoneFailsWithinTheTimeout) {
  Node& a = AddNode("node-a", 1ull << 30, kJob, "", 1500ms);
  Node& b = AddNode("node-b");
  ASSERT_TRUE(a.replicator && b.replicator);
  Connect();
  b.replicator.reset();
  WriteCheckpoint(a, {{"0-0.bin", Pattern(2 << 20, 7)}});
  Complete(a, Checkpoint(0, {"0-0.bin"}));
  const auto start = std::chrono::steady_clock::now();
  a.replicator->Replicate(kName);
  const std::string error = ReplicationOutcome(a, 10s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 8s);
  EXPECT_NE(error.find("node 'node-b'"), std::string::npos) << error;
}

TEST_F(AgentReplicationTest, APushWithoutTheJobsSecretPlacesNothing) {
  const std::string secret = "0123456789abcdef0123456789abcdef";
  Node& a = AddNode("node-a", 1ull << 30, kJob, "", 1500ms);
  Node& b = AddNode("node-b", 1ull << 30, kJob, secret);
  ASSERT_TRUE(a.replicator && b.replicator);
  // a has no secret, b has the job's: b drops a's messages (another job's are dropped alike, see the wire test).
  Connect();
  PushOneFile(a, b, 1000, 8);
  EXPECT_NE(ReplicationOutcome(a, 10s), "");
  EXPECT_FALSE(io::PathExists(b.dir + "/" + kName + "/data/0-0.bin"));
  std::lock_guard<std::mutex> lock(b.log_mu);
  bool dropped = false;
  for (const std::string& line : b.log) dropped |= line.find("proof of the job's secret") != std::string::npos;
  EXPECT_TRUE(dropped);
}

TEST_F(AgentReplicationTest, APushOverTheReceiversBudgetIsRefused) {
  Node& a = AddNode("node-a");
  Node& b = AddNode("node-b", 1 << 20);
  ASSERT_TRUE(a.replicator && b.replicator);
  Connect();
  PushOneFile(a, b, 2 << 20, 9);
  const std::string error = ReplicationOutcome(a);
  EXPECT_NE(error.find("node 'node-b'"), std::string::npos) << error;
  EXPECT_NE(error.find("budget"), std::string::npos) << error;
  EXPECT_FALSE(io::PathExists(b.dir + "/" + kName + "/data/0-0.bin"));
}

// A transfer of 128 MiB in 1 MiB chunks that has begun: the receiver accepted the offer (its hidden file exists),
// and the rest takes tens of milliseconds at least, so that a node dropped now is dropped mid-transfer.
constexpr size_t kLargeFileBytes = 128u << 20;
std::string PartFileOf(const Node& node) { return PartialFilePath(node.dir + "/" + kName, "0-0.bin"); }

bool AwaitPartFile(const Node& receiver) {
  return Eventually([&] { return io::PathExists(PartFileOf(receiver)); }, 10s, 200us);
}

bool Logged(Node& node, const std::string& text, std::chrono::milliseconds within) {
  return Eventually(
      [&] {
        std::lock_guard<std::mutex> lock(node.log_mu);
        return std::any_of(node.log.begin(), node.log.end(),
                           [&](const std::string& line) { return line.find(text) != std::string::npos; });
      },
      within);
}

// After a sender died mid-push: the receiver logs the failed receive and, once the receives still posted are
// cancelled, its hidden file and the transfer's reservation are gone (another transfer of the same size fits in the
// budget again), and no file of the replica is in place.
void ExpectTheFailedReceiveLeftNothing(Node& receiver) {
  EXPECT_TRUE(Logged(receiver, "receiving files of '" + std::string(kName) + "' failed", 10s));
  const bool freed = Eventually(
      [&] {
        return !io::PathExists(PartFileOf(receiver)) &&
               receiver.store->ReserveIncoming(99, kName, kLargeFileBytes).ok();
      },
      10s);
  EXPECT_TRUE(freed) << "the hidden file or the failed transfer's reservation is left";
  EXPECT_FALSE(io::PathExists(receiver.dir + "/" + kName + "/data/0-0.bin"));
  receiver.store->ReleaseIncoming(99);
}

TEST_F(AgentReplicationTest, ASenderThatDiesMidTransferLeavesNoPartialFileAndFreesTheReceiversBudget) {
  Node& a = AddNode("node-a");
  Node& b = AddNode("node-b", kLargeFileBytes + (kLargeFileBytes / 2), kJob, "", 1500ms);
  ASSERT_TRUE(a.replicator && b.replicator);
  Connect();
  PushOneFile(a, b, kLargeFileBytes, 10);
  ASSERT_TRUE(AwaitPartFile(b)) << "node-b never accepted the push";
  a.replicator.reset();

  ExpectTheFailedReceiveLeftNothing(b);
}

// The same while the replica is received straight into the mapping of a recycled file: the receives still posted
// into it are cancelled before it is unmapped, and the file and the reservation go.
TEST_F(AgentReplicationTest, ASenderThatDiesWhileARecycledFileIsFilledLeavesNoPartialFile) {
  Node& a = AddNode("node-a");
  Node& b = AddNode("node-b", 3 * kLargeFileBytes, kJob, "", 1500ms);
  ASSERT_TRUE(a.replicator && b.replicator);
  Connect();
  const std::string before = "step-6";
  WriteCheckpoint(a, {{"0-0.bin", Pattern(kLargeFileBytes, 9)}}, "manifest of step 6", before);
  WriteCheckpoint(b, {}, "manifest of step 6", before);
  Complete(b, Checkpoint(1, {}, before));
  Complete(a, Checkpoint(0, {"0-0.bin"}, before));
  a.replicator->Replicate(before);
  ASSERT_EQ(ReplicationOutcome(a, 20s, before), "");
  // b's next step removes step 6, whose replica becomes the recycled file that step 7's is received into.
  WriteCheckpoint(b, {});
  Complete(b, Checkpoint(1, {}));
  ASSERT_EQ(b.store->RecycledBytes(), kLargeFileBytes);
  WriteCheckpoint(a, {{"0-0.bin", Pattern(kLargeFileBytes, 10)}});
  Complete(a, Checkpoint(0, {"0-0.bin"}));
  a.replicator->Replicate(kName);
  ASSERT_TRUE(AwaitPartFile(b)) << "node-b never accepted the push";
  EXPECT_EQ(b.store->RecycledBytes(), 0u) << "the replica is not received into the recycled file";
  a.replicator.reset();

  ExpectTheFailedReceiveLeftNothing(b);
}

TEST_F(AgentReplicationTest, AReceiverThatDiesMidTransferFailsThePushNamingIt) {
  Node& a = AddNode("node-a", 1ull << 30, kJob, "", 1500ms);
  Node& b = AddNode("node-b");
  ASSERT_TRUE(a.replicator && b.replicator);
  Connect();
  PushOneFile(a, b, kLargeFileBytes, 11);
  ASSERT_TRUE(AwaitPartFile(b)) << "node-b never accepted the push";
  b.replicator.reset();

  const std::string error = ReplicationOutcome(a, 10s);
  EXPECT_NE(error.find("node 'node-b'"), std::string::npos) << error;
  EXPECT_FALSE(a.store->Find(kName)->replicated);
}

// Regression: UCX 1.13 aborted the process when an agent stopped while a peer's connection handshake was under way
// (ucp_worker_destroy with a handshake reply still queued). Each round, node A offers node B a file and B stops
// within a few milliseconds, while the two connect.
TEST_F(AgentReplicationTest, AnAgentThatStopsWhileAPeerConnectsDoesNotAbortTheProcess) {
  for (int round = 0; round < 16; ++round) {
    Node& a = AddNode("a-" + std::to_string(round));
    Node& b = AddNode("b-" + std::to_string(round));
    ASSERT_TRUE(a.replicator && b.replicator);
    const std::vector<PeerAgent> peers = {{0, a.name, a.replicator->address()}, {1, b.name, b.replicator->address()}};
    a.replicator->SetPeers(peers, 0, 1);
    b.replicator->SetPeers(peers, 1, 1);
    WriteCheckpoint(a, {{"0-0.bin", Pattern(64 << 10, static_cast<unsigned>(round))}});
    WriteCheckpoint(b, {});
    Complete(a, Checkpoint(0, {"0-0.bin"}));
    a.replicator->Replicate(kName);
    std::this_thread::sleep_for(std::chrono::microseconds(500 * (round % 8)));
    b.replicator.reset();
  }
}

// The receiver's memory (its tmpfs) fills up although its budget had room: the push fails naming the receiver and
// the cause, and the receiver keeps no partial file.
TEST_F(AgentReplicationTest, AReceiverWhoseMemoryFillsUpFailsThePushAndKeepsNoPartialFile) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  ASSERT_NO_FATAL_FAILURE(MountSmallMemory("node-b", "size=4m"));
  Node& a = AddNode("node-a");
  Node& b = AddNode("node-b");
  ASSERT_TRUE(a.replicator && b.replicator);
  Connect();
  PushOneFile(a, b, 8 << 20, 12);

  const std::string error = ReplicationOutcome(a);
  EXPECT_NE(error.find("node 'node-b'"), std::string::npos) << error;
  EXPECT_NE(error.find(std::strerror(ENOSPC)), std::string::npos) << error;
  EXPECT_FALSE(a.store->Find(kName)->replicated);
  (void)Eventually([&] { return !io::PathExists(PartFileOf(b)); }, 10s);
  EXPECT_FALSE(io::PathExists(PartFileOf(b)));
  EXPECT_FALSE(io::PathExists(b.dir + "/" + kName + "/data/0-0.bin"));
}

// The bytes the file system holding `path` has free.
uint64_t FreeBytes(const std::string& path) {
  struct statvfs fs;
  return statvfs(path.c_str(), &fs) == 0 ? static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize : 0;
}

// A replica larger than the recycled file it is received into: the file must grow, in memory that is full. The push
// must fail, naming the lack of room, instead of the receiver filling a mapping whose missing pages raise SIGBUS.
TEST_F(AgentReplicationTest, AReceiverWithoutRoomToGrowARecycledFileFailsThePushAndLives) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  ASSERT_NO_FATAL_FAILURE(MountSmallMemory("node-b", "size=6m"));
  Node& a = AddNode("node-a");
  Node& b = AddNode("node-b");
  ASSERT_TRUE(a.replicator && b.replicator);
  Connect();
  WriteCheckpoint(a, {{"0-0.bin", Pattern(1 << 20, 13)}});
  WriteCheckpoint(b, {});
  Complete(b, Checkpoint(1, {}));
  Complete(a, Checkpoint(0, {"0-0.bin"}));
  a.replicator->Replicate(kName);
  ASSERT_EQ(ReplicationOutcome(a), "");
  const std::string next = "step-8";
  WriteCheckpoint(b, {}, "manifest of step 8", next);
  Complete(b, Checkpoint(1, {}, next));
  ASSERT_EQ(b.store->RecycledBytes(), 1u << 20) << "step 7's replica is not b's recycled file";

  WriteCheckpoint(a, {{"0-0.bin", Pattern(8 << 20, 14)}}, "manifest of step 8", next);
  Complete(a, Checkpoint(0, {"0-0.bin"}, next));
  a.replicator->Replicate(next);
  const std::string error = ReplicationOutcome(a, 20s, next);
  EXPECT_NE(error.find("node 'node-b'"), std::string::npos) << error;
  EXPECT_NE(error.find(std::strerror(ENOSPC)), std::string::npos) << error;
  EXPECT_FALSE(io::PathExists(b.dir + "/" + next + "/data/0-0.bin"));
  // The receiver removes its hidden file once the failure is sent, and its writer thread then lets go of the
  // recycled file's mapping, which holds the file's pages until then: b's memory comes back soon, not at once.
  const std::string hidden = PartialFilePath(b.dir + "/" + next, "0-0.bin");
  EXPECT_TRUE(Eventually([&] { return !io::PathExists(hidden); }, 10s)) << hidden << " stays";
  EXPECT_TRUE(Eventually([&] { return FreeBytes(b.dir) >= (1u << 20); }, 10s)) << FreeBytes(b.dir) << " bytes free";

  // And b still receives: the next step's replica, which fits, lands whole.
  const std::string last = "step-9";
  const std::string fits = Pattern(512 << 10, 15);
  WriteCheckpoint(b, {}, "manifest of step 9", last);
  Complete(b, Checkpoint(1, {}, last));
  WriteCheckpoint(a, {{"0-0.bin", fits}}, "manifest of step 9", last);
  Complete(a, Checkpoint(0, {"0-0.bin"}, last));
  a.replicator->Replicate(last);
  ASSERT_EQ(ReplicationOutcome(a, 20s, last), "");
  EXPECT_EQ(ReadAll(b.dir + "/" + last + "/data/0-0.bin"), fits);
}

TEST_F(AgentReplicationTest, ASingleNodeSaveIsReplicatedAtCompletion) {
  Node& a = AddNode("node-a");
  WriteCheckpoint(a, {{"0-0.bin", "x"}});
  MemoryCheckpoint c = Checkpoint(0, {});
  c.node_count = 1;
  Complete(a, c);
  EXPECT_TRUE(a.store->Find(kName)->replicated);
  EXPECT_EQ(a.store->Find(kName)->own_files, std::vector<std::string>{"0-0.bin"});
}

}  // namespace
}  // namespace ckpt::agent
