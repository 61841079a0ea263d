// Writes the fuzzers' seed inputs, built from real messages with the product's own encoders, into
// <dir>/<target>/seed-*: `fuzz_write_seeds tests/fuzz/corpus` regenerates the seeds in the tree after a protocol
// change, and the fuzz_seeds_are_current test fails until someone does. (Inputs of crashes found and fixed sit
// beside the seeds as crash-*, and are kept.)
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "collectives/store/store_handshake.h"
#include "collectives/store/tcp_store_wire.h"
#include "common/bytes.h"
#include "io/worker_protocol.h"
#include "runtime/core/dtype.h"
#include "runtime/format/manifest.h"
#include "runtime/format/safetensors.h"

namespace {

namespace wire = ckpt::coll::store_wire;
using ckpt::ByteWriter;

class SeedWriter {
 public:
  explicit SeedWriter(std::filesystem::path dir) : dir_(std::move(dir)) {}

  void Write(const std::string& target, const std::string& name, const std::string& bytes) {
    std::filesystem::create_directories(dir_ / target);
    std::ofstream(dir_ / target / ("seed-" + name), std::ios::binary) << bytes;
  }

 private:
  std::filesystem::path dir_;
};

// The proof in a seed answers no real challenge: the fuzzer signs each hello again with the nonce its server sent.
std::string Hello(int32_t rank, int32_t world_size, bool auxiliary) {
  ckpt::coll::store_handshake::Hello hello;
  hello.rank = rank;
  hello.world_size = world_size;
  hello.timeout_ms = 1000;
  hello.auxiliary = auxiliary;
  hello.client_nonce = std::string(32, 'n');
  const std::string payload = ckpt::coll::store_handshake::EncodeHello(hello, "seed-secret", std::string(32, '\0'));
  return wire::EncodeFrame(wire::MessageType::kHello, payload);
}

// A relay's hello for `rank`, listening at an address nobody connects to in a fuzzed run.
std::string RelayHello(int32_t rank, int32_t world_size) {
  ckpt::coll::store_handshake::Hello hello;
  hello.rank = rank;
  hello.world_size = world_size;
  hello.timeout_ms = 1000;
  hello.relay = true;
  hello.relay_host = "127.0.0.1";
  hello.relay_port = 9;
  hello.client_nonce = std::string(32, 'n');
  const std::string payload = ckpt::coll::store_handshake::EncodeHello(hello, "seed-secret", std::string(32, '\0'));
  return wire::EncodeFrame(wire::MessageType::kHello, payload);
}

// `frame`, as a relay carries it for the rank of `channel`.
std::string Relayed(uint32_t channel, const std::string& frame) {
  ByteWriter w;
  w.U32(channel);
  return wire::EncodeFrame(wire::MessageType::kRelayed, w.data() + frame);
}

std::string Request(wire::MessageType type, const std::string& key, const std::string& value) {
  ByteWriter w;
  if (type == wire::MessageType::kAllGather || type == wire::MessageType::kAllToAll ||
      type == wire::MessageType::kBroadcast) {
    w.U64(1);     // sequence
    w.U64(1000);  // timeout ms
    w.Bytes(value);
  } else {
    w.Bytes(key);
    if (type == wire::MessageType::kSet) w.Bytes(value);
    if (type == wire::MessageType::kWait) w.U64(1000);
  }
  return wire::EncodeFrame(type, w.data());
}

// Byte 0 of a store input picks the world size (1 + byte % 3) and whether its ranks come through relays (byte / 12 %
// 2); connections are separated by "CKPTNEXT".
void WriteStoreSeeds(SeedWriter& out) {
  using wire::MessageType;
  const std::string goodbye = wire::EncodeFrame(MessageType::kGoodbye, {});
  out.Write("store", "one-rank-set-get-wait-allgather",
            std::string(1, '\0') + Hello(0, 1, false) + Request(MessageType::kSet, "k", "v") +
                Request(MessageType::kGet, "k", "") + Request(MessageType::kWait, "k", "") +
                Request(MessageType::kAllGather, "", "mine") + goodbye);
  out.Write("store", "two-ranks-allgather",
            std::string(1, '\1') + Hello(0, 2, false) + Request(MessageType::kAllGather, "", "a") + "CKPTNEXT" +
                Hello(1, 2, false) + Request(MessageType::kAllGather, "", "b") + goodbye);
  out.Write("store", "wait-answered-by-another-rank",
            std::string(1, '\1') + Hello(0, 2, false) + Request(MessageType::kWait, "later", "") + "CKPTNEXT" +
                Hello(1, 2, false) + Request(MessageType::kSet, "later", "now"));
  // An all-to-all's contribution: the messages that are not empty, each with the rank it goes to.
  auto messages = [](const std::string& to_0, const std::string& to_1) {
    ByteWriter w;
    w.U32((to_0.empty() ? 0 : 1) + (to_1.empty() ? 0 : 1));
    for (const auto& [to, message] : {std::pair<int32_t, std::string>{0, to_0}, {1, to_1}}) {
      if (message.empty()) continue;
      w.I32(to);
      w.Bytes(message);
    }
    return w.Take();
  };
  out.Write("store", "two-ranks-alltoall-broadcast-delete",
            std::string(1, '\1') + Hello(0, 2, false) + Request(MessageType::kAllToAll, "", messages("", "0>1")) +
                Request(MessageType::kSet, "k", "v") + Request(MessageType::kDelete, "k", "") + "CKPTNEXT" +
                Hello(1, 2, false) + Request(MessageType::kAllToAll, "", messages("1>0", "")) +
                Request(MessageType::kBroadcast, "", "") + goodbye);
  // Two ranks in rows of 2: rank 1 relays itself, its channel opened, an allgather, a death check and a goodbye.
  ByteWriter open;
  open.I32(1);
  open.U8(0);
  open.U64(1000);
  out.Write("store", "two-ranks-one-relayed",
            std::string(1, '\x0d') + Hello(0, 2, false) + Request(MessageType::kAllGather, "", "a") + "CKPTNEXT" +
                RelayHello(1, 2) + Relayed(0, wire::EncodeFrame(MessageType::kChannelOpen, open.data())) +
                Relayed(0, Request(MessageType::kAllGather, "", "b")) +
                Relayed(0, Request(MessageType::kGet, wire::kPeersAliveKey, "")) + Relayed(0, goodbye));
  out.Write(
      "store", "auxiliary-connection",
      std::string(1, '\0') + Hello(0, 1, false) + "CKPTNEXT" + Hello(0, 1, true) + Request(MessageType::kGet, "k", ""));
}

void WriteWorkerProtocolSeeds(SeedWriter& out) {
  using namespace ckpt::io;
  const std::string piece_sizes(1, '\7');  // byte 0 of an input: the stream is fed in pieces of 8 bytes
  WriteJob write;
  write.path = "/ckpt/step-1.tmp/data/0-0.bin";
  write.create = true;
  write.finish = true;
  write.final_size = 10000;
  write.block_size = 4096;
  write.segments = {{0, 0, 5000}, {8192, 8192, 1808}};
  ReadJob read;
  read.root = "/ckpt/step-1";
  read.path = "/ckpt/step-1/data/0-0.bin";
  read.block_size = 4096;
  read.segments = write.segments;
  read.expected_checksums = {{1, 2}, {3}};
  WriteResult result;
  result.checksums = read.expected_checksums;
  out.Write("worker_protocol", "requests",
            piece_sizes + EncodeWriteRequest(1, write) + EncodeReadRequest(2, read) + EncodeAbandonRequest(3, "/ckpt"));
  out.Write("worker_protocol", "replies",
            piece_sizes + EncodeReady(ReadyMessage{}) + EncodeWriteReply(1, result, "io_uring") +
                EncodeWriteReply(2, ckpt::NoSpace("disk full"), "pwrite") +
                EncodeReadReply(3, ckpt::Corrupt("bad block"), ReadFailure{1, 2}, "io_uring") +
                EncodeAbandonReply(4, ckpt::Status::Ok(), "io_uring"));
}

// Stored bytes in file `file` at `offset`, with one checksum; compressed when `codec` is set.
ckpt::runtime::StoredBytes Stored(uint32_t file, uint64_t offset, uint64_t length, uint64_t checksum, uint8_t codec = 0,
                                  uint8_t byte_groups = 0, ckpt::runtime::StoredSizes sizes = {}) {
  ckpt::runtime::StoredBytes stored;
  stored.file_index = file;
  stored.file_offset = offset;
  stored.byte_length = length;
  stored.block_size = 4096;
  stored.block_checksums = {checksum};
  stored.codec = codec;
  stored.byte_groups = byte_groups;
  stored.stored_sizes = std::move(sizes);
  return stored;
}

void WriteManifestSeeds(SeedWriter& out) {
  using namespace ckpt::runtime;
  Manifest m;
  m.library_version = "0.1.0";
  m.checkpoint_id = "seed";
  m.world_size = 1;
  m.node_count = 1;
  m.metadata = {{"step", "1"}};
  m.files = {{"data/0-0.bin", 4096 + 24}};
  const int32_t f32 = static_cast<int32_t>(DType::kF32);
  m.tensors.push_back(TensorRecord{"w", f32, {2, 3}, {ChunkRecord{Box{{0, 0}, {2, 3}}, Stored(0, 4096, 24, 7)}}});
  m.common.push_back(CommonRecord{"config", true, "lr=0.1", {}});
  out.Write("manifest", "one-tensor", EncodeManifest(m).value());
  // An incremental checkpoint's: half of "w" in a sibling checkpoint's file, and the digests of the box it wrote.
  m.files.push_back(DataFileRecord{"data/0-0.bin", 4096 + 12, "step-000000000001"});
  m.format_major = FormatMajorFor(m);
  m.tensors[0].chunks = {ChunkRecord{Box{{0, 0}, {1, 3}}, Stored(1, 4096, 12, 8)},
                         ChunkRecord{Box{{1, 0}, {1, 3}}, Stored(0, 4096, 12, 9)}};
  m.tensors[0].digests = {BoxDigests{Box{{0, 0}, {2, 3}}, 4096, std::string(kDigestBytes, 'd')}};
  out.Write("manifest", "incremental", EncodeManifest(m).value());
  // A compressed checkpoint's: "w" in two chunks of one file, the first coded as F32 (its 12 bytes in 9), the
  // second coded ungrouped and stored raw.
  m.files = {{"data/0-0.bin", 4096 + 9 + 12}};
  m.tensors[0].chunks = {ChunkRecord{Box{{0, 0}, {1, 3}}, Stored(0, 4096, 12, 8, 1, 4, {9})},
                         ChunkRecord{Box{{1, 0}, {1, 3}}, Stored(0, 4096 + 9, 12, 9, 1, 1, {12})}};
  m.tensors[0].digests.clear();
  m.format_major = FormatMajorFor(m);
  out.Write("manifest", "compressed", EncodeManifest(m).value());
  // The same in sections (format 4, which a manifest of thousands of chunks takes): "w" in one section, a second
  // tensor "x" with digests in another.
  m.files.push_back(DataFileRecord{"data/1-0.bin", 4096 + 8, ""});
  m.tensors.push_back(TensorRecord{"x", f32, {2}, {ChunkRecord{Box{{0}, {2}}, Stored(1, 4096, 8, 10)}}});
  m.tensors[1].digests = {BoxDigests{Box{{0}, {2}}, 4096, std::string(kDigestBytes, 'e')}};
  m.format_major = kFormatMajorWithSections;
  out.Write("manifest", "sectioned", EncodeManifest(m).value());
}

// A safetensors input is a whole file: the header, then the data its tensors tile (zeros).
void WriteSafetensorsSeeds(SeedWriter& out) {
  using namespace ckpt::runtime;
  const auto file = [](const std::vector<SafetensorsTensor>& tensors,
                       const std::vector<std::pair<std::string, std::string>>& metadata, uint64_t alignment) {
    const uint64_t data_length = tensors.empty() ? 0 : tensors.back().end;
    return EncodeSafetensorsHeader(tensors, metadata, alignment).value() + std::string(data_length, '\0');
  };
  const auto dtype = [](DType d) { return static_cast<int32_t>(d); };
  out.Write("safetensors_header", "several-dtypes-with-metadata",
            file({{"model.embed.weight", dtype(DType::kBF16), {4, 2}, 0, 16},
                  {"model.norm.weight", dtype(DType::kF32), {2}, 16, 24},
                  {"model.scale", dtype(DType::kF8E8M0), {3}, 24, 27},
                  {"model.step", dtype(DType::kI64), {}, 27, 35}},
                 {{"format", "pt"}, {"step", "7"}}, 8));
  out.Write("safetensors_header", "zero-size-tensor",
            file({{"empty", dtype(DType::kF16), {0, 3}, 0, 0}, {"mask", dtype(DType::kBool), {5}, 0, 5}}, {}, 64));
  out.Write("safetensors_header", "no-tensors", file({}, {}, 8));
  HfIndex index;
  index.total_size = 35;
  index.weight_map = {{"lm_head.weight", "model-00002-of-00002.safetensors"},
                      {"model.embed.weight", "model-00001-of-00002.safetensors"}};
  out.Write("safetensors_header", "index", EncodeHfIndex(index));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  SeedWriter out(argv[1]);
  WriteStoreSeeds(out);
  WriteWorkerProtocolSeeds(out);
  WriteManifestSeeds(out);
  WriteSafetensorsSeeds(out);
  return 0;
}
