// The choice between read once + exchange and own reads (runtime/load/read_strategy.h): each input that flips it,
// the setting that forces it, what own reads would read, and which storage counts as local to the node.
#include <gtest/gtest.h>

#include "ckpt.h"
#include "common/settings.h"
#include "runtime/core/dtype.h"
#include "runtime/load/read_strategy.h"
#include "tests/unit/support/scoped_env.h"

namespace ckpt::runtime {
namespace {

// One node, local storage, a transport, own reads reading exactly the stored bytes: AUTO chooses own reads.
ReadStrategyInputs OwnReadsJob() {
  ReadStrategyInputs in;
  in.exchanges = in.files_everywhere = in.one_node = in.storage_local = true;
  in.own_bytes = in.needed_bytes = 1000000;
  return in;
}

TEST(ReadStrategyTest, AutoReadsOwnOnOneNodeWithLocalStorageAndNoExtraBytes) {
  EXPECT_EQ(ChooseLoadReads(OwnReadsJob()).reads, LoadReads::kOwn);
}

TEST(ReadStrategyTest, AutoReadsOnceAcrossNodes) {
  ReadStrategyInputs in = OwnReadsJob();
  in.one_node = false;
  EXPECT_EQ(ChooseLoadReads(in).reads, LoadReads::kOnce);
}

TEST(ReadStrategyTest, AutoReadsOnceFromRemoteStorage) {
  ReadStrategyInputs in = OwnReadsJob();
  in.storage_local = false;
  EXPECT_EQ(ChooseLoadReads(in).reads, LoadReads::kOnce);
}

TEST(ReadStrategyTest, AutoReadsOwnUpToTheThresholdAndOnceBeyond) {
  ReadStrategyInputs in = OwnReadsJob();
  in.own_bytes = in.needed_bytes * kOwnReadsMaxAmplificationMilli / 1000;
  EXPECT_EQ(ChooseLoadReads(in).reads, LoadReads::kOwn);
  in.own_bytes += in.needed_bytes / 100;
  EXPECT_EQ(ChooseLoadReads(in).reads, LoadReads::kOnce);
  in.own_bytes = 4 * in.needed_bytes;  // four ranks each reading the whole replicated state
  EXPECT_EQ(ChooseLoadReads(in).reads, LoadReads::kOnce);
}

TEST(ReadStrategyTest, WithoutATransportEveryRankReadsItsOwn) {
  ReadStrategyInputs in = OwnReadsJob();
  in.exchanges = false;
  in.one_node = in.storage_local = false;
  in.own_bytes = 4 * in.needed_bytes;
  EXPECT_EQ(ChooseLoadReads(in).reads, LoadReads::kOwn);
  EXPECT_TRUE(ChooseLoadReads(in).fallback.empty());
  in.setting = LoadReadsSetting::kOnce;
  const ReadStrategy forced = ChooseLoadReads(in);
  EXPECT_EQ(forced.reads, LoadReads::kOwn);
  EXPECT_NE(forced.fallback.find("CKPT_LOAD_READS=once without a transport"), std::string::npos) << forced.fallback;
}

TEST(ReadStrategyTest, SettingForcesEitherWay) {
  ReadStrategyInputs in = OwnReadsJob();
  in.setting = LoadReadsSetting::kOnce;
  EXPECT_EQ(ChooseLoadReads(in).reads, LoadReads::kOnce);
  in = OwnReadsJob();
  in.setting = LoadReadsSetting::kOwn;
  in.one_node = in.storage_local = false;
  in.own_bytes = 4 * in.needed_bytes;
  EXPECT_EQ(ChooseLoadReads(in).reads, LoadReads::kOwn);
  EXPECT_TRUE(ChooseLoadReads(in).fallback.empty());
}

TEST(ReadStrategyTest, FilesHeldOnSomeNodesOnlyAreReadOnce) {
  ReadStrategyInputs in = OwnReadsJob();
  in.files_everywhere = false;
  EXPECT_EQ(ChooseLoadReads(in).reads, LoadReads::kOnce);
  in.setting = LoadReadsSetting::kOwn;
  const ReadStrategy forced = ChooseLoadReads(in);
  EXPECT_EQ(forced.reads, LoadReads::kOnce);
  EXPECT_NE(forced.fallback.find("CKPT_LOAD_READS=own"), std::string::npos) << forced.fallback;
}

TEST(ReadStrategyTest, AmplificationInThousandths) {
  EXPECT_EQ(AmplificationMilli(4000, 1000), 4000u);
  EXPECT_EQ(AmplificationMilli(1001, 1000), 1001u);
  EXPECT_EQ(AmplificationMilli(0, 0), 1000u);
}

TEST(ReadStrategyTest, NumberedAsTheHeadersConstants) {
  EXPECT_EQ(static_cast<int>(LoadReads::kOnce), CKPT_LOAD_READS_ONCE);
  EXPECT_EQ(static_cast<int>(LoadReads::kOwn), CKPT_LOAD_READS_OWN);
}

TEST(ReadStrategyTest, SettingFromTheEnvironment) {
  const std::pair<const char*, LoadReadsSetting> cases[] = {{nullptr, LoadReadsSetting::kAuto},
                                                            {"", LoadReadsSetting::kAuto},
                                                            {"auto", LoadReadsSetting::kAuto},
                                                            {"once", LoadReadsSetting::kOnce},
                                                            {"own", LoadReadsSetting::kOwn}};
  for (const auto& [text, setting] : cases) {
    testing::ScopedEnv env(settings::kLoadReadsVar, text);
    Result<LoadReadsSetting> parsed = LoadReadsFromEnv();
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    EXPECT_EQ(*parsed, setting) << (text ? text : "unset");
  }
}

TEST(ReadStrategyTest, InvalidSettingIsRefusedNamingIt) {
  testing::ScopedEnv env(settings::kLoadReadsVar, "OWN");
  Result<LoadReadsSetting> parsed = LoadReadsFromEnv();
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), Code::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("CKPT_LOAD_READS='OWN'"), std::string::npos) << parsed.status().message();
}

TEST(ReadStrategyTest, NetworkFileSystemsAreNotLocal) {
  for (const int64_t remote : std::initializer_list<int64_t>{0x6969, 0xFF534D42, 0xFE534D42, 0x0BD00BD0, 0x47504653,
                                                             0x00C36400, 0x65735546, 0x01021997}) {
    EXPECT_FALSE(IsLocalFileSystem(remote)) << std::hex << remote;
  }
  EXPECT_FALSE(IsLocalFileSystem(static_cast<int32_t>(0xFF534D42)));  // CIFS where f_type is a signed 32-bit int
  for (const int64_t local :
       std::initializer_list<int64_t>{0xEF53, 0x58465342, 0x9123683E, 0x01021994}) {  // ext4, XFS, Btrfs, tmpfs
    EXPECT_TRUE(IsLocalFileSystem(local)) << std::hex << local;
  }
}

TEST(ReadStrategyTest, ObjectStorageIsNotLocalAndMemoryIs) {
  EXPECT_FALSE(StorageIsLocal("s3://bucket/prefix/step-1"));
  EXPECT_TRUE(StorageIsLocal("/dev/shm"));
  EXPECT_FALSE(StorageIsLocal("/no/such/directory"));
}

// One F32 chunk of 1000 elements in blocks of 1024 bytes: 4000 bytes, the last block 928.
TensorRecord Vector() {
  TensorRecord t;
  t.key = "v";
  t.dtype = CKPT_DTYPE_F32;
  t.shape = {1000};
  ChunkRecord chunk;
  chunk.box = Box{{0}, {1000}};
  chunk.bytes.byte_length = 4000;
  chunk.bytes.block_size = 1024;
  chunk.bytes.block_checksums.assign(4, 0);
  t.chunks.push_back(chunk);
  return t;
}

ChunkConsumer Elements(uint64_t first, uint64_t count) {
  return ChunkConsumer{Box{{first}, {count}}, nullptr, Box{{first}, {count}}, -1};
}

TEST(ReadStrategyTest, OwnReadsReadWholeBlocksFromTheFirstNeededToTheLast) {
  const TensorRecord t = Vector();
  EXPECT_EQ(OwnReadBytes({ChunkFetch{&t, 0, {Elements(300, 10)}}}), 1024u);  // bytes 1200..1240: block 1
  EXPECT_EQ(OwnReadBytes({ChunkFetch{&t, 0, {Elements(250, 10)}}}), 2048u);  // bytes 1000..1040: blocks 0 and 1
  EXPECT_EQ(OwnReadBytes({ChunkFetch{&t, 0, {Elements(900, 100)}}}), 928u);  // the short last block
  EXPECT_EQ(OwnReadBytes({ChunkFetch{&t, 0, {Elements(0, 1), Elements(999, 1)}}}), 4000u);
  EXPECT_EQ(OwnReadBytes({ChunkFetch{&t, 0, {Elements(0, 10)}}, ChunkFetch{&t, 0, {Elements(0, 10)}}}), 2048u);
}

}  // namespace
}  // namespace ckpt::runtime
