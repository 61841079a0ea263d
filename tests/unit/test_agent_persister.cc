// Writing a memory checkpoint to storage (runtime/agent/persister.h): the copy is committed whole, and only the
// data files the agent itself listed, regular files reached without links, are copied.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "io/file_io.h"
#include "runtime/agent/persister.h"

namespace ckpt::agent {
namespace {

class AgentPersisterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir_template[] = "/tmp/ckpt-agent-persist-XXXXXX";
    ASSERT_NE(mkdtemp(dir_template), nullptr);
    root_ = dir_template;
    memory_ = root_ + "/memory";
    ASSERT_TRUE(io::MakeDirectories(memory_ + "/ck/data").ok());
    std::ofstream(memory_ + "/ck/MANIFEST") << "manifest";
    std::ofstream(memory_ + "/ck/data/0-0.bin") << std::string(100000, 'd');
    checkpoint_.name = "ck";
    checkpoint_.storage_path = root_ + "/storage/ck";
  }
  void TearDown() override { (void)io::RemoveTree(root_); }

  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  // The storage path was never created, nor anything beside it.
  void ExpectNothingOnStorage() {
    Result<std::vector<std::string>> left = io::ListDirectory(root_ + "/storage");
    EXPECT_TRUE(!left.ok() || left->empty()) << "left: " << left->front();
  }

  std::string root_, memory_;
  MemoryCheckpoint checkpoint_;
};

TEST_F(AgentPersisterTest, CopiesTheCheckpointAndCommitsIt) {
  Result<PersistReport> report = PersistCheckpoint(memory_, checkpoint_);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->bytes, 100008u);
  EXPECT_FALSE(report->found_committed);
  EXPECT_EQ(Read(checkpoint_.storage_path + "/MANIFEST"), "manifest");
  EXPECT_EQ(Read(checkpoint_.storage_path + "/data/0-0.bin"), std::string(100000, 'd'));
  EXPECT_EQ(io::ListDirectory(root_ + "/storage").value(), std::vector<std::string>{"ck"});
}

TEST_F(AgentPersisterTest, RefusesALinkAmongTheDataFiles) {
  std::ofstream(root_ + "/secret") << "not the checkpoint's";
  ASSERT_EQ(symlink((root_ + "/secret").c_str(), (memory_ + "/ck/data/1-0.bin").c_str()), 0);
  Result<PersistReport> report = PersistCheckpoint(memory_, checkpoint_);
  EXPECT_EQ(report.status().code(), Code::kCorrupt) << report.status().message();
  ExpectNothingOnStorage();
}

TEST_F(AgentPersisterTest, RefusesAnEntryThatIsNoDataFile) {
  std::ofstream(memory_ + "/ck/data/notes.txt") << "x";
  Result<PersistReport> report = PersistCheckpoint(memory_, checkpoint_);
  EXPECT_EQ(report.status().code(), Code::kCorrupt);
  EXPECT_NE(report.status().message().find("notes.txt"), std::string::npos) << report.status().message();
  ExpectNothingOnStorage();
}

TEST_F(AgentPersisterTest, WithoutAManifestNothingIsCommitted) {
  ASSERT_EQ(unlink((memory_ + "/ck/MANIFEST").c_str()), 0);
  Result<PersistReport> report = PersistCheckpoint(memory_, checkpoint_);
  EXPECT_EQ(report.status().code(), Code::kNotFound) << report.status().message();
  ExpectNothingOnStorage();
}

}  // namespace
}  // namespace ckpt::agent
