// ctest-labels: threaded
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "collectives/store/bootstrap.h"

namespace ckpt::coll {
namespace {

// Every variable bootstrap reads. Each test starts with all of them unset and gets the originals back afterwards.
const char* const kBootstrapVariables[] = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_JOB_ID",
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "MASTER_ADDR",
    "MASTER_PORT",
    "CKPT_STORE_PORT",
    "CKPT_JOB_SECRET",
    "CKPT_NODE_NAME",
};

class BootstrapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kBootstrapVariables) {
      const char* value = std::getenv(name);
      saved_[name] = value ? std::optional<std::string>(value) : std::nullopt;
      unsetenv(name);
    }
  }

  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

  static void Set(const char* name, const char* value) { setenv(name, value, 1); }

  static ProcessIdentity Resolve(const ProcessIdentityRequest& request = {}) {
    Result<ProcessIdentity> identity = ResolveProcessIdentity(request);
    EXPECT_TRUE(identity.ok()) << identity.status().message();
    return identity.ok() ? identity.value() : ProcessIdentity();
  }

  static Status ResolveError(const ProcessIdentityRequest& request = {}) {
    Result<ProcessIdentity> identity = ResolveProcessIdentity(request);
    EXPECT_FALSE(identity.ok());
    return identity.status();
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST_F(BootstrapTest, WithoutLauncherIsRankZeroOfOne) {
  const ProcessIdentity identity = Resolve();
  EXPECT_EQ(identity.rank, 0);
  EXPECT_EQ(identity.world_size, 1);
  EXPECT_EQ(identity.local_rank, 0);
  EXPECT_EQ(identity.source, "default");
  EXPECT_EQ(identity.store_host, "127.0.0.1");
  EXPECT_EQ(identity.store_port, 29501);  // after torchrun's default MASTER_PORT, never on it
  EXPECT_EQ(identity.job_secret, "");
  char host[HOST_NAME_MAX + 1] = {};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  EXPECT_EQ(identity.node_name, host);
}

TEST_F(BootstrapTest, ExplicitValuesWinOverTheEnvironment) {
  Set("RANK", "1");
  Set("WORLD_SIZE", "2");
  Set("MASTER_ADDR", "10.0.0.1");
  Set("MASTER_PORT", "1234");
  Set("CKPT_NODE_NAME", "env-node");
  ProcessIdentityRequest request;
  request.rank = 3;
  request.world_size = 4;
  request.local_rank = 1;
  request.store_host = "10.9.9.9";
  request.store_port = 4321;
  request.node_name = "explicit-node";
  const ProcessIdentity identity = Resolve(request);
  EXPECT_EQ(identity.rank, 3);
  EXPECT_EQ(identity.world_size, 4);
  EXPECT_EQ(identity.local_rank, 1);
  EXPECT_EQ(identity.source, "options");
  EXPECT_EQ(identity.store_host, "10.9.9.9");
  EXPECT_EQ(identity.store_port, 4321);
  EXPECT_EQ(identity.node_name, "explicit-node");
}

TEST_F(BootstrapTest, TorchrunWinsOverOpenMpiAndSlurm) {
  Set("RANK", "2");
  Set("WORLD_SIZE", "4");
  Set("LOCAL_RANK", "1");
  Set("OMPI_COMM_WORLD_RANK", "5");
  Set("OMPI_COMM_WORLD_SIZE", "8");
  Set("SLURM_PROCID", "6");
  Set("SLURM_NTASKS", "16");
  const ProcessIdentity identity = Resolve();
  EXPECT_EQ(identity.source, "torchrun");
  EXPECT_EQ(identity.rank, 2);
  EXPECT_EQ(identity.world_size, 4);
  EXPECT_EQ(identity.local_rank, 1);
}

TEST_F(BootstrapTest, OpenMpiWinsOverSlurm) {
  Set("OMPI_COMM_WORLD_RANK", "5");
  Set("OMPI_COMM_WORLD_SIZE", "8");
  Set("OMPI_COMM_WORLD_LOCAL_RANK", "3");
  Set("SLURM_PROCID", "6");
  Set("SLURM_NTASKS", "16");
  const ProcessIdentity identity = Resolve();
  EXPECT_EQ(identity.source, "openmpi");
  EXPECT_EQ(identity.rank, 5);
  EXPECT_EQ(identity.world_size, 8);
  EXPECT_EQ(identity.local_rank, 3);
}

TEST_F(BootstrapTest, SlurmIsUsedWhenItIsTheOnlyLauncher) {
  Set("SLURM_PROCID", "6");
  Set("SLURM_NTASKS", "16");
  Set("SLURM_LOCALID", "2");
  const ProcessIdentity identity = Resolve();
  EXPECT_EQ(identity.source, "slurm");
  EXPECT_EQ(identity.rank, 6);
  EXPECT_EQ(identity.world_size, 16);
  EXPECT_EQ(identity.local_rank, 2);
}

TEST_F(BootstrapTest, MissingLocalRankDefaultsToZero) {
  Set("RANK", "3");
  Set("WORLD_SIZE", "4");
  EXPECT_EQ(Resolve().local_rank, 0);
}

TEST_F(BootstrapTest, StoreAddressAndNodeNameComeFromTheEnvironment) {
  Set("MASTER_ADDR", "node-a");
  Set("MASTER_PORT", "29600");
  Set("CKPT_NODE_NAME", "rack1-node7");
  const ProcessIdentity identity = Resolve();
  EXPECT_EQ(identity.store_host, "node-a");
  EXPECT_EQ(identity.store_port, 29601);
  EXPECT_EQ(identity.node_name, "rack1-node7");
}

TEST_F(BootstrapTest, EmptyVariableCountsAsUnset) {
  Set("RANK", "");
  Set("WORLD_SIZE", "");
  Set("MASTER_PORT", "");
  const ProcessIdentity identity = Resolve();
  EXPECT_EQ(identity.source, "default");
  EXPECT_EQ(identity.store_port, 29501);
}

TEST_F(BootstrapTest, RejectsValuesThatAreNotWholeIntegers) {
  Set("WORLD_SIZE", "4");
  for (const char* bad : {"1x", " 1", "+1", "1.0", "one", "0x1"}) {
    Set("RANK", bad);
    const Status status = ResolveError();
    EXPECT_EQ(status.code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find("RANK='" + std::string(bad) + "'"), std::string::npos) << status.message();
  }
}

TEST_F(BootstrapTest, RejectsIntegerOverflow) {
  Set("OMPI_COMM_WORLD_RANK", "0");
  Set("OMPI_COMM_WORLD_SIZE", "99999999999999");
  const Status status = ResolveError();
  EXPECT_EQ(status.code(), Code::kInvalidArgument);
  EXPECT_NE(status.message().find("OMPI_COMM_WORLD_SIZE"), std::string::npos) << status.message();
}

TEST_F(BootstrapTest, RejectsRankNotBelowWorldSize) {
  Set("SLURM_PROCID", "4");
  Set("SLURM_NTASKS", "4");
  const Status status = ResolveError();
  EXPECT_EQ(status.code(), Code::kInvalidArgument);
  EXPECT_NE(status.message().find("SLURM_PROCID=4"), std::string::npos) << status.message();
}

TEST_F(BootstrapTest, RejectsLocalRankOutOfRange) {
  Set("RANK", "0");
  Set("WORLD_SIZE", "2");
  Set("LOCAL_RANK", "-1");
  const Status status = ResolveError();
  EXPECT_NE(status.message().find("LOCAL_RANK=-1"), std::string::npos) << status.message();
}

TEST_F(BootstrapTest, RejectsZeroWorldSize) {
  Set("RANK", "0");
  Set("WORLD_SIZE", "0");
  const Status status = ResolveError();
  EXPECT_NE(status.message().find("WORLD_SIZE=0"), std::string::npos) << status.message();
}

TEST_F(BootstrapTest, RejectsLauncherRankWithoutWorldSize) {
  Set("RANK", "1");
  const Status status = ResolveError();
  EXPECT_EQ(status.code(), Code::kInvalidArgument);
  EXPECT_NE(status.message().find("WORLD_SIZE is not"), std::string::npos) << status.message();
}

TEST_F(BootstrapTest, RejectsPortOutsideValidRange) {
  for (const char* bad : {"0", "65536", "-5"}) {
    Set("MASTER_PORT", bad);
    const Status status = ResolveError();
    EXPECT_NE(status.message().find("MASTER_PORT"), std::string::npos) << status.message();
  }
  unsetenv("MASTER_PORT");
  ProcessIdentityRequest request;
  request.store_port = 70000;
  EXPECT_NE(ResolveError(request).message().find("store_port=70000"), std::string::npos);
}

TEST_F(BootstrapTest, RejectsExplicitRankWithoutWorldSize) {
  ProcessIdentityRequest request;
  request.rank = 1;
  const Status status = ResolveError(request);
  EXPECT_EQ(status.code(), Code::kInvalidArgument);
  EXPECT_NE(status.message().find("without world_size"), std::string::npos) << status.message();
}

TEST_F(BootstrapTest, RejectsExplicitRankOutOfRange) {
  ProcessIdentityRequest request;
  request.rank = 4;
  request.world_size = 4;
  EXPECT_NE(ResolveError(request).message().find("rank=4"), std::string::npos);
  request.rank = -3;
  EXPECT_NE(ResolveError(request).message().find("rank=-3"), std::string::npos);
}

TEST_F(BootstrapTest, TheStoreNeverTakesTheLaunchersOwnPort) {
  Set("MASTER_PORT", "29500");
  EXPECT_EQ(Resolve().store_port, 29501);
  Set("CKPT_STORE_PORT", "40000");
  EXPECT_EQ(Resolve().store_port, 40000);
  Set("CKPT_STORE_PORT", "0");
  EXPECT_NE(ResolveError().message().find("CKPT_STORE_PORT=0"), std::string::npos);
  unsetenv("CKPT_STORE_PORT");
  Set("MASTER_PORT", "65535");
  EXPECT_EQ(Resolve().store_port, 1024);
}

TEST_F(BootstrapTest, MpichAndIntelMpiRanksAreOneJobNotManyOneRankJobs) {
  Set("PMI_RANK", "3");
  Set("PMI_SIZE", "8");
  Set("MPI_LOCALRANKID", "1");
  const ProcessIdentity identity = Resolve();
  EXPECT_EQ(identity.source, "mpich");
  EXPECT_EQ(identity.rank, 3);
  EXPECT_EQ(identity.world_size, 8);
  EXPECT_EQ(identity.local_rank, 1);
}

TEST_F(BootstrapTest, SlurmAcrossNodesFindsRankZerosNodeAndAPortOfItsJob) {
  Set("SLURM_PROCID", "5");
  Set("SLURM_NTASKS", "16");
  Set("SLURM_JOB_ID", "123456");
  Set("SLURM_JOB_NODELIST", "gpu[007-010,012],login1");
  Set("SLURM_STEP_NODELIST", "gpu[008-009]");
  const ProcessIdentity identity = Resolve();
  EXPECT_EQ(identity.store_host, "gpu008");  // the step's first node runs task 0
  EXPECT_EQ(identity.store_port, 20000 + 123456 % 10000);
  Set("MASTER_ADDR", "head");
  Set("MASTER_PORT", "7000");
  EXPECT_EQ(Resolve().store_host, "head");
  EXPECT_EQ(Resolve().store_port, 7001);
}

TEST_F(BootstrapTest, FirstHostOfASlurmNodeList) {
  EXPECT_EQ(FirstHostOfSlurmNodeList("node[07-09,12],gpu-a3").value(), "node07");
  EXPECT_EQ(FirstHostOfSlurmNodeList("n[1-2]-ib[3-4]").value(), "n1-ib3");
  EXPECT_EQ(FirstHostOfSlurmNodeList("host").value(), "host");
  EXPECT_EQ(FirstHostOfSlurmNodeList("a1,a2").value(), "a1");
  EXPECT_EQ(FirstHostOfSlurmNodeList("node[07").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(FirstHostOfSlurmNodeList("node[x-y]").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(FirstHostOfSlurmNodeList("").status().code(), Code::kInvalidArgument);
}

TEST_F(BootstrapTest, TheJobSecretComesFromTheLauncherAndMustBeLongEnough) {
  Set("CKPT_JOB_SECRET", "0123456789abcdef0123");
  EXPECT_EQ(Resolve().job_secret, "0123456789abcdef0123");
  Set("CKPT_JOB_SECRET", "guessable");
  EXPECT_NE(ResolveError().message().find("CKPT_JOB_SECRET"), std::string::npos);
}

}  // namespace
}  // namespace ckpt::coll
