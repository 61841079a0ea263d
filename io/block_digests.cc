#include "io/block_digests.h"

#include <openssl/evp.h>
#include <openssl/sha.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "io/checksum.h"

namespace ckpt::io {
namespace {

EVP_MD_CTX* Context(void* p) { return static_cast<EVP_MD_CTX*>(p); }

void Start(void* context) { EVP_DigestInit_ex(Context(context), EVP_sha256(), nullptr); }

}  // namespace

BlockDigester::BlockDigester(uint64_t block_size) : context_(EVP_MD_CTX_new()), block_size_(block_size) {
  Start(context_);
}

BlockDigester::~BlockDigester() { EVP_MD_CTX_free(Context(context_)); }

void BlockDigester::Update(const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (size > 0) {
    const size_t take = static_cast<size_t>(std::min<uint64_t>(size, block_size_ - in_block_));
    EVP_DigestUpdate(Context(context_), p, take);
    p += take, size -= take, in_block_ += take;
    if (in_block_ == block_size_) {
      unsigned char digest[kBlockDigestBytes];
      EVP_DigestFinal_ex(Context(context_), digest, nullptr);
      digests_.append(reinterpret_cast<const char*>(digest), kBlockDigestBytes);
      Start(context_);
      in_block_ = 0;
    }
  }
}

std::string BlockDigester::Finish() {
  if (in_block_ > 0) {
    unsigned char digest[kBlockDigestBytes];
    EVP_DigestFinal_ex(Context(context_), digest, nullptr);
    digests_.append(reinterpret_cast<const char*>(digest), kBlockDigestBytes);
    in_block_ = 0;
  }
  return std::move(digests_);
}

std::string DigestBlocks(const char* data, uint64_t size, uint64_t block_size, unsigned threads) {
  const uint64_t blocks = BlockCount(size, block_size);
  std::string out(blocks * kBlockDigestBytes, '\0');
  auto run = [&](uint64_t first, uint64_t last) {
    for (uint64_t b = first; b < last; ++b) {
      const uint64_t begin = b * block_size;
      SHA256(reinterpret_cast<const unsigned char*>(data + begin), std::min(block_size, size - begin),
             reinterpret_cast<unsigned char*>(out.data() + b * kBlockDigestBytes));
    }
  };
  const uint64_t parts = std::max<uint64_t>(1, std::min<uint64_t>(threads, blocks));
  std::vector<std::thread> helpers;
  for (uint64_t p = 1; p < parts; ++p) helpers.emplace_back(run, blocks * p / parts, blocks * (p + 1) / parts);
  run(0, blocks / parts);
  for (std::thread& t : helpers) t.join();
  return out;
}

}  // namespace ckpt::io
