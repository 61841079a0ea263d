// The base of an incremental save (runtime/save/incremental_base.h): only a committed sibling of the new checkpoint
// is accepted; its files are referred to where they physically are, and only while they are in place.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "io/file_io.h"
#include "runtime/format/manifest.h"
#include "runtime/save/incremental_base.h"
#include "tests/unit/support/temp_dir.h"

namespace ckpt::runtime {
namespace {

class IncrementalBaseTest : public testing::TempDirTest {
 protected:
  // A committed checkpoint `name` with one file of its own and one of the checkpoint `refers_to` (when given).
  void Commit(const std::string& name, const std::string& refers_to = "") {
    const std::string dir = Path(name);
    ASSERT_TRUE(io::MakeDirectories(io::JoinPath(dir, kDataDirName)).ok());
    Manifest m;
    m.world_size = 1;
    m.files.push_back(DataFileRecord{"data/0-0.bin", 4096, ""});
    std::ofstream(io::JoinPath(dir, "data/0-0.bin")) << std::string(4096, 'x');
    if (!refers_to.empty()) m.files.push_back(DataFileRecord{"data/0-0.bin", 4096, refers_to});
    m.format_major = FormatMajorFor(m);
    ASSERT_TRUE(WriteManifest(dir, m).ok());
  }

  Status OpenStatus(const std::string& path, const std::string& base) {
    return IncrementalBase::Open(path, base).status();
  }
};

TEST_F(IncrementalBaseTest, ASiblingIsReferredToByItsNameAndWhatItRefersToByTheirs) {
  Commit("step-1");
  Commit("step-2", "step-1");
  Result<std::unique_ptr<IncrementalBase>> base = IncrementalBase::Open(Path("step-3"), Path("step-2") + "/");
  ASSERT_TRUE(base.ok()) << base.status().message();
  EXPECT_EQ((*base)->name(), "step-2");
  EXPECT_EQ((*base)->ReferTo(0).checkpoint, "step-2");
  EXPECT_EQ((*base)->ReferTo(1).checkpoint, "step-1");
  EXPECT_TRUE((*base)->CanReferTo(0));
  EXPECT_TRUE((*base)->CanReferTo(1));
}

TEST_F(IncrementalBaseTest, FilesDeletedByHandOrOfTheNewCheckpointsNameAreNotReferredTo) {
  Commit("step-1");
  Commit("step-2", "step-1");
  std::filesystem::remove_all(Path("step-1"));
  Result<std::unique_ptr<IncrementalBase>> base = IncrementalBase::Open(Path("step-3"), Path("step-2"));
  ASSERT_TRUE(base.ok()) << base.status().message();
  EXPECT_TRUE((*base)->CanReferTo(0));
  EXPECT_FALSE((*base)->CanReferTo(1));
  // A new save that reuses the deleted checkpoint's name must not refer to "its own" files.
  Commit("step-1b");
  Result<std::unique_ptr<IncrementalBase>> reusing = IncrementalBase::Open(Path("step-1"), Path("step-2"));
  ASSERT_TRUE(reusing.ok()) << reusing.status().message();
  EXPECT_FALSE((*reusing)->CanReferTo(1));
}

TEST_F(IncrementalBaseTest, OnlyACommittedSiblingOtherThanTheSaveItselfIsABase) {
  Commit("step-1");
  ASSERT_TRUE(io::MakeDirectories(Path("elsewhere")).ok());
  const Status far = OpenStatus(Path("elsewhere/step-2"), Path("step-1"));
  EXPECT_EQ(far.code(), Code::kInvalidArgument);
  EXPECT_NE(far.message().find("only to checkpoints beside it"), std::string::npos) << far.message();
  const Status itself = OpenStatus(Path("step-1"), Path("step-1"));
  EXPECT_EQ(itself.code(), Code::kInvalidArgument);
  EXPECT_NE(itself.message().find("names itself as its base"), std::string::npos) << itself.message();
  const Status dots = OpenStatus(Path("step-2"), Path("step-1") + "/..");
  EXPECT_EQ(dots.code(), Code::kInvalidArgument);
  const Status missing = OpenStatus(Path("step-2"), Path("step-0"));
  EXPECT_EQ(missing.code(), Code::kNotFound);
  EXPECT_NE(missing.message().find("the base of the incremental save"), std::string::npos) << missing.message();
}

}  // namespace
}  // namespace ckpt::runtime
