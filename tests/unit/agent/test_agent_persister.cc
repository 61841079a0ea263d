// Writing a memory checkpoint to storage (agent/persister.h): the copy is committed whole, and only the
// data files the agent itself listed, regular files reached without links, are copied.
// ctest-labels: threaded
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "agent/persister.h"
#include "io/file_io.h"
#include "runtime/format/manifest.h"
#include "tests/unit/support/temp_dir.h"
#include "tests/unit/support/test_pattern.h"

namespace ckpt::agent {
namespace {

using ckpt::testing::Pattern;

constexpr std::chrono::milliseconds kWait{5000};

class AgentPersisterTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    memory_ = Path("memory");
    ASSERT_TRUE(io::MakeDirectories(memory_ + "/ck/data").ok());
    std::ofstream(memory_ + "/ck/MANIFEST") << "manifest";
    std::ofstream(memory_ + "/ck/data/0-0.bin") << std::string(100000, 'd');
    checkpoint_.name = "ck";
    checkpoint_.storage_path = Path("storage/ck");
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  // The storage path was never created, nor anything beside it.
  void ExpectNothingOnStorage() {
    Result<std::vector<std::string>> left = io::ListDirectory(Path("storage"));
    EXPECT_TRUE(!left.ok() || left->empty()) << "left: " << left->front();
  }

  std::string memory_;
  MemoryCheckpoint checkpoint_;
};

TEST_F(AgentPersisterTest, CopiesTheCheckpointAndCommitsIt) {
  Result<PersistReport> report = PersistCheckpoint(memory_, checkpoint_, kWait);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->bytes, 100008u);
  EXPECT_FALSE(report->found_committed);
  EXPECT_EQ(Read(checkpoint_.storage_path + "/MANIFEST"), "manifest");
  EXPECT_EQ(Read(checkpoint_.storage_path + "/data/0-0.bin"), std::string(100000, 'd'));
  EXPECT_EQ(io::ListDirectory(Path("storage")).value(), std::vector<std::string>{"ck"});
}

// The direct copy writes aligned 8 MiB pieces and leaves the unaligned tail to an ordinary write; tmpfs takes no
// direct writes, so a storage path there goes through the fallback. Both must give every byte back.
TEST_F(AgentPersisterTest, CopiesDataFilesOfEverySizeByteForByteOnADiskAndOnTmpfs) {
  const std::vector<size_t> sizes = {0, 1, 4095, 4096, 4097, (size_t{8} << 20) * 2 + 12345};
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string data = Pattern(sizes[i], static_cast<uint32_t>(i));
    ASSERT_TRUE(
        io::WriteFileDurably(memory_ + "/ck/data/1-" + std::to_string(i) + ".bin", data.data(), data.size()).ok());
  }
  const testing::TempDir shm("agent-persist", "/dev/shm");
  for (const std::string& storage : {Path("storage/ck"), shm.Path("ck")}) {
    checkpoint_.storage_path = storage;
    Result<PersistReport> report = PersistCheckpoint(memory_, checkpoint_, kWait);
    ASSERT_TRUE(report.ok()) << storage << ": " << report.status().message();
    for (size_t i = 0; i < sizes.size(); ++i) {
      EXPECT_EQ(Read(storage + "/data/1-" + std::to_string(i) + ".bin"), Pattern(sizes[i], static_cast<uint32_t>(i)))
          << storage << ", a file of " << sizes[i] << " bytes";
    }
  }
}

// Storage that fills up during the direct copy (a small ext4, which takes O_DIRECT writes): the persist fails as
// kNoSpace naming the data file it could not write (the small one or the large one: they are copied at once), and
// nothing is left at or beside the storage path.
TEST_F(AgentPersisterTest, AFullDiskFailsTheDirectCopyAndLeavesNothing) {
  const std::string image = Path("small.img"), disk = Path("disk");
  ASSERT_TRUE(io::MakeDirectories(disk).ok());
  const std::string make = "truncate -s 8M " + image + " && mkfs.ext4 -q -F " + image + " >/dev/null 2>&1 && " +
                           "mount -o loop " + image + " " + disk + " 2>/dev/null";
  if (std::system(make.c_str()) != 0) GTEST_SKIP() << "cannot make and mount a small ext4 to fill; needs root";
  struct Unmount {
    const std::string& path;
    ~Unmount() { (void)std::system(("umount " + path).c_str()); }
  } unmount{disk};
  const std::string data = Pattern(size_t{16} << 20, 5);
  ASSERT_TRUE(io::WriteFileDurably(memory_ + "/ck/data/1-0.bin", data.data(), data.size()).ok());
  checkpoint_.storage_path = disk + "/ck";
  Result<PersistReport> report = PersistCheckpoint(memory_, checkpoint_, kWait);
  ASSERT_EQ(report.status().code(), Code::kNoSpace) << report.status().message();
  EXPECT_NE(report.status().message().find(".bin'"), std::string::npos) << report.status().message();
  EXPECT_EQ(io::ListDirectory(disk).value(), std::vector<std::string>{"lost+found"});
}

TEST_F(AgentPersisterTest, RefusesALinkAmongTheDataFiles) {
  std::ofstream(Path("secret")) << "not the checkpoint's";
  ASSERT_EQ(symlink(Path("secret").c_str(), (memory_ + "/ck/data/1-0.bin").c_str()), 0);
  Result<PersistReport> report = PersistCheckpoint(memory_, checkpoint_, kWait);
  EXPECT_EQ(report.status().code(), Code::kCorrupt) << report.status().message();
  ExpectNothingOnStorage();
}

TEST_F(AgentPersisterTest, RefusesAnEntryThatIsNoDataFile) {
  std::ofstream(memory_ + "/ck/data/notes.txt") << "x";
  Result<PersistReport> report = PersistCheckpoint(memory_, checkpoint_, kWait);
  EXPECT_EQ(report.status().code(), Code::kCorrupt);
  EXPECT_NE(report.status().message().find("notes.txt"), std::string::npos) << report.status().message();
  ExpectNothingOnStorage();
}

TEST_F(AgentPersisterTest, WithoutAManifestNothingIsCommitted) {
  ASSERT_EQ(unlink((memory_ + "/ck/MANIFEST").c_str()), 0);
  Result<PersistReport> report = PersistCheckpoint(memory_, checkpoint_, kWait);
  EXPECT_EQ(report.status().code(), Code::kNotFound) << report.status().message();
  ExpectNothingOnStorage();
}

// Two nodes' agents persisting one checkpoint: node 0 holds 0-0.bin, node 1 holds 1-0.bin (and a replica of node
// 0's file, which it must not write).
class AgentPersisterAcrossNodesTest : public AgentPersisterTest {
 protected:
  void SetUp() override {
    AgentPersisterTest::SetUp();
    other_ = Path("memory-1");
    ASSERT_TRUE(io::MakeDirectories(other_ + "/ck/data").ok());
    // Node 0 checks the assembled copy against the manifest before it commits: this one must decode.
    runtime::Manifest manifest;
    manifest.checkpoint_id = "00000000000000ab";
    manifest.world_size = 2;
    manifest.node_count = 2;
    manifest.files = {{"data/0-0.bin", 100000}, {"data/1-0.bin", 70000}};
    const Status written = runtime::WriteManifest(other_ + "/ck", manifest);
    ASSERT_TRUE(written.ok()) << written.message();
    ASSERT_EQ(unlink((memory_ + "/ck/MANIFEST").c_str()), 0);
    ASSERT_TRUE(runtime::WriteManifest(memory_ + "/ck", manifest).ok());
    std::ofstream(other_ + "/ck/data/1-0.bin") << std::string(70000, 'e');
    std::ofstream(other_ + "/ck/data/0-0.bin") << std::string(100000, 'r');  // a replica: not node 1's to write
    checkpoint_.save_id = "00000000000000ab";
    checkpoint_.node_count = 2;
    checkpoint_.own_files = {"0-0.bin"};
    second_ = checkpoint_;
    second_.node_index = 1;
    second_.own_files = {"1-0.bin"};
  }
  std::string other_;
  MemoryCheckpoint second_;
};

TEST_F(AgentPersisterAcrossNodesTest, EveryNodeWritesItsOwnFilesAndNodeZeroCommits) {
  Result<PersistReport> from_second = Internal("not run");
  std::thread second([&] { from_second = PersistCheckpoint(other_, second_, kWait); });
  Result<PersistReport> from_first = PersistCheckpoint(memory_, checkpoint_, kWait);
  second.join();
  ASSERT_TRUE(from_first.ok()) << from_first.status().message();
  ASSERT_TRUE(from_second.ok()) << from_second.status().message();
  EXPECT_EQ(from_second->bytes, 70000u);
  EXPECT_EQ(Read(checkpoint_.storage_path + "/MANIFEST"), Read(memory_ + "/ck/MANIFEST"));
  EXPECT_EQ(Read(checkpoint_.storage_path + "/data/0-0.bin"), std::string(100000, 'd'));
  EXPECT_EQ(Read(checkpoint_.storage_path + "/data/1-0.bin"), std::string(70000, 'e'));
  // No marker of the nodes' progress stays in the committed checkpoint, and no temporary beside it.
  EXPECT_EQ(io::ListDirectory(checkpoint_.storage_path).value(), (std::vector<std::string>{"MANIFEST", "data"}));
  EXPECT_EQ(io::ListDirectory(Path("storage")).value(), std::vector<std::string>{"ck"});
}

TEST_F(AgentPersisterAcrossNodesTest, ANodeThatNeverWritesLeavesNothingCommitted) {
  Result<PersistReport> report = PersistCheckpoint(memory_, checkpoint_, std::chrono::milliseconds(300));
  EXPECT_EQ(report.status().code(), Code::kTimeout) << report.status().message();
  EXPECT_NE(report.status().message().find("node(s) 1 of 2"), std::string::npos) << report.status().message();
  ExpectNothingOnStorage();
}

TEST_F(AgentPersisterAcrossNodesTest, NodesThatWroteFewerFilesThanTheManifestListsCommitNothing) {
  second_.own_files = {};  // a node that replaced node 1 and holds none of its files: it still leaves its marker
  Result<PersistReport> from_second = Internal("not run");
  std::thread second([&] { from_second = PersistCheckpoint(other_, second_, kWait); });
  Result<PersistReport> from_first = PersistCheckpoint(memory_, checkpoint_, kWait);
  second.join();
  EXPECT_EQ(from_first.status().code(), Code::kCorrupt) << from_first.status().message();
  EXPECT_NE(from_first.status().message().find("data/1-0.bin"), std::string::npos) << from_first.status().message();
  EXPECT_FALSE(from_second.ok());
  ExpectNothingOnStorage();
}

TEST_F(AgentPersisterAcrossNodesTest, ANodeWhoseNodeZeroNeverBeginsWritesNothing) {
  Result<PersistReport> report = PersistCheckpoint(other_, second_, std::chrono::milliseconds(300));
  EXPECT_EQ(report.status().code(), Code::kTimeout) << report.status().message();
  ExpectNothingOnStorage();
}

}  // namespace
}  // namespace ckpt::agent
