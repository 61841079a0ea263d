// Damages one tensor's chunk records inside a checkpoint's MANIFEST and reseals the file's checksum, so that the
// file passes every check made when it is opened and only the checks of that tensor's chunks can find the damage:
// what a load that decodes chunks on demand must still refuse on every rank, naming the tensor.
// Usage: ckpt_manifest_tamper DIR KEY   (sets the block size of KEY's first chunk to 0)
#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "io/checksum.h"
#include "io/file_io.h"
#include "manifest.capnp.h"
#include "runtime/format/manifest.h"

namespace {

constexpr size_t kHeaderBytes = 32;  // runtime/format/manifest.h: magic, version, message length, message checksum

int Fail(const std::string& why) {
  std::fprintf(stderr, "ckpt_manifest_tamper: %s\n", why.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return Fail("usage: ckpt_manifest_tamper DIR KEY");
  const std::string dir = argv[1], key = argv[2];
  ckpt::Result<std::string> file = ckpt::io::ReadWholeFile(dir, ckpt::runtime::kManifestName, 1ull << 31);
  if (!file.ok()) return Fail(file.status().message());
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>((file->size() - kHeaderBytes) / sizeof(capnp::word));
  std::memcpy(words.begin(), file->data() + kHeaderBytes, file->size() - kHeaderBytes);
  capnp::FlatArrayMessageReader reader(words.asPtr());
  capnp::MallocMessageBuilder builder;
  builder.setRoot(reader.getRoot<ckpt::runtime::schema::Manifest>());
  bool found = false;
  for (auto tensor : builder.getRoot<ckpt::runtime::schema::Manifest>().getTensors()) {
    if (std::string(tensor.getKey().cStr()) != key || tensor.getChunks().size() == 0) continue;
    tensor.getChunks()[0].getBytes().setBlockSize(0);
    found = true;
  }
  if (!found) return Fail("no tensor '" + key + "' with chunks in " + dir);
  const kj::Array<capnp::word> message = capnp::messageToFlatArray(builder);
  const auto bytes = message.asBytes();
  std::string out = file->substr(0, kHeaderBytes);
  out.append(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  const uint64_t length = bytes.size(), checksum = ckpt::io::Checksum(out.data() + kHeaderBytes, length);
  for (int i = 0; i < 8; ++i) {
    out[16 + i] = static_cast<char>(length >> (8 * i));
    out[24 + i] = static_cast<char>(checksum >> (8 * i));
  }
  const std::string path = dir + "/" + ckpt::runtime::kManifestName;
  if (std::remove(path.c_str()) != 0) return Fail("cannot replace " + path);
  ckpt::Status written = ckpt::io::WriteFileDurably(path, out.data(), out.size());
  return written.ok() ? 0 : Fail(written.message());
}
