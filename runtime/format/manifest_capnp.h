// The MANIFEST's Cap'n Proto messages (manifest.capnp) to and from the model of runtime/format/manifest.h, and the
// bounded reading of a message; used by runtime/format/manifest.cc only.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/array.h>
#include <kj/exception.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "manifest.capnp.h"  // generated into the build's runtime/ directory
#include "runtime/format/manifest.h"

namespace ckpt::runtime::manifest_capnp {

// Whether a Manifest message holds the tensors' chunks and digests (formats 1 to 3) or leaves them to sections
// (format 4, and a decode that leaves them for later).
enum class Chunks { kInMessage, kElsewhere };

void FillManifest(schema::Manifest::Builder out, const Manifest& in, Chunks chunks);
// Chunks first to first + count - 1 of `tensor`, with its digests when `first` is 0.
void FillChunkList(schema::ChunkList::Builder out, const TensorRecord& tensor, size_t first, size_t count);

// These throw kj::Exception on a malformed message (ReadMessage turns it into kCorrupt).
std::vector<ChunkRecord> ToChunks(capnp::List<schema::Chunk>::Reader in);
std::vector<BoxDigests> ToDigests(capnp::List<schema::BoxDigests>::Reader in);
Result<Manifest> ToManifest(schema::Manifest::Reader in, Chunks chunks, const std::string& origin);

// Every capnp object of a well-formed manifest is read once; the factor and slack leave room for the reader's own
// accounting while still bounding the work a hostile message can cause to a multiple of its size.
inline constexpr uint64_t kTraversalWordsPerWord = 8;
inline constexpr uint64_t kTraversalSlackWords = 1024;
inline constexpr int kNestingLimit = 16;

// Calls `read` with the root of the one message that fills `words`, read as a `Root`, bounding the work a hostile
// message can cause; a malformed message (which Cap'n Proto reports by throwing) is kCorrupt naming `origin`.
template <typename Root, typename Read>
auto ReadMessage(kj::ArrayPtr<const capnp::word> words, const std::string& origin, Read&& read)
    -> decltype(read(typename Root::Reader())) {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = words.size() * kTraversalWordsPerWord + kTraversalSlackWords;
  options.nestingLimit = kNestingLimit;
  try {
    capnp::FlatArrayMessageReader reader(words, options);
    if (reader.getEnd() != words.end()) return Corrupt(origin + ": data after the end of the Cap'n Proto message");
    return read(reader.getRoot<Root>());
  } catch (const kj::Exception& e) {
    return Corrupt(origin + ": malformed message: " + e.getDescription().cStr());
  }
}

// Some bytes as the words FlatArrayMessageReader needs: in place when they are word-aligned, as a heap buffer is
// (std::string does not promise it), else an aligned copy. Keeps the bytes, and so cannot move: the words may point
// into them.
class AlignedWords {
 public:
  // The `length` bytes (a whole number of words) at `offset` of `bytes`.
  AlignedWords(std::string bytes, size_t offset, uint64_t length);
  AlignedWords(const AlignedWords&) = delete;
  AlignedWords& operator=(const AlignedWords&) = delete;
  kj::ArrayPtr<const capnp::word> words() const { return words_; }

 private:
  std::string bytes_;
  kj::Array<capnp::word> copy_;
  kj::ArrayPtr<const capnp::word> words_;
};

}  // namespace ckpt::runtime::manifest_capnp
