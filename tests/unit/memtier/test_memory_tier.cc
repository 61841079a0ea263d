// How a rank names memory checkpoints: every rank, and the agent, must derive the same name from a storage path
// however it was spelled, and two storage paths must never share one.
#include <gtest/gtest.h>
#include <unistd.h>

#include "collectives/agent/agent_protocol.h"
#include "runtime/memtier/memory_tier.h"

namespace ckpt::runtime {
namespace {

std::string WorkingDirectory() {
  char buffer[4096];
  return getcwd(buffer, sizeof buffer) != nullptr ? buffer : "";
}

TEST(MemoryTierNames, AbsoluteStoragePathResolvesRelativePathsDotsAndTrailingSlashes) {
  EXPECT_EQ(AbsoluteStoragePath("/ckpt/run/./x/../step-1/"), "/ckpt/run/step-1");
  EXPECT_EQ(AbsoluteStoragePath("run/step-1"), WorkingDirectory() + "/run/step-1");
}

TEST(MemoryTierNames, OneStoragePathHasOneNameHoweverItIsSpelled) {
  EXPECT_EQ(MemoryTier::NameFor("/ckpt/run/step-000000000012"), MemoryTier::NameFor("/ckpt//run/./step-000000000012/"));
  EXPECT_EQ(MemoryTier::NameFor("/ckpt/run/step-000000000012").rfind("step-000000000012-", 0), 0u);
}

TEST(MemoryTierNames, EqualLastComponentsUnderOtherParentsGetOtherNames) {
  EXPECT_NE(MemoryTier::NameFor("/a/step-1"), MemoryTier::NameFor("/b/step-1"));
}

TEST(MemoryTierNames, NamesArePlainDirectoryNamesWhateverThePath) {
  for (const std::string& path :
       std::vector<std::string>{"/ckpt/.hidden", "/ckpt/we ird\n", "/", "/ckpt/" + std::string(300, 'x')}) {
    const std::string name = MemoryTier::NameFor(path);
    EXPECT_FALSE(name.empty()) << path;
    EXPECT_NE(name[0], '.') << path;
    EXPECT_LE(name.size(), 100u) << path;
    for (char c : name)
      EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') << path;
  }
}

TEST(MemoryTierNames, TheMemoryDirectoryAndTheSocketDependOnUserJobAndNode) {
  const std::string base = coll::agent::MemoryDirectory("/dev/shm", 1000, "job-1", "node-a");
  EXPECT_EQ(base.rfind("/dev/shm/ckpt-1000-", 0), 0u);
  EXPECT_NE(base, coll::agent::MemoryDirectory("/dev/shm", 1001, "job-1", "node-a"));
  EXPECT_NE(base, coll::agent::MemoryDirectory("/dev/shm", 1000, "job-2", "node-a"));
  EXPECT_NE(base, coll::agent::MemoryDirectory("/dev/shm", 1000, "job-1", "node-b"));
  EXPECT_NE(coll::agent::SocketName("job-1", "node-a"), coll::agent::SocketName("job-2", "node-a"));
  EXPECT_NE(coll::agent::SocketName("job-1", "node-a"), coll::agent::SocketName("job-1", "node-b"));
}

TEST(MemoryTierNames, JobIdsThatCannotTravelInNamesAreRefused) {
  EXPECT_TRUE(coll::agent::ValidateJobId("slurm-123_4.5").ok());
  EXPECT_EQ(coll::agent::ValidateJobId("").code(), Code::kInvalidArgument);
  EXPECT_EQ(coll::agent::ValidateJobId("a/b").code(), Code::kInvalidArgument);
  EXPECT_EQ(coll::agent::ValidateJobId("a b").code(), Code::kInvalidArgument);
  EXPECT_EQ(coll::agent::ValidateJobId(std::string(129, 'j')).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace ckpt::runtime
