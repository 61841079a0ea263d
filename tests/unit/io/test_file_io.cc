#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "io/file_io.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt::io {
namespace {

class FileIoTest : public testing::TempDirTest {
 protected:
  void WriteText(const std::string& name, const std::string& text) {
    ASSERT_TRUE(WriteFileDurably(Path(name), text.data(), text.size()).ok());
  }
};

TEST_F(FileIoTest, WriteAtThenReadAtRoundTrips) {
  Result<File> out = File::CreateNew(Path("f"));
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_TRUE(out->WriteAt("world", 5, 5).ok());
  ASSERT_TRUE(out->WriteAt("hello", 5, 0).ok());
  ASSERT_TRUE(out->Sync().ok());
  ASSERT_TRUE(out->Close().ok());

  Result<File> in = File::OpenBeneath(dir(), "f");
  ASSERT_TRUE(in.ok()) << in.status().message();
  Result<uint64_t> size = in->Size();
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(size.value(), 10u);
  char buf[10];
  ASSERT_TRUE(in->ReadAt(buf, sizeof buf, 0).ok());
  EXPECT_EQ(std::string(buf, sizeof buf), "helloworld");
}

TEST_F(FileIoTest, ReadPastEndIsCorruptNamingThePath) {
  WriteText("short", "abc");
  Result<File> in = File::OpenBeneath(dir(), "short");
  ASSERT_TRUE(in.ok());
  char buf[8];
  const Status status = in->ReadAt(buf, sizeof buf, 1);
  EXPECT_EQ(status.code(), Code::kCorrupt);
  EXPECT_NE(status.message().find(Path("short")), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("truncated"), std::string::npos) << status.message();
}

TEST_F(FileIoTest, CreateNewOnExistingFileIsAlreadyExists) {
  WriteText("f", "x");
  Result<File> again = File::CreateNew(Path("f"));
  EXPECT_EQ(again.status().code(), Code::kAlreadyExists);
  EXPECT_NE(again.status().message().find(Path("f")), std::string::npos);
}

TEST_F(FileIoTest, OpenMissingFileIsNotFound) {
  EXPECT_EQ(File::OpenBeneath(dir(), "missing").status().code(), Code::kNotFound);
}

TEST_F(FileIoTest, CloseTwiceIsHarmless) {
  Result<File> out = File::CreateNew(Path("f"));
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(out->Close().ok());
  EXPECT_TRUE(out->Close().ok());
  EXPECT_EQ(out->fd(), -1);
}

TEST_F(FileIoTest, WriteFileDurablyThenReadWholeFileRoundTrips) {
  const std::string text(10000, 'q');
  WriteText("whole", text);
  Result<std::string> back = ReadWholeFile(dir(), "whole", 1 << 20);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back.value(), text);
}

TEST_F(FileIoTest, WriteFileDurablyRefusesToReplaceAFile) {
  WriteText("f", "first");
  EXPECT_EQ(WriteFileDurably(Path("f"), "second", 6).code(), Code::kAlreadyExists);
  EXPECT_EQ(ReadWholeFile(dir(), "f", 100).value(), "first");
}

TEST_F(FileIoTest, ReadWholeFileRefusesAFileOverTheLimit) {
  WriteText("big", std::string(101, 'b'));
  Result<std::string> back = ReadWholeFile(dir(), "big", 100);
  EXPECT_EQ(back.status().code(), Code::kCorrupt);
  EXPECT_NE(back.status().message().find("limit"), std::string::npos) << back.status().message();
}

TEST_F(FileIoTest, MakeDirectoriesCreatesNestedAndAcceptsExisting) {
  ASSERT_TRUE(MakeDirectories(Path("a/b/c")).ok());
  EXPECT_TRUE(IsDirectory(Path("a/b/c")));
  EXPECT_TRUE(MakeDirectories(Path("a/b/c/")).ok());
}

TEST_F(FileIoTest, MakeDirectoriesOverAFileIsAlreadyExists) {
  WriteText("file", "x");
  EXPECT_EQ(MakeDirectories(Path("file/sub")).code(), Code::kAlreadyExists);
}

TEST_F(FileIoTest, SyncDirectoryOfMissingDirectoryIsNotFound) {
  EXPECT_TRUE(SyncDirectory(dir()).ok());
  EXPECT_EQ(SyncDirectory(Path("missing")).code(), Code::kNotFound);
}

TEST_F(FileIoTest, RenameNoReplaceMovesADirectory) {
  ASSERT_TRUE(MakeDirectories(Path("from/data")).ok());
  ASSERT_TRUE(RenameNoReplace(Path("from"), Path("to")).ok());
  EXPECT_FALSE(PathExists(Path("from")));
  EXPECT_TRUE(IsDirectory(Path("to/data")));
}

// rename(2) would silently replace an empty directory; a committed checkpoint must never be replaced.
TEST_F(FileIoTest, RenameNoReplaceOntoExistingDirectoryIsAlreadyExists) {
  ASSERT_TRUE(MakeDirectories(Path("from")).ok());
  ASSERT_TRUE(MakeDirectories(Path("to")).ok());
  const Status status = RenameNoReplace(Path("from"), Path("to"));
  EXPECT_EQ(status.code(), Code::kAlreadyExists) << status.message();
  EXPECT_TRUE(IsDirectory(Path("from")));
}

TEST_F(FileIoTest, RemoveTreeRemovesNestedDirectoriesAndFiles) {
  ASSERT_TRUE(MakeDirectories(Path("tree/data/deep")).ok());
  WriteText("tree/MANIFEST", "m");
  WriteText("tree/data/0-0.bin", "d");
  WriteText("tree/data/deep/x", "x");
  ASSERT_TRUE(RemoveTree(Path("tree")).ok());
  EXPECT_FALSE(PathExists(Path("tree")));
}

TEST_F(FileIoTest, RemoveTreeDoesNotFollowSymbolicLinks) {
  ASSERT_TRUE(MakeDirectories(Path("outside")).ok());
  WriteText("outside/keep", "k");
  ASSERT_TRUE(MakeDirectories(Path("tree")).ok());
  ASSERT_EQ(symlink(Path("outside").c_str(), Path("tree/link").c_str()), 0);
  ASSERT_TRUE(RemoveTree(Path("tree")).ok());
  EXPECT_FALSE(PathExists(Path("tree")));
  EXPECT_TRUE(PathExists(Path("outside/keep")));
}

TEST_F(FileIoTest, RemoveTreeRemovesAPlainFile) {
  WriteText("f", "x");
  ASSERT_TRUE(RemoveTree(Path("f")).ok());
  EXPECT_FALSE(PathExists(Path("f")));
}

TEST_F(FileIoTest, RemoveTreeOfMissingPathIsOk) { EXPECT_TRUE(RemoveTree(Path("missing")).ok()); }

TEST_F(FileIoTest, FullFileSystemIsNoSpace) {
  const std::string mount_point = Path("small");
  ASSERT_TRUE(MakeDirectories(mount_point).ok());
  if (mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=64k") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs to fill (" << std::strerror(errno) << "); needs root";
  }
  struct Unmount {
    const std::string& path;
    ~Unmount() { umount(path.c_str()); }
  } unmount{mount_point};
  const std::string big(1 << 20, 'z');
  const Status status = WriteFileDurably(JoinPath(mount_point, "f"), big.data(), big.size());
  EXPECT_EQ(status.code(), Code::kNoSpace) << status.message();
  EXPECT_FALSE(PathExists(JoinPath(mount_point, "f"))) << "a partial file was left behind";
}

TEST(JoinPath, InsertsOneSeparator) {
  EXPECT_EQ(JoinPath("a/b", "c"), "a/b/c");
  EXPECT_EQ(JoinPath("a/b/", "c"), "a/b/c");
  EXPECT_EQ(JoinPath("", "c"), "c");
}

}  // namespace
}  // namespace ckpt::io
