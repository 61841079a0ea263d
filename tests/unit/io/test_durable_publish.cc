// The durable-publish helper (io/durable_publish.h): a publish moves staged content into place whole, never replaces
// what is at the target, leaves no target when it fails before the rename, and syncs the directories it must (the
// last through the test build's fault hook, common/fault_injection.h).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/fault_injection.h"
#include "io/durable_publish.h"
#include "io/file_io.h"
#include "tests/unit/support/scoped_env.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt::io {
namespace {

using testing::ScopedEnv;

class DurablePublishTest : public testing::TempDirTest {
 protected:
  void WriteText(const std::string& path, const std::string& text) {
    ASSERT_TRUE(WriteFileDurably(path, text.data(), text.size()).ok()) << path;
  }
  std::string ReadText(const std::string& path) {
    Result<std::string> text = ReadWholeFile(ParentDirectory(path), path.substr(path.rfind('/') + 1), 1 << 20);
    EXPECT_TRUE(text.ok()) << text.status().message();
    return text.ok() ? *text : "";
  }

  // A staged checkpoint-like directory: a MANIFEST and data/0.bin.
  std::string Stage(const std::string& name) {
    const std::string staged = Path(name);
    EXPECT_TRUE(MakeDirectories(JoinPath(staged, "data")).ok());
    WriteText(JoinPath(staged, "MANIFEST"), "manifest");
    WriteText(JoinPath(staged, "data/0.bin"), "data");
    return staged;
  }
};

TEST_F(DurablePublishTest, PublishDirectoryMovesTheStagedDirectoryIntoPlace) {
  const std::string staged = Stage(".tmp");
  ASSERT_TRUE(PublishDirectory(staged, {"data"}, Path("ck")).ok());
  EXPECT_FALSE(PathExists(staged));
  EXPECT_EQ(ReadText(Path("ck/MANIFEST")), "manifest");
  EXPECT_EQ(ReadText(Path("ck/data/0.bin")), "data");
}

TEST_F(DurablePublishTest, PublishDirectoryNeverReplacesAnExistingTarget) {
  const std::string staged = Stage(".tmp");
  ASSERT_TRUE(MakeDirectories(Path("ck")).ok());
  WriteText(Path("ck/old"), "old");
  const Status published = PublishDirectory(staged, {"data"}, Path("ck"));
  EXPECT_EQ(published.code(), Code::kAlreadyExists) << published.message();
  EXPECT_EQ(ListDirectory(Path("ck")).value(), std::vector<std::string>{"old"});
  EXPECT_EQ(ReadText(Path("ck/old")), "old");
  EXPECT_EQ(ReadText(JoinPath(staged, "MANIFEST")), "manifest");  // left for the caller to remove
}

TEST_F(DurablePublishTest, PublishDirectoryFailingBeforeTheRenameLeavesNoTarget) {
  const std::string staged = Stage(".tmp");
  const Status published = PublishDirectory(staged, {"missing"}, Path("ck"));
  EXPECT_EQ(published.code(), Code::kNotFound) << published.message();
  EXPECT_NE(published.message().find(JoinPath(staged, "missing")), std::string::npos) << published.message();
  EXPECT_FALSE(PathExists(Path("ck")));
  EXPECT_TRUE(PathExists(JoinPath(staged, "MANIFEST")));
}

TEST_F(DurablePublishTest, PublishDirectoryWhoseStagedSyncFailsLeavesNoTarget) {
  if (!fault::kCompiledIn) GTEST_SKIP() << "a build without CKPT_FAULT_INJECTION has no fault hooks";
  const std::string staged = Stage(".tmp");
  const ScopedEnv failing(fault::kDirectorySyncEioVar, staged);
  const Status published = PublishDirectory(staged, {"data"}, Path("ck"));
  EXPECT_EQ(published.code(), Code::kIo) << published.message();
  EXPECT_NE(published.message().find("cannot sync directory"), std::string::npos) << published.message();
  EXPECT_FALSE(PathExists(Path("ck")));
}

TEST_F(DurablePublishTest, PublishDirectorySyncsTheTargetsParentAndSaysWhenThatFails) {
  if (!fault::kCompiledIn) GTEST_SKIP() << "a build without CKPT_FAULT_INJECTION has no fault hooks";
  const std::string staged = Stage(".tmp");
  const ScopedEnv failing(fault::kDirectorySyncEioVar, dir());
  const Status published = PublishDirectory(staged, {"data"}, Path("ck"));
  EXPECT_EQ(published.code(), Code::kIo) << published.message();
  EXPECT_NE(published.message().find("is in place but may not survive a power loss"), std::string::npos)
      << published.message();
  EXPECT_EQ(ReadText(Path("ck/MANIFEST")), "manifest");  // renamed whole; only its durability is in doubt
}

TEST_F(DurablePublishTest, PublishFileMovesTheFileIntoPlace) {
  WriteText(Path(".f.tmp"), "new");
  ASSERT_TRUE(PublishFile(Path(".f.tmp"), Path("f")).ok());
  EXPECT_FALSE(PathExists(Path(".f.tmp")));
  EXPECT_EQ(ReadText(Path("f")), "new");
}

TEST_F(DurablePublishTest, PublishFileNeverReplacesAnExistingFileAndRemovesTheStagedOne) {
  WriteText(Path("f"), "old");
  WriteText(Path(".f.tmp"), "new");
  const Status published = PublishFile(Path(".f.tmp"), Path("f"));
  EXPECT_EQ(published.code(), Code::kAlreadyExists) << published.message();
  EXPECT_EQ(ReadText(Path("f")), "old");
  EXPECT_FALSE(PathExists(Path(".f.tmp")));
}

TEST_F(DurablePublishTest, PublishFileSyncsItsDirectory) {
  if (!fault::kCompiledIn) GTEST_SKIP() << "a build without CKPT_FAULT_INJECTION has no fault hooks";
  WriteText(Path(".f.tmp"), "new");
  const ScopedEnv failing(fault::kDirectorySyncEioVar, dir());
  const Status published = PublishFile(Path(".f.tmp"), Path("f"));
  EXPECT_EQ(published.code(), Code::kIo) << published.message();
  EXPECT_NE(published.message().find(Quoted(dir())), std::string::npos) << published.message();
}

TEST_F(DurablePublishTest, MakeDirectoriesDurablyCreatesEveryMissingDirectory) {
  ASSERT_TRUE(MakeDirectoriesDurably(Path("a/b/c")).ok());
  EXPECT_TRUE(IsDirectory(Path("a/b/c")));
  EXPECT_TRUE(MakeDirectoriesDurably(Path("a/b/c")).ok());  // already there
}

TEST_F(DurablePublishTest, MakeDirectoriesDurablySyncsTheParentOfEachDirectoryItCreates) {
  if (!fault::kCompiledIn) GTEST_SKIP() << "a build without CKPT_FAULT_INJECTION has no fault hooks";
  for (const std::string& parent : {dir(), Path("a"), Path("a/b")}) {
    std::filesystem::remove_all(Path("a"));
    const ScopedEnv failing(fault::kDirectorySyncEioVar, parent);
    const Status made = MakeDirectoriesDurably(Path("a/b/c"));
    EXPECT_EQ(made.code(), Code::kIo) << parent << ": " << made.message();
    EXPECT_NE(made.message().find(Quoted(parent)), std::string::npos) << made.message();
  }
}

TEST_F(DurablePublishTest, MakeDirectoriesDurablySyncsNothingThatItDidNotCreate) {
  if (!fault::kCompiledIn) GTEST_SKIP() << "a build without CKPT_FAULT_INJECTION has no fault hooks";
  ASSERT_TRUE(MakeDirectories(Path("a")).ok());
  const ScopedEnv failing(fault::kDirectorySyncEioVar, dir());
  EXPECT_TRUE(MakeDirectoriesDurably(Path("a")).ok());
}

TEST_F(DurablePublishTest, MakeDirectoriesDurablyRefusesAFileInTheWay) {
  WriteText(Path("f"), "");
  EXPECT_EQ(MakeDirectoriesDurably(Path("f/a")).code(), Code::kAlreadyExists);
}

}  // namespace
}  // namespace ckpt::io
