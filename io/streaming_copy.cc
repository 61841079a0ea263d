#include "io/streaming_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace ckpt::io {
namespace {

// The piece StreamingCopyChecksummed copies before hashing it: well inside the 32 KiB first-level data cache.
constexpr size_t kChecksummedPieceBytes = 16 * 1024;

}  // namespace

#if defined(__x86_64__)
namespace {

// The copy through non-temporal stores, without the fence that orders them before what follows.
void CopyUnfenced(void* dst, const void* src, size_t size) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  // Non-temporal stores need a 16-byte aligned destination: the bytes before the first such address go by memcpy.
  const size_t head = std::min(size, (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  size -= head;
  const size_t bulk = size / 64 * 64;
  for (size_t i = 0; i < bulk; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  std::memcpy(d + bulk, s + bulk, size - bulk);
}

// The stores are weakly ordered: the fence makes them visible before anything this thread does next (a release
// of the destination to another thread, say).
void FenceStreamingStores() { _mm_sfence(); }

}  // namespace

// SSE2 is in every x86-64 processor; wider stores move no more bytes per second once memory is the bound.
void StreamingCopy(void* dst, const void* src, size_t size) {
  if (size < kStreamingCopyMinBytes) {
    std::memcpy(dst, src, size);
    return;
  }
  CopyUnfenced(dst, src, size);
  FenceStreamingStores();
}
#else
namespace {
void CopyUnfenced(void* dst, const void* src, size_t size) { std::memcpy(dst, src, size); }
void FenceStreamingStores() {}
}  // namespace

void StreamingCopy(void* dst, const void* src, size_t size) { std::memcpy(dst, src, size); }
#endif

void StreamingCopyChecksummed(void* dst, const void* src, size_t size, BlockChecksummer& checksummer) {
  if (size < kStreamingCopyMinBytes) {
    std::memcpy(dst, src, size);
    checksummer.Update(src, size);
    return;
  }
  const size_t whole_blocks = checksummer.CopyWholeBlocks(dst, src, size);
  auto* d = static_cast<char*>(dst) + whole_blocks;
  const auto* s = static_cast<const char*>(src) + whole_blocks;
  size -= whole_blocks;
  for (size_t done = 0; done < size; done += kChecksummedPieceBytes) {
    const size_t piece = std::min(kChecksummedPieceBytes, size - done);
    CopyUnfenced(d + done, s + done, piece);
    checksummer.Update(s + done, piece);
  }
  FenceStreamingStores();
}

}  // namespace ckpt::io
