// An export's output survives a power loss (runtime/export/safetensors_export.h): every directory it creates has its
// parent synced, and the directory of every file it publishes is synced. Each test makes the sync of one directory
// fail through the test build's fault hook (common/fault_injection.h) and expects the export to report it, which it
// can only if it syncs that directory.
// ctest-labels: threaded
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "ckpt.h"
#include "common/fault_injection.h"
#include "io/file_io.h"
#include "runtime/export/safetensors_export.h"
#include "runtime/format/safetensors.h"
#include "tests/unit/support/scoped_env.h"
#include "tests/unit/support/temp_dir.h"
#include "tests/unit/support/test_pattern.h"

namespace ckpt::runtime {
namespace {

using testing::ScopedEnv;

class ExportDurabilityTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    if (!fault::kCompiledIn) GTEST_SKIP() << "a build without CKPT_FAULT_INJECTION has no fault hooks";
    // The weights to export: one safetensors file of two small tensors.
    const std::vector<SafetensorsTensor> tensors = {{"a", CKPT_DTYPE_F32, {4}, 0, 16},
                                                    {"b", CKPT_DTYPE_F32, {2, 2}, 16, 32}};
    Result<std::string> header = EncodeSafetensorsHeader(tensors, {}, 8);
    ASSERT_TRUE(header.ok()) << header.status().message();
    const std::string bytes = *header + testing::Pattern(32, 1);
    weights_ = Path("weights.safetensors");
    ASSERT_TRUE(io::WriteFileDurably(weights_, bytes.data(), bytes.size()).ok());
  }

  // Exports the weights to `out` while syncing the directory `failing` fails; expects that failure reported.
  void ExpectExportReportsTheSyncOf(const std::string& out, const std::string& failing) {
    const ScopedEnv fault(fault::kDirectorySyncEioVar, failing);
    const Result<ExportSummary> exported = ExportSafetensors(weights_, out, ExportOptions());
    ASSERT_FALSE(exported.ok()) << "the export to " << out << " never synced " << failing;
    EXPECT_EQ(exported.status().code(), Code::kIo) << exported.status().message();
    EXPECT_NE(exported.status().message().find("cannot sync directory " + Quoted(failing)), std::string::npos)
        << exported.status().message();
  }

  std::string weights_;
};

TEST_F(ExportDurabilityTest, ExportSyncsTheParentOfTheOutputDirectoryItCreates) {
  ExpectExportReportsTheSyncOf(Path("out"), dir());
}

TEST_F(ExportDurabilityTest, ExportSyncsTheParentOfEveryDirectoryItCreates) {
  ExpectExportReportsTheSyncOf(Path("new/out"), Path("new"));
}

TEST_F(ExportDurabilityTest, ExportToOneFileSyncsTheParentOfTheDirectoryItCreates) {
  ExpectExportReportsTheSyncOf(Path("new/model.safetensors"), dir());
}

TEST_F(ExportDurabilityTest, ExportSyncsTheDirectoryOfTheFileItPublishes) {
  ExpectExportReportsTheSyncOf(Path("out"), Path("out"));
}

}  // namespace
}  // namespace ckpt::runtime
