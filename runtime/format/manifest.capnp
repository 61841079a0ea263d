# The MANIFEST messages of checkpoint formats 1 to 4 (runtime/format/manifest.h says how the file lays them out).
# Field numbers are the format: append fields, never renumber or reuse.
@0xc3b1f0a4d2e5f697;

$import "/capnp/c++.capnp".namespace("ckpt::runtime::schema");

struct StoredBytes {
  fileIndex @0 :UInt32;
  fileOffset @1 :UInt64;
  byteLength @2 :UInt64;
  blockSize @3 :UInt64;
  blockChecksums @4 :List(UInt64);   # XXH3-64 of each block_size block of the byte range (uncompressed)
  # Format 3: 0 the bytes as they are; 1 each block compressed on its own (io/block_codec.h), the elements' bytes
  # grouped by byteGroups, the blocks' stored forms one after another from fileOffset.
  codec @5 :UInt8;
  byteGroups @6 :UInt8;
  storedSizes @7 :List(UInt32);      # with a codec, per block: its stored size (the block's own length: raw)
}

struct Chunk {
  offset @0 :List(UInt64);
  shape @1 :List(UInt64);
  bytes @2 :StoredBytes;
}

struct Tensor {
  key @0 :Text;
  dtype @1 :Int32;                   # CKPT_DTYPE_* numbering
  shape @2 :List(UInt64);
  chunks @3 :List(Chunk);
  digests @4 :List(BoxDigests);      # boxes as the save wrote them (its units), which chunks may split
}

struct ObjectPiece {
  index @0 :List(UInt64);
  bytes @1 :StoredBytes;
}

struct Object {
  key @0 :Text;
  gridShape @1 :List(UInt64);
  pieces @2 :List(ObjectPiece);
}

struct Common {
  key @0 :Text;
  union {
    inline @1 :Data;
    stored @2 :StoredBytes;
  }
}

struct DataFile {
  name @0 :Text;                     # relative, under data/
  size @1 :UInt64;
  # Empty: the file is this checkpoint's. Otherwise the name of the sibling checkpoint directory (same parent) that
  # holds it, which an incremental save refers to instead of writing the same bytes again (format 2).
  checkpoint @2 :Text;
}

# The SHA-256 of each block_size block of one box's row-major bytes, as the save that wrote the box hashed them
# (CKPT_SAVE_INCREMENTAL): what a later save compares its own blocks with.
struct BoxDigests {
  offset @0 :List(UInt64);
  shape @1 :List(UInt64);
  blockSize @2 :UInt64;
  sha256 @3 :Data;                   # 32 bytes per block
}

struct KeyValue {
  key @0 :Text;
  value @1 :Text;
}

# Format 4: where the chunk records of a tensor lie. They are not in the Manifest message but in sections after it,
# one ChunkList message each, back to back in the order of this index (a section starts where the one before it
# ends), so that a rank reads only the sections of the tensors it needs.
struct ChunkSection {
  tensor @0 :UInt32;                 # index into Manifest.tensors; sections are sorted by it
  firstChunk @1 :UInt32;             # the tensor's sections hold its chunks in order, the first from chunk 0
  chunkCount @2 :UInt32;
  length @3 :UInt64;                 # bytes, a whole number of words
  checksum @4 :UInt64;               # XXH3-64 of the section's bytes
}

# One section: chunks firstChunk to firstChunk + chunkCount - 1 of its tensor, and in the tensor's first section
# the tensor's digests.
struct ChunkList {
  chunks @0 :List(Chunk);
  digests @1 :List(BoxDigests);
}

struct Manifest {
  formatMajor @0 :UInt32;
  formatMinor @1 :UInt32;
  libraryVersion @2 :Text;
  checkpointId @3 :Text;
  worldSize @4 :UInt32;
  nodeCount @5 :UInt32;
  metadata @6 :List(KeyValue);
  files @7 :List(DataFile);
  tensors @8 :List(Tensor);
  objects @9 :List(Object);
  common @10 :List(Common);
  chunkSections @11 :List(ChunkSection);   # format 4; the tensors' own chunks and digests are then empty
}
